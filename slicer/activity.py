"""Activity analysis: which names each statement reads and binds.

`resolve(node)` sets `Key.READS` and `Key.WRITES` (frozensets of names) on every
statement of a function body, nested `with` bodies included. For a `with` statement
itself they cover its items only. Needs nothing to have run first.
"""
from __future__ import annotations

import gast

from slicer import anno
from slicer.anno import Key


def resolve(fn: gast.FunctionDef) -> None:
    for stmt in fn.body:
        _statement(stmt)


def _statement(stmt: gast.stmt) -> None:
    if isinstance(stmt, gast.With):
        parts = [item.context_expr for item in stmt.items]
        parts += [item.optional_vars for item in stmt.items if item.optional_vars is not None]
        for child in stmt.body:
            _statement(child)
    else:
        parts = [stmt]
    reads, writes = set(), set()
    for part in parts:
        for node in gast.walk(part):
            if isinstance(node, gast.Name):
                (writes if isinstance(node.ctx, (gast.Store, gast.Del)) else reads).add(node.id)
    if isinstance(stmt, gast.AugAssign) and isinstance(stmt.target, gast.Name):
        reads.add(stmt.target.id)
    anno.set(stmt, Key.READS, frozenset(reads))
    anno.set(stmt, Key.WRITES, frozenset(writes))
