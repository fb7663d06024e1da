"""Fences: eager code outside sliced calls sees the variable state eager would have.

A sliced call returns before the graph has finished it, so plain host code that reads or
writes a variable right after (`w.numpy()`, `w.assign(...)`, `Checkpoint.read`, an
optimizer's update outside the function) could race with that call's updates. The sink
acknowledges every call it finishes; this module wraps the eager entry points of the ops
that read or write a resource variable (`gen_resource_variable_ops`: reads, assigns,
gathers, scatters; `gen_training_ops`: the fused optimizer updates), which every
variable class and library goes through, so that such an op first waits until the graph
has finished the calls sent so far (`Session.fence_target` says which: never the running
call from a thread that may work for it).

Most eager ops given a variable itself (`tf.reduce_sum(v)`, `tf.square(v)`,
`tf.stack([v])`, `tf.linalg.matvec(v, x)`) read it without any of those: TF's C++ fast
path (`TFE_Py_FastPathExecute`, `ConvertToTensor` -> `ReadVariableOp` in
pywrap_tfe_src.cc) builds and runs the ReadVariableOp itself after taking the variable's
`_dtype` and `_handle` attributes. So `_handle` of every resource variable is a property
that takes the same fence (the value stays in the instance's dictionary).

A `tf.function` (the user's own, Keras's `predict` and `fit` steps) reads and writes the
variables it captured through the handles captured when it was traced: none of the above
runs when it is called. So an eager call of a concrete function (`_call_flat`, which
every call of a `tf.function` or `ConcreteFunction` reaches) that is given or captures a
resource takes the fence too.
Inside a sliced call the slicer's own barriers order variable access, so no fence is
taken there; nor while a graph is being traced.
"""
from __future__ import annotations

import functools
import time
import types

from tensorflow.python.eager import context
from tensorflow.python.eager.polymorphic_function import concrete_function
from tensorflow.python.framework import dtypes
from tensorflow.python.ops import (gen_resource_variable_ops, gen_training_ops,
                                   resource_variable_ops)

from .trace import TRACER

_installed = False


def _variable_ops(module: types.ModuleType, prefixes: tuple[str, ...]):
    for name in dir(module):
        if name.startswith(prefixes) and not name.endswith("_eager_fallback") and \
                callable(getattr(module, name)):
            yield name


def install(session) -> None:
    """Wrap the variable ops once per process, for `session`."""
    global _installed
    if _installed:
        return
    _installed = True
    for module, prefixes in (
            (gen_resource_variable_ops, ("read_variable_op", "assign_variable_op",
                                         "assign_add_variable_op", "assign_sub_variable_op",
                                         "resource_gather", "resource_scatter_")),
            (gen_training_ops, ("resource_apply_", "resource_sparse_apply_"))):
        for name in _variable_ops(module, prefixes):
            setattr(module, name, _fenced(getattr(module, name), session))
    resource_variable_ops.BaseResourceVariable._handle = _fenced_handle(session)
    function = concrete_function.ConcreteFunction
    function._call_flat = _fenced_call(function._call_flat, session)  # noqa: SLF001


def _wait(session) -> None:
    """On every eager variable access of the program: the cheap test first."""
    if session.sent > session.acknowledged and context.executing_eagerly():
        target = session.fence_target()
        if target > session.acknowledged:
            began = time.perf_counter()
            if TRACER.on:  # a profile or `gpe run --report`: the fence is an event
                TRACER.fence(session, target)
            else:
                session.fence(target)
            session.fenced_s += time.perf_counter() - began  # (adaptive.py counts it)


def _fenced_handle(session) -> property:
    """`variable._handle`, fenced: a property (a data descriptor, so it is used for the
    variables made before too) over the same entry of the instance's dictionary."""
    def get(self):
        if session.sent > session.acknowledged:
            _wait(session)
        try:
            return self.__dict__["_handle"]
        except KeyError:
            raise AttributeError("_handle") from None

    def put(self, value):
        self.__dict__["_handle"] = value

    def drop(self):
        self.__dict__.pop("_handle", None)
    return property(get, put, drop)


def _fenced(op, session):
    @functools.wraps(op)
    def wrapper(*args, **kwargs):
        if session.sent > session.acknowledged:
            _wait(session)
        return op(*args, **kwargs)
    return wrapper


def _fenced_call(call_flat, session):
    @functools.wraps(call_flat)
    def wrapper(self, tensor_inputs, captured_inputs):
        if session.sent > session.acknowledged and (
                _any_resource(captured_inputs) or _any_resource(tensor_inputs)):
            _wait(session)
        return call_flat(self, tensor_inputs, captured_inputs)
    return wrapper


def _any_resource(tensors) -> bool:
    return any(getattr(t, "dtype", None) == dtypes.resource for t in tensors)
