"""Fences: eager code outside sliced calls sees the variable state eager would have.

A sliced call returns before the graph has finished it, so plain host code that reads or
writes a variable right after (`w.numpy()`, `w.assign(...)`) could race with that call's
updates. The sink acknowledges every call it finishes; this module wraps the eager entry
points of tf.Variable (reads and writes) so that such an access first waits until the
graph has finished every call sent so far. Inside a sliced call the slicer's own
barriers order variable access, so no fence is taken there.
"""
from __future__ import annotations

import functools

from tensorflow.python.eager import context
from tensorflow.python.ops import resource_variable_ops

_ENTRY_POINTS = ("_read_variable_op", "assign", "assign_add", "assign_sub", "scatter_add",
                 "scatter_sub", "scatter_update", "scatter_nd_update", "scatter_nd_add",
                 "scatter_nd_sub", "scatter_max", "scatter_min")
_installed = False


def install(session) -> None:
    """Wrap the variable entry points once per process, for `session`."""
    global _installed
    if _installed:
        return
    _installed = True
    cls = resource_variable_ops.BaseResourceVariable
    for name in _ENTRY_POINTS:
        original = getattr(cls, name, None)
        if original is not None:
            setattr(cls, name, _fenced(original, session))


def _fenced(method, session):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if session.in_flight() and context.executing_eagerly():
            session.fence()
        return method(self, *args, **kwargs)
    return wrapper
