"""Exposed reads and sure bindings of a statement list, for activity (slicer/activity.py).

`flow(stmts, bound)` walks `stmts` in program order from a point where the names in
`bound` are surely bound, and returns `(exposed, bound_after)`:
- exposed: the names whose value from before `stmts` they may read (a read that follows a
  binding of the name on every path to it reads the statement's own value, not one from
  before: `for k in range(n): s = f(x); s = s * 2` reads `x` and `n` from before, not `s`);
- bound_after: the names bound on every path through `stmts` that falls off their end
  (with `bound`); a name a compound statement binds on some paths only (`if c: z = 1`,
  a loop body that may run zero times) may keep its value from before.

Both err on the safe side: a read counts as exposed unless a binding surely precedes it
(`break`, `return` and exceptions are paths that still fall through, a handler starts from
before its `try`), and a binding counts as sure only for a plain assignment, an augmented
assignment, a nested `def` or `class`, or the names of a `with ... as` (a walrus, an import
or a `for` target is never sure). No annotations needed: a helper of activity.resolve.
"""
from __future__ import annotations

import gast

from . import nodes, scope


def flow(stmts: list[gast.stmt], bound: frozenset) -> tuple[set[str], frozenset]:
    exposed: set[str] = set()
    for stmt in stmts:
        reads, bound = _statement(stmt, bound)
        exposed |= reads
    return exposed, bound


def _statement(stmt: gast.stmt, bound: frozenset) -> tuple[set[str], frozenset]:
    if isinstance(stmt, gast.If):
        reads = loads(stmt.test) - bound
        body, after_body = flow(stmt.body, bound)
        other, after_other = flow(stmt.orelse, bound)
        return reads | body | other, after_body & after_other
    if isinstance(stmt, (gast.For, gast.AsyncFor)):
        reads = loads(stmt.iter) - bound
        body, _ = flow(stmt.body, bound | _stored(stmt.target))
        other, _ = flow(stmt.orelse, bound)  # after zero or more iterations
        return reads | body | other, bound
    if isinstance(stmt, gast.While):
        body, _ = flow(stmt.body, bound)
        other, _ = flow(stmt.orelse, bound)
        return (loads(stmt.test) - bound) | body | other, bound
    if isinstance(stmt, gast.Try):
        body, after_body = flow(stmt.body, bound)
        reads = body | flow(stmt.orelse, after_body)[0]
        for handler in stmt.handlers:  # may start anywhere in the body
            name = {handler.name.id} if isinstance(handler.name, gast.Name) else set()
            reads |= (loads(handler.type) - bound) if handler.type is not None else set()
            reads |= flow(handler.body, bound | name)[0]
        final, after_final = flow(stmt.finalbody, bound)
        return reads | final, after_final
    if isinstance(stmt, (gast.With, gast.AsyncWith)):
        reads = set().union(*(loads(item.context_expr) for item in stmt.items)) - bound
        names = frozenset().union(*(_stored(item.optional_vars) for item in stmt.items
                                    if item.optional_vars is not None))
        body, _ = flow(stmt.body, bound | names)
        return reads | body, bound | names  # a context manager may swallow an exception
    reads = loads(stmt) - bound  # (`s += t` reads s: scope.reads)
    if isinstance(stmt, gast.Delete):
        return reads, bound - {n.id for t in stmt.targets for n in nodes.walk(t)
                               if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Del)}
    return reads, bound | _surely_bound(stmt)


def loads(node: gast.AST) -> set[str]:
    """Names `node` reads (a nested function or lambda reads its free names when it runs;
    a comprehension's own variables are not the function's)."""
    return {n.id for n in scope.reads(node)}


def _surely_bound(stmt: gast.stmt) -> frozenset:
    if isinstance(stmt, (gast.FunctionDef, gast.AsyncFunctionDef, gast.ClassDef)):
        return frozenset({stmt.name})
    if isinstance(stmt, gast.Assign):
        return frozenset().union(*(_stored(t) for t in stmt.targets))
    if isinstance(stmt, (gast.AugAssign, gast.AnnAssign)) and (
            isinstance(stmt, gast.AugAssign) or stmt.value is not None):
        return _stored(stmt.target)
    return frozenset()


def _stored(target: gast.AST) -> frozenset:
    """Names a target binds when it is assigned (unpacking included, not through a
    subscript or an attribute)."""
    if isinstance(target, gast.Name):
        return frozenset({target.id})
    if isinstance(target, gast.Starred):
        return _stored(target.value)
    if isinstance(target, (gast.Tuple, gast.List)):
        return frozenset().union(*(_stored(e) for e in target.elts))
    return frozenset()
