"""A gpe function's calls, values its host part takes at once and its sends, as a
profile's events and `gpe run --report`'s account.

While host/runtime/trace.py's TRACER is on (a `gpe.profile`, `gpe run --report`),
`SlicedFunction.__call__` is `_traced_call` here, which runs the call inside its event;
`HostChannel.recv_now` (a Python number or a structure of tensors the host takes from the
graph mid-call) is `_traced_recv_now`, a wait event; and `Interruptible.enqueue` (every
send to the graph, which waits while the graph is 64 calls behind) is `_traced_enqueue`,
charged as sending. When TRACER goes off they are their classes' own again. So none pays
anything for this when nothing records, not even an attribute check.
"""
from __future__ import annotations

from ..runtime.channel import HostChannel
from ..runtime.interrupt import Interruptible
from ..runtime.trace import TRACER
from .function import AGAIN, SlicedFunction

_call = SlicedFunction.__call__
_recv_now = HostChannel.recv_now
_enqueue = Interruptible.__dict__["enqueue"]  # (a staticmethod)
_enqueue_function = Interruptible.enqueue


def _traced_call(self, *args, **kwargs):
    return TRACER.call(self, args, kwargs, AGAIN)


def _traced_recv_now(self):
    return TRACER.receive(self, _recv_now)


@staticmethod
def _traced_enqueue(handle, components) -> None:
    TRACER.send(_enqueue_function, handle, components)


def _switch(on: bool) -> None:
    SlicedFunction.__call__ = _traced_call if on else _call
    HostChannel.recv_now = _traced_recv_now if on else _recv_now
    Interruptible.enqueue = _traced_enqueue if on else _enqueue


TRACER.switches.append(_switch)
_switch(TRACER.on)
