"""Calls of the user's own callables in a TF part's trace.

`plain(fn)`: the user's own function behind one gpe wraps (`gpe run`). `call_exactly(layer,
named, *args)`: the call of a user's Keras layer whose `call` takes `*args`/`**kwargs`,
judged for calls that pass nothing there (slicer/arity.py), made with a spread tuple:
traced only where the tuple fills the named parameters alone (a trace that fails leaves
the function to run eagerly).
"""
from __future__ import annotations

import functools

import tensorflow as tf


def plain(fn):
    """The user's own function behind one gpe wraps (`gpe run`): the callee's body was
    found to be all TF work, so the TF part traces it as it is."""
    if not getattr(type(fn), "_gpe_sliced", False):
        return fn
    owner = getattr(fn, "__self__", None)
    if owner is not None:  # a sliced method bound to its instance
        return functools.partial(fn.__func__.__wrapped__, owner)
    return fn.__wrapped__


def call_exactly(layer, named: int, *args):
    if len(args) > named:
        raise TypeError(f"{type(layer).__name__} is called with {len(args)} positional "
                        f"arguments, its `call` names {named}: what goes to its *args "
                        "would be traced once")
    return layer(*args)


def known(value, dims, callee: str):
    """`value`, given to a callee that reads these static dimensions of it (`dims`: their
    indices, () its rank, None every one: slicer/shapes.py), where the trace knows them; a
    dimension only eager knows (the TF part computed it from a number the host sends)
    fails the trace, and the function runs eagerly instead of the callee reading None."""
    shape = getattr(value, "shape", None)
    if not isinstance(value, tf.Tensor) or shape is None:
        return value
    if shape.rank is None or (not shape.is_fully_defined() if dims is None else any(
            not -shape.rank <= d < shape.rank or shape[d] is None for d in dims)):
        raise TypeError(f"{callee} reads the static shape of an argument that is {shape} "
                        "when traced (eager knows every dimension): it runs eagerly")
    return value
