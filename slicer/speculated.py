"""Branches a callee takes on a Python number its caller sends (JANUS: the value is
dynamic, the branch is speculated).

A number on an object that keeps changing (`hp.dropout_rate`, annealed by the training
loop) is sent to the TF part as a value instead of folded. A callee given it
(`model(x, hp.dropout_rate)`) may branch on it (`if dropout_rate > 0:`): its TF part is
traced with the branch the number takes when the variant is built, and the caller's call
key holds the test's outcome (computed on the host from the caller's path, every call),
so a call whose number takes the other branch gets another variant. In the TF part the
number is a HostValue whose comparisons with Python numbers answer from the value seen
when built (tfprog/part.py, Speculated); so that no other Python decision reads that
value, the callee may use the number only in such tests and as an operand of arithmetic
or of TF ops (`only_in_tests`).

`tested(test, names)`: the one sent parameter an `if` test decides on, where the test is
only comparisons of it with constants (`and`/`or`/`not` of them); `source(test)`: the
test's text, which the host compiles (`compile_test`).
"""
from __future__ import annotations

import ast
from typing import Callable

import gast

from . import anno, nodes
from .anno import Key
from .facts import TF_KINDS, Kind

_TF_CALLS = frozenset({Kind.TF_OP, Kind.TF_EFFECT_OP, Kind.TF_CONSTANT})
_COMPARE = (gast.Lt, gast.LtE, gast.Gt, gast.GtE, gast.Eq, gast.NotEq)


def tested(test: gast.expr, names: set[str]) -> str | None:
    """The sent parameter `test` decides on, or None (see the module docstring)."""
    found: set[str] = set()
    if not names or not _predicate(test, names, found) or len(found) != 1:
        return None
    return found.pop()


def _predicate(node: gast.expr, names: set[str], found: set[str]) -> bool:
    if isinstance(node, gast.BoolOp):
        return all(_predicate(v, names, found) for v in node.values)
    if isinstance(node, gast.UnaryOp) and isinstance(node.op, gast.Not):
        return _predicate(node.operand, names, found)
    if isinstance(node, gast.Name) and node.id in names:
        found.add(node.id)
        return True
    if isinstance(node, gast.Compare):
        return all(isinstance(op, _COMPARE) for op in node.ops) and all(
            _operand(o, names, found) for o in [node.left] + node.comparators)
    return False


def _operand(node: gast.expr, names: set[str], found: set[str]) -> bool:
    if isinstance(node, gast.Name) and node.id in names:
        found.add(node.id)
        return True
    if isinstance(node, gast.UnaryOp) and isinstance(node.op, (gast.USub, gast.UAdd)):
        return _operand(node.operand, names, found)
    return isinstance(node, gast.Constant) and type(node.value) in (bool, int, float)


def source(test: gast.expr) -> str:
    return ast.unparse(gast.gast_to_ast(test))


def arithmetic(stmt: gast.stmt, sent: dict, tests: list) -> bool:
    """A host statement `t = <arithmetic on sent numbers and constants>` (hoisted from TF
    work, `1.0 - dropout_rate`): the TF part computes it on its HostValues, with Python's
    arithmetic. Its name joins the sent numbers' uses checked by only_in_tests (noted in
    `tests` as (None, name))."""
    known = set(sent) | {name for test, name in tests if test is None}
    if not (isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and isinstance(
            stmt.targets[0], gast.Name) and _numeric(stmt.value, known)):
        return False
    tests.append((None, stmt.targets[0].id))
    return True


class _Any:
    def __contains__(self, name) -> bool:
        return True


_ANY = _Any()


def _numeric(node: gast.expr, known) -> bool:
    if isinstance(node, gast.BinOp):
        return _numeric(node.left, known) and _numeric(node.right, known)
    if isinstance(node, gast.UnaryOp) and isinstance(node.op, (gast.USub, gast.UAdd)):
        return _numeric(node.operand, known)
    if isinstance(node, gast.Name):
        return node.id in known
    return isinstance(node, gast.Constant) and type(node.value) in (bool, int, float)


def only_in_tests(fn: gast.FunctionDef, sent: set[str], tests: list) -> bool:
    """Every read of a sent parameter (or of a number computed from them, see arithmetic)
    outside the speculated tests is an operand of arithmetic, of a TF op or of a TF call
    (where the number converts as eagerly), so no other Python decision depends on the
    value seen when the TF part was built."""
    names = set(sent) | {name for test, name in tests if test is None}
    inside = {id(n) for test, _ in tests if test is not None for n in nodes.walk(test)}
    for parent in nodes.walk(fn):
        if id(parent) in inside:
            continue
        for child in nodes.children(parent):
            if isinstance(child, gast.Name) and child.id in names and \
                    id(child) not in inside and not _converted(parent, child):
                return False
    return True


def _converted(parent: gast.AST, child: gast.Name) -> bool:
    if isinstance(child.ctx, gast.Param):
        return True  # the parameter itself
    if isinstance(parent, gast.Assign) and isinstance(child.ctx, gast.Store):
        return _numeric(parent.value, _ANY)  # a number computed from them (see arithmetic)
    if not isinstance(child.ctx, gast.Load):
        return False
    if isinstance(parent, gast.BinOp) or (
            isinstance(parent, gast.UnaryOp) and isinstance(parent.op, (gast.USub, gast.UAdd))):
        return True
    if isinstance(parent, gast.Compare):  # against a tensor: a TF comparison
        return any(o is not child and anno.get(o, Key.KIND) in TF_KINDS
                   for o in [parent.left] + parent.comparators)
    if isinstance(parent, gast.Call):  # an argument of a TF op (not of another callee,
        # whose own tests this callee's caller would not guard)
        return child is not parent.func and not anno.get(parent, Key.CALLEE) and \
            anno.get(parent.func, Key.KIND) in _TF_CALLS
    return False


def compile_test(name: str, text: str) -> Callable:
    """The test as a function of the number (`lambda dropout_rate: dropout_rate > 0`); its
    text is only comparisons of the name with constants (see tested)."""
    return eval(compile(f"lambda {name}: {text}", "<gpe test>", "eval"),  # noqa: S307
                {"__builtins__": {}})
