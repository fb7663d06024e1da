"""Arithmetic on Python numbers inside statements hoist.py splits: which of it the host
computes first, into host temporaries, and whether computing it there may raise.

`pure_number`: arithmetic that cannot raise (`1 - hp['beta']`), which moves anywhere;
`number_arithmetic`: any arithmetic on numbers (`1 - beta1 ** hp['t']`, d2l's Adam), which
may raise, so it moves only beside TF work that leaves nothing behind (`effect_free`) or
out of a loop under a `try` (Key.RAISES: partition.py); `static_dim`: `t.shape[i]`.
"""
from __future__ import annotations

import gast

from . import anno, nodes
from .anno import Key
from .facts import TF_KINDS, Kind


def literal(node: gast.expr) -> bool:
    """Arithmetic on literals only, such as `-1` or `2 ** 10`."""
    return all(isinstance(n, (gast.Constant, gast.BinOp, gast.UnaryOp, gast.operator,
                              gast.unaryop)) for n in nodes.walk(node))


def pure_number(node: gast.expr) -> bool:
    """Arithmetic on Python numbers only (names, attributes of names, literals) that cannot
    raise: +, -, * (and /, //, % by a nonzero literal), unary -/+,
    abs(); not a bare name or a literal (those cross as they are)."""
    if anno.get(node, Key.CONSTANT):
        return False
    if isinstance(node, gast.Call):  # (kinds calls abs() data: it takes arrays too)
        return isinstance(node.func, gast.Name) and node.func.id == "abs" and \
            anno.get(node.func, Key.KIND) == Kind.HOST_FN and len(node.args) == 1 and \
            not node.keywords and _number_operand(node.args[0])
    if anno.get(node, Key.KIND) != Kind.PY_SCALAR:
        return False
    if isinstance(node, gast.UnaryOp):
        return isinstance(node.op, (gast.USub, gast.UAdd)) and _number_operand(node.operand)
    if isinstance(node, gast.BinOp):
        if isinstance(node.op, (gast.Add, gast.Sub, gast.Mult)):
            return _number_operand(node.left) and _number_operand(node.right)
        return isinstance(node.op, (gast.Div, gast.FloorDiv, gast.Mod)) and \
            _number_operand(node.left) and isinstance(node.right, gast.Constant) and \
            type(node.right.value) in (int, float) and node.right.value != 0
    return False


_ARITHMETIC = (gast.Add, gast.Sub, gast.Mult, gast.Div, gast.FloorDiv, gast.Mod, gast.Pow)


def number_arithmetic(node: gast.expr) -> bool:
    """Arithmetic on Python numbers only, with any operator (`1 - beta1 ** hp['t']`, d2l's
    Adam): unlike pure_number's it may raise (an overflow, a division by zero), so it
    moves only where raising earlier changes nothing (see _numbers_first, _invariant)."""
    if anno.get(node, Key.CONSTANT) or anno.get(node, Key.KIND) != Kind.PY_SCALAR:
        return False
    if isinstance(node, gast.UnaryOp):
        return isinstance(node.op, (gast.USub, gast.UAdd)) and _arithmetic_operand(node.operand)
    return isinstance(node, gast.BinOp) and isinstance(node.op, _ARITHMETIC) and \
        _arithmetic_operand(node.left) and _arithmetic_operand(node.right)


def _arithmetic_operand(node: gast.expr) -> bool:
    if isinstance(node, gast.Constant):
        return type(node.value) in (int, float)
    if anno.get(node, Key.ITEM) or anno.get(node, Key.CONSTANT) and \
            anno.get(node, Key.KIND) == Kind.PY_SCALAR:
        return True
    if isinstance(node, gast.Name) or anno.has(node, Key.PATH) or chain(node):
        return anno.get(node, Key.KIND) == Kind.PY_SCALAR
    return number_arithmetic(node)


def effect_free(node: gast.expr) -> bool:
    """TF work that calls nothing (arithmetic on tensors and variables, reads): evaluated
    after a number beside it that raised, as eager would, it leaves nothing behind (a call,
    even of a TF op, may draw a random number: `tf.nn.dropout`)."""
    return not any(isinstance(n, gast.Call) for n in nodes.walk(node))


def static_dim(node: gast.expr) -> bool:
    """`t.shape[i]` (a literal i) of a tensor: TF work that reads it is traced with the
    tensor's static dimension, which is eager's wherever it is known (an unknown one, None,
    fails the trace as a shape: the function then runs eagerly)."""
    return isinstance(node, gast.Subscript) and isinstance(node.value, gast.Attribute) and \
        node.value.attr == "shape" and anno.get(node.value.value, Key.KIND) in TF_KINDS and \
        literal(node.slice)


def _number_operand(node: gast.expr) -> bool:
    if isinstance(node, gast.Constant):
        return type(node.value) in (int, float)
    if anno.get(node, Key.ITEM):  # `hyperparams['beta']` (kinds: its keys are guarded)
        return True
    if isinstance(node, gast.Name) or anno.has(node, Key.PATH) or chain(node):
        return anno.get(node, Key.KIND) == Kind.PY_SCALAR
    return pure_number(node)


def chain(node: gast.expr) -> bool:
    """`hp.eps`, `self.cfg.scale`: attributes of a name (a number read from an object)."""
    while isinstance(node, gast.Attribute):
        node = node.value
    return isinstance(node, gast.Name)
