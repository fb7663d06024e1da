"""Calls of a user's Keras layer whose `call` takes `*args`/`**kwargs` (d2l's
`Module.call(self, X, *args, **kwargs)`): slicer/layers.py judges such a `call` for calls
that pass nothing there. `site(inf, node)` checks a call of such a layer where it is made:
one with keywords, or more positional arguments than `call` names, stays on the host; one
that spreads a tuple (`self(*batch[:-1])`) is checked when the TF part is traced
(Key.ARITY: `_gpe_rt.call_exactly`, tfprog/usercalls.py), where the tuple's length is known.
"""
from __future__ import annotations

import weakref

import gast

from . import anno
from .anno import Key

# layer -> how many positional parameters its `call` names (after self)
VARARGS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def site(inf, node: gast.Call) -> bool:
    """False where a call of a layer judged for empty `*args`/`**kwargs` may pass something
    there (it is host work then); True otherwise (Key.ARITY set where it is checked when
    traced)."""
    try:
        named = VARARGS.get(inf.value_of(node.func))
    except TypeError:  # an object without weak references: no such layer
        return True
    if named is None:
        return True
    if node.keywords:
        return False
    if any(isinstance(a, gast.Starred) for a in node.args):
        anno.set(node, Key.ARITY, named)
        return True
    return len(node.args) <= named
