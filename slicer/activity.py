"""Activity analysis: which names each statement reads and binds.

`resolve(node)` sets `Key.READS` and `Key.WRITES` (frozensets of names) on every
top-level statement of a function body and inside TF `with` blocks (for such a `with`
itself they cover its items only). A compound statement the host runs whole (`if`,
`for`, a host `with`...) gets the names of its whole body, and the statements of a
`for`, `while` or `if` body get their own too (the TF part may follow those).

A compound statement's READS are the names whose value from before it it may read (a name
its body surely binds before reading it is not one: slicer/bindings.py), and `Key.KEEPS`
the names it binds on some paths only, whose value from before may survive it. A statement
calling user code on the host also binds the globals the module's code rebinds
(slicer/globalwrites.py). Needs kinds.resolve first.
"""
from __future__ import annotations

import gast

from . import anno, bindings, nodes, scope
from .anno import Key
from .facts import Kind
from .hoist import is_tf_with


def resolve(fn: gast.FunctionDef, rebound: frozenset = frozenset()) -> None:
    """`rebound`: globals the module's code rebinds (slicer/globalwrites.py): a statement
    calling user code on the host writes them."""
    local = {a.id for a in nodes.walk(fn.args) if isinstance(a, gast.Name)}
    local |= {n.id for n in scope.walk(fn) if isinstance(n, gast.Name)
              and isinstance(n.ctx, (gast.Store, gast.Del))}
    for stmt in fn.body:
        _statement(stmt, frozenset(local), rebound - local)


def _statement(stmt: gast.stmt, local: frozenset, rebound: frozenset) -> None:
    if is_tf_with(stmt):  # the TF part keeps the block: its statements are analysed alone
        parts = [item.context_expr for item in stmt.items]
        parts += [item.optional_vars for item in stmt.items if item.optional_vars is not None]
        for child in stmt.body:
            _statement(child, local, rebound)
    else:
        parts = [stmt]
        if isinstance(stmt, (gast.For, gast.While, gast.If)):
            for child in stmt.body + stmt.orelse:
                _statement(child, local, rebound)
    reads: set[str] = set()
    writes: set[str] = set()
    for part in parts:
        _collect(part, reads, writes, nested=False)
    bound = frozenset(writes)
    if rebound and any(_user_call(n) for part in parts for n in scope.walk(part, _NESTED)):
        # a call of user code may rebind a module's global (`bump()`, `global step` in it):
        # after the call its value is the host's
        writes |= rebound
    # a local container changed in place (`buf[0] = ...`, `buf.append(...)`) is written
    writes |= {n for part in parts for n in _mutated_roots(part)} & local
    if parts == [stmt] and not isinstance(stmt, _SIMPLE):
        exposed, surely = bindings.flow([stmt], frozenset())
        reads &= exposed
        anno.set(stmt, Key.KEEPS, bound - surely)
    anno.set(stmt, Key.READS, frozenset(reads))
    anno.set(stmt, Key.WRITES, frozenset(writes))


_SIMPLE = (gast.Assign, gast.AugAssign, gast.AnnAssign, gast.Expr, gast.Return, gast.Raise,
           gast.Pass, gast.Break, gast.Continue, gast.Delete, gast.Assert, gast.Global,
           gast.Nonlocal, gast.Import, gast.ImportFrom)


def _collect(node: gast.AST, reads: set, writes: set, nested: bool) -> None:
    """Names read and bound by `node`; inside a nested function or class only reads count
    (its free names are read when it runs), and the nested definition binds its name.
    A comprehension's own variables are neither (see slicer/scope.py)."""
    if isinstance(node, scope.COMPREHENSIONS):
        for name in scope.walk(node):
            if isinstance(name, gast.Name):
                _collect(name, reads, writes, nested)
        return
    if isinstance(node, gast.Name):
        if isinstance(node.ctx, gast.Load):
            reads.add(node.id)
        elif not nested and isinstance(node.ctx, (gast.Store, gast.Del)):
            writes.add(node.id)
        return
    if isinstance(node, (gast.FunctionDef, gast.ClassDef)) and not nested:
        writes.add(node.name)
    if isinstance(node, gast.AugAssign) and isinstance(node.target, gast.Name) and not nested:
        reads.add(node.target.id)  # `s += t` reads s (its Name is only a Store), anywhere
    inner = nested or isinstance(node, (gast.FunctionDef, gast.Lambda, gast.ClassDef))
    if isinstance(node, (gast.Global, gast.Nonlocal)):
        return
    for child in nodes.children(node):
        _collect(child, reads, writes, inner)


_NESTED = (gast.FunctionDef, gast.Lambda, gast.ClassDef)


def _user_call(node: gast.AST) -> bool:
    """A call of code the host runs as Python (a user function or method, not a builtin or
    a TF op)."""
    return isinstance(node, gast.Call) and anno.get(node.func, Key.KIND) in (
        Kind.HOST, Kind.SLICED_FN)


MUTATING_METHODS = frozenset({
    "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update",
    "setdefault", "popitem", "add", "discard", "__setitem__", "__delitem__",
})
"""Methods of Python containers that change them in place."""


def _mutated_roots(node: gast.AST):
    """Roots of the container mutations in `node`, outside nested functions."""
    if isinstance(node, (gast.FunctionDef, gast.Lambda, gast.ClassDef)):
        return
    root = _mutated_root(node)
    if root is not None:
        yield root
    for child in nodes.children(node):
        yield from _mutated_roots(child)


def _mutated_root(node: gast.AST) -> str | None:
    """The local name a container mutation changes in place: `buf[0] = ...`, `del d[k]`,
    `buf.append(...)` write `buf` (the TF part must not keep a stale copy of it)."""
    if isinstance(node, gast.Subscript) and isinstance(node.ctx, (gast.Store, gast.Del)):
        return _root_name(node.value)
    if (isinstance(node, gast.Call) and isinstance(node.func, gast.Attribute)
            and node.func.attr in MUTATING_METHODS):
        return _root_name(node.func.value)
    return None


def _root_name(node: gast.AST) -> str | None:
    while isinstance(node, gast.Subscript):
        node = node.value
    return node.id if isinstance(node, gast.Name) else None
