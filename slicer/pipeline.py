"""The slicing pipeline: every pass, in order. Set GPE_CHECK=1 to check the tree between passes."""
from __future__ import annotations

import os
from typing import Callable

import gast

from gpe.slicer import activity, crossings, hoist, kinds, partition, placement
from gpe.slicer.errors import Refusal
from gpe.slicer.facts import Facts
from gpe.slicer.parser import parse
from gpe.slicer.plan import SlicePlan


def slice_function(fn: Callable, facts: Facts) -> SlicePlan:
    """Slice `fn` under `facts`. Raises Refusal when it cannot (it then runs eagerly)."""
    parsed = parse(fn)
    _check_args(parsed)
    kinds.resolve(parsed, facts)        # kinds of every expression, from facts + namespace
    hoist.transform(parsed)             # needs kinds: split mixed TF/host statements
    _checkpoint(parsed, "hoist")
    kinds.resolve(parsed, facts)        # again: hoisting added temporaries
    activity.resolve(parsed.node)       # reads/writes per statement
    placement.resolve(parsed, facts)    # needs kinds + activity: TF, host or both
    crossings.resolve(parsed, facts)    # needs placement: channels, gates, barriers
    return partition.transform(parsed, facts)  # needs crossings: the three programs


def _check_args(parsed) -> None:
    for node in _own_scope(parsed.node):
        if isinstance(node, (gast.Yield, gast.YieldFrom, gast.Await)):
            raise Refusal("generator", "generators and coroutines are not sliced yet", "",
                          parsed.filename, node.lineno)


def _own_scope(fn: gast.FunctionDef):
    stack = list(gast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (gast.FunctionDef, gast.Lambda, gast.ClassDef)):
            stack.extend(gast.iter_child_nodes(node))


def _checkpoint(parsed, after: str) -> None:
    if os.environ.get("GPE_CHECK"):
        try:
            compile(gast.gast_to_ast(gast.Module(body=[parsed.node], type_ignores=[])),
                    parsed.filename, "exec")
        except (SyntaxError, TypeError, ValueError) as exc:
            raise AssertionError(f"slicer produced an invalid tree after {after}: {exc}")
