"""Gates no profile call reached (JANUS's speculation on untaken paths).

A gate where the host sends the TF part values it computed mid-call gets its channel's
specs from the profile calls that reached it (host/speculation/speculation.py). When none
did (a branch never taken, a tensor loop that never iterated, an early return on every
profile call), the variant is built speculating that no call gets there: the gate's specs
are `Unreached` (empty), the TF part takes only the flag there and never runs what
follows it (TraceRuntime.gate: not traced), and a host that gets there hands the call over
to its eager code (a rescue: host/variants/stubs.py), recording what it would have sent,
so the variant is built again knowing it.
"""
from __future__ import annotations

from ..slicer.plan import ChannelKind, SlicePlan
from .channels import NONE_SPEC


class Unreached(list):
    """The specs of a gate no profile call reached: none (the queue carries only the
    flag, which the host never sets to 1 there: it rescues or cancels)."""


def untraced(plan: SlicePlan, specs: dict) -> None:
    """Give the channels the trace never met (behind an Unreached gate) specs for their
    queues, which no call uses: a TF->host value a bool, a token nothing, a rescue none.
    Only where there is an Unreached gate (else a channel left out is a defect, raised
    when the part is registered)."""
    if not any(type(s) is Unreached for s in specs.values()):
        return
    for channel in plan.channels:
        if channel.index not in specs:
            specs[channel.index] = ([NONE_SPEC] if channel.kind == ChannelKind.OUTPUT
                                    else None if channel.kind == ChannelKind.RESCUE else [])
