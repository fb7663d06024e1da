"""Calls of the user's own callables in a TF part's trace.

`plain(fn)`: the user's own function behind one gpe wraps (`gpe run`). `call_exactly(layer,
named, *args)`: the call of a user's Keras layer whose `call` takes `*args`/`**kwargs`,
judged for calls that pass nothing there (slicer/arity.py), made with a spread tuple:
traced only where the tuple fills the named parameters alone (a trace that fails leaves
the function to run eagerly).
"""
from __future__ import annotations

import functools


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
