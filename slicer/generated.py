"""Names in the TF program partition.py writes: which of its nested functions (branches,
loop bodies, gated segments) rebind which names, and the `nonlocal` declarations or the
per-branch copies that make each function read and write the right one.
"""
from __future__ import annotations

import gast

from . import anno, scope, templates
from .anno import Key


def declare_nonlocals(body: list[gast.stmt], outer: frozenset) -> None:
    """Declare `nonlocal` in each generated function the names it rebinds that an enclosing
    generated function binds (its parameters aside)."""
    for fn in functions(body):
        params = {a.id for a in fn.args.args}
        here = bound(fn.body)
        shared = sorted((here & outer) - params)
        if anno.get(fn, Key.BRANCH):  # (and what functions inside it rebind: masked_softmax)
            shared = sorted((bound_within(fn.body) & outer) - params)
        if shared and anno.get(fn, Key.BRANCH):
            # a branch's own copy, from the value before the `if` (`def _gpe_else1(x=x)`):
            # as a nonlocal, what the branch traced first rebinds would be what the other
            # reads (fuzz seed 12740). Its outputs are its parameters (crossings: CARRIED);
            # another rebound name's value after the `if` is the host's (sent again)
            fn.args.args += [templates.name(n) for n in shared]
            fn.args.defaults += [templates.name(n) for n in shared]
            params |= set(shared)
        elif shared:
            fn.body.insert(0, gast.Nonlocal(names=shared))
        declare_nonlocals(fn.body, outer | here | params)


def functions(body: list[gast.stmt]):
    """The functions defined in `body`, also inside its `with`, `if`, `for` blocks (a
    segment gated inside a tape is defined in the tape's `with`), not inside them."""
    for stmt in body:
        if isinstance(stmt, gast.FunctionDef):
            yield stmt
            continue
        for field in ("body", "orelse", "finalbody"):
            yield from functions(getattr(stmt, field, None) or [])
        for handler in getattr(stmt, "handlers", None) or []:
            yield from functions(handler.body)


def _walk_scope(node):
    """Nodes of `node` not inside a nested function, less comprehension variables."""
    return scope.walk(node, skip=(gast.FunctionDef, gast.Lambda))


def bound_within(stmts: list[gast.stmt]) -> set[str]:
    """Names `stmts` bind, or a generated function inside them (not its parameters)."""
    return bound(stmts).union(*(bound_within(f.body) - {a.id for a in f.args.args}
                                 for f in functions(stmts)))


def bound(stmts: list[gast.stmt]) -> set[str]:
    return {n.id for s in stmts if not isinstance(s, gast.FunctionDef)
            for n in _walk_scope(s) if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store)}
