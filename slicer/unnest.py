"""Calls of functions gpe slices too, made inside another call's arguments, moved out into
statements of their own, in Python's order of evaluation.

A sliced function's call of another function gpe slices runs nested (its TF part inside
the caller's: host/variants/stubs.CallContext.nested) only where the call is a statement
of its own (`y = f(x)`, `f(x)`, `return f(x)`: placement.nested_call). Inside another
call's arguments (d2l's `metric.add(accuracy(net(X), y), size(y))` under `gpe run`,
`history.append(step(x))`) it ran as a call made while the caller's sliced call was
running: eagerly, after waiting for the caller's TF part, each time.

`statements(stmt, counter)` rewrites such a statement: the called function's expression
(unless it is TF's own, which no call can change) and each argument up to the last one
holding such a call are evaluated first, in order, into temporaries (`_gpe_nN`); a name or
a literal is read where it was. So `metric.add(accuracy(net(X), y), size(y))` becomes

    _gpe_n0 = metric.add
    _gpe_n1 = net(X)
    _gpe_n2 = accuracy(_gpe_n1, y)
    _gpe_n0(_gpe_n2, size(y))

which Python evaluates in the same order. Only calls reached through call arguments move
(not from inside an operator, a conditional expression, a lambda or a comprehension);
nothing moves out of a call with `*args` or `**kwargs`. Needs kinds.resolve first (the
SLICED_FN kind); the pipeline runs kinds again on the new statements.
"""
from __future__ import annotations

import gast

from . import anno
from .anno import Key
from .facts import TF_CALLABLES, Kind

_STATEMENTS = (gast.Assign, gast.Expr, gast.Return)


def statements(stmt: gast.stmt, counter) -> list[gast.stmt]:
    """The statements that run `stmt` with its nested sliced calls moved out (see above);
    [stmt] where there are none."""
    if not isinstance(stmt, _STATEMENTS) or not isinstance(stmt.value, gast.Call):
        return [stmt]
    pre: list[gast.stmt] = []
    _call_out(stmt.value, pre, counter)
    for new in pre:  # the user's line, for reports and crossings
        for node in gast.walk(new):
            if not hasattr(node, "lineno") and isinstance(node, (gast.stmt, gast.expr)):
                gast.copy_location(node, stmt)
    return pre + [stmt]


def _call_out(call: gast.Call, pre: list, counter) -> None:
    """Move out what `call` evaluates before its last argument holding a nested sliced
    call, that call included (its own nested calls first)."""
    args = list(call.args) + [k.value for k in call.keywords]
    if any(isinstance(a, gast.Starred) for a in call.args) or \
            any(k.arg is None for k in call.keywords):
        return
    last = max((i for i, a in enumerate(args) if _holds_sliced(a)), default=None)
    if last is None:
        return
    if not isinstance(call.func, gast.Name) and anno.get(call.func, Key.KIND) not in \
            TF_CALLABLES | {Kind.TF_MODULE, Kind.SLICED_FN}:  # (TF's own, or nested itself)
        call.func = _temporary(call.func, pre, counter)
    for i, arg in enumerate(args[:last + 1]):
        if isinstance(arg, (gast.Name, gast.Constant)):
            continue
        if isinstance(arg, gast.Call):
            _call_out(arg, pre, counter)
        moved = _temporary(arg, pre, counter)
        if i < len(call.args):
            call.args[i] = moved
        else:
            call.keywords[i - len(call.args)].value = moved


def _holds_sliced(node: gast.expr) -> bool:
    """A call of a function gpe slices, reached from `node` through call arguments."""
    if not isinstance(node, gast.Call):
        return False
    if anno.get(node.func, Key.KIND) == Kind.SLICED_FN:
        return True
    return any(_holds_sliced(a) for a in list(node.args) + [k.value for k in node.keywords])


def _temporary(value: gast.expr, pre: list, counter) -> gast.Name:
    name = f"_gpe_n{next(counter)}"
    assign = gast.Assign(targets=[gast.Name(name, gast.Store(), None, None)], value=value,
                         type_comment=None)
    pre.append(assign)
    loaded = gast.Name(name, gast.Load(), None, None)
    for node in (assign.targets[0], loaded):
        anno.set(node, Key.KIND, anno.get(value, Key.KIND, Kind.HOST))
    return loaded
