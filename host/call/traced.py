"""A gpe function's calls as a profile's events and `gpe run --report`'s account.

While host/runtime/trace.py's TRACER is on (a `gpe.profile`, `gpe run --report`),
`SlicedFunction.__call__` is `_traced_call` here, which runs the call inside its event;
when TRACER goes off it is SlicedFunction's own again. So a call pays nothing for this
when nothing records it, not even an attribute check.
"""
from __future__ import annotations

from ..runtime.trace import TRACER
from .function import AGAIN, SlicedFunction

_call = SlicedFunction.__call__


def _traced_call(self, *args, **kwargs):
    return TRACER.call(self, args, kwargs, AGAIN)


def _switch(on: bool) -> None:
    SlicedFunction.__call__ = _traced_call if on else _call


TRACER.switches.append(_switch)
_switch(TRACER.on)
