"""gpe.host.runtime: the session and its sinks, and the values that cross.

Owns the one `Session` (its graph of TF parts, the sink threads that run them in groups,
their instantiation), the host end of each channel (`HostChannel`) and the `Pending`
values it hands out, the fences that make plain eager code see the variable state eager
would, the watchdog and Ctrl-C handling that keep every wait wakeable, graph errors told
as eager tells them, the op counters, the replay of layers' loss lists after a call, and
the host events a profile records (trace.py: their hooks sit here, at the waits and fences).
It imports no other part of gpe.host (only gpe.tfprog and gpe.slicer): everything else
runs on top of it.
"""
