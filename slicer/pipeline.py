"""The slicing pipeline: every pass, in order. Set GPE_CHECK=1 to check the tree between passes.

`analyse(parsed, facts, until=...)` runs the analyses and rewrites on a parsed function,
stopping after the pass named by `until` (callee analysis stops after placement);
`slice_function(fn, facts)` parses, analyses all and partitions.
"""
from __future__ import annotations

import copy
import dataclasses
import enum
import functools
import os
from typing import Any, Callable

import gast

from . import activity, anno, callees, crossings, globalwrites, hoist, kinds, nodes, outline, partition, placement, splice
from .anno import Key
from .errors import Refusal
from .facts import Facts, Kind
from .parser import Parsed, parse
from .plan import SlicePlan


class Pass(enum.Enum):
    """The analysis passes, in the order `analyse` runs them."""

    KINDS = "kinds.resolve: the kind of every expression"
    HOIST = "hoist.transform: mixed TF/host statements split"
    RETYPE = "kinds.resolve again: kinds of the temporaries hoisting added"
    ACTIVITY = "activity.resolve: names each statement reads and writes"
    PLACEMENT = "placement.resolve: TF, host or both, with the reason"
    CROSSINGS = "crossings.resolve: channels, gates, barriers"


def slice_function(fn: Callable, facts: Facts) -> SlicePlan:
    """Slice `fn` under `facts`. Raises Refusal when it cannot (it then runs eagerly)."""
    parsed = _analysed(fn, facts)
    for _ in range(3):  # each pass can only add names; few programs need a second one
        numbers = _host_numbers(parsed.node) - facts.host_numbers
        if not numbers:
            break  # analysed again with those numbers sent, not fixed (see below)
        facts = dataclasses.replace(facts, host_numbers=facts.host_numbers | numbers)
        parsed = _analysed(fn, facts)
    return partition.transform(parsed, facts)  # needs crossings: the three programs


def _analysed(fn: Callable, facts: Facts) -> Parsed:
    parsed = parse(fn)
    outline.mark(parsed.node, parsed.fn.__code__)  # (before any pass changes a loop)
    _check_args(parsed)
    _explicit_end(parsed.node)
    _drop_final_dels(parsed.node)
    clean = parsed.node  # kinds runs on copies: a callee spliced goes into this tree
    for depth in range(splice.DEPTH + 1):
        parsed = dataclasses.replace(parsed, node=copy.deepcopy(clean))
        analyse(parsed, facts, until=Pass.KINDS)
        where = splice.sites(parsed.node) if depth < splice.DEPTH else {}
        if not where or not splice.splice(clean, where, fn):
            break
    analyse(parsed, facts, start=Pass.HOIST)
    return parsed


def _host_numbers(fn: gast.FunctionDef) -> frozenset:
    """Names kinds took as fixed for the call (a folded `n`, the counter of `for k in
    range(3)`) that host work rebinds (`n += 1` or the loop itself, in a loop the host
    drives: placement computes such work on the host only), where a TF statement uses the
    name in Python-only work (`range(n)`, `max(k - 1, 0)`): the TF part gets the value
    sent, which Python cannot count or compare with while the part is traced."""
    rebound = set()
    for stmt in nodes.walk(fn):
        if not (isinstance(stmt, gast.stmt) and anno.get(stmt, Key.PLACE) == placement.Place.HOST):
            continue
        if isinstance(stmt, (gast.For, gast.AsyncFor)):
            rebound.update(n.id for n in nodes.walk(stmt.target) if isinstance(n, gast.Name))
        if not anno.get(stmt, Key.MIRROR):  # a loop the TF part follows: its own statements
            rebound.update(anno.get(stmt, Key.WRITES, ()))
    return frozenset(name for stmt in nodes.walk(fn) if isinstance(stmt, gast.stmt)
                     and anno.get(stmt, Key.PLACE) == placement.Place.TF
                     for name in rebound if any(_python_use(n, name) for n in nodes.walk(stmt)))


def _python_use(node: gast.AST, name: str) -> bool:
    """A constant call or comparison (pure Python work: kinds) that reads `name`."""
    return isinstance(node, (gast.Call, gast.Compare)) and anno.get(
        node, Key.CONSTANT, False) and any(isinstance(n, gast.Name) and n.id == name
                                           for n in nodes.walk(node))


def analyse(parsed: Parsed, facts: Facts, until: Pass = Pass.CROSSINGS,
            start: Pass = Pass.KINDS) -> None:
    """Run the passes in order on `parsed`, from `start`, the last one `until`."""
    steps = (
        # kinds of every expression, from facts + namespace (a call of a user function
        # on TF values: the callee is analysed by this pipeline, up to placement)
        (Pass.KINDS, lambda: kinds.resolve(parsed, facts, _callee_kind)),
        # needs kinds: split mixed TF/host statements
        (Pass.HOIST, lambda: hoist.transform(parsed)),
        # again: hoisting added temporaries
        (Pass.RETYPE, lambda: kinds.resolve(parsed, facts, _callee_kind)),
        # reads/writes per statement
        (Pass.ACTIVITY, lambda: activity.resolve(parsed.node, globalwrites.rebound(parsed))),
        # needs kinds + activity: TF, host or both
        (Pass.PLACEMENT, lambda: placement.resolve(parsed, facts)),
        # needs placement: channels, gates, barriers
        (Pass.CROSSINGS, lambda: crossings.resolve(parsed, facts)),
    )
    started = False
    for step, run in steps:
        started = started or step is start
        if not started:
            continue
        run()
        _checkpoint(parsed, step)
        if step is until:
            return


def _callee_kind(fn: Any, arg_kinds: list[Kind], facts: Facts, objects=(), constants=()
                 ) -> callees.Judged | None:
    """The kinds pass's hook for a call of a user function on TF values: the callee is
    analysed by these passes up to placement (slicer/callees.py)."""
    return callees.kind_of_call(fn, arg_kinds, facts,
                                functools.partial(analyse, until=Pass.PLACEMENT), objects,
                                constants)


def _explicit_end(fn: gast.FunctionDef) -> None:
    """`return None` where the body can fall off its end: the host statement where it
    waits for TF work that can fail (a failing assert raises at the call, as eagerly)."""
    last = fn.body[-1]
    if isinstance(last, (gast.Return, gast.Raise)):
        return
    end = gast.Return(value=gast.Constant(value=None, kind=None))
    line = getattr(last, "end_lineno", None) or last.lineno
    for node in nodes.walk(end):
        node.lineno, node.end_lineno, node.col_offset, node.end_col_offset = line, line, 0, 0
    fn.body.append(end)


def _drop_final_dels(fn: gast.FunctionDef) -> None:
    """`del tape` (after a persistent tape, as TF's guide writes it): a `del` in the
    function's own body of names bound unconditionally before it and never used after it
    only lets the object go a little earlier. Such a `del` is dropped (any other `del` is
    refused, placement.py); the object then lives until the call returns."""
    bound = {a.id for a in nodes.walk(fn.args) if isinstance(a, gast.Name)}
    body = []
    for i, stmt in enumerate(fn.body):
        names = [t.id for t in getattr(stmt, "targets", ()) if isinstance(t, gast.Name)]
        if isinstance(stmt, gast.Delete) and len(names) == len(stmt.targets) and \
                set(names) <= bound and not _used(names, fn.body[i + 1:]):
            bound.difference_update(names)
            continue
        body.append(stmt)
        bound.update(_bound_by(stmt))
    fn.body = body


def _bound_by(stmt: gast.stmt) -> set[str]:
    """Names a statement of the function's own body binds whenever it completes."""
    if isinstance(stmt, (gast.Assign, gast.AnnAssign, gast.AugAssign)):
        targets = stmt.targets if isinstance(stmt, gast.Assign) else [stmt.target]
        return {n.id for t in targets for n in nodes.walk(t) if isinstance(n, gast.Name)}
    if isinstance(stmt, gast.With):
        return {n.id for item in stmt.items if item.optional_vars is not None
                for n in nodes.walk(item.optional_vars) if isinstance(n, gast.Name)}
    return set()


def _used(names: list[str], stmts: list[gast.stmt]) -> bool:
    return any(isinstance(n, gast.Name) and n.id in names
               for stmt in stmts for n in nodes.walk(stmt))


def _check_args(parsed) -> None:
    for node in _own_scope(parsed.node):
        if isinstance(node, (gast.Yield, gast.YieldFrom, gast.Await)):
            raise Refusal("generator", "generators and coroutines are not sliced yet", "",
                          parsed.filename, node.lineno)


def _own_scope(fn: gast.FunctionDef):
    stack = list(nodes.children(fn))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (gast.FunctionDef, gast.Lambda, gast.ClassDef)):
            stack.extend(nodes.children(node))


def _checkpoint(parsed, after: Pass) -> None:
    if os.environ.get("GPE_CHECK"):
        try:
            compile(gast.gast_to_ast(gast.Module(body=[parsed.node], type_ignores=[])),
                    parsed.filename, "exec")
        except (SyntaxError, TypeError, ValueError) as exc:
            raise AssertionError(f"slicer produced an invalid tree after {after.name}: {exc}")
