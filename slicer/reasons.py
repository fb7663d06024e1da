"""Why a statement runs where placement put it (the text `gpe explain` prints), and which
calls write TF state. Reads the kinds pass's annotations only."""
from __future__ import annotations

import gast

from . import anno, nodes
from .anno import Key
from .facts import TF_CALLABLES, TF_KINDS, VARIABLE_EFFECT_METHODS, Kind


def dotted(node: gast.AST) -> str:
    if isinstance(node, gast.Name):
        return node.id
    if isinstance(node, gast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    if isinstance(node, gast.Call):
        return dotted(node.func) + "()"
    return type(node).__name__.lower()


def describe_with(stmt: gast.With) -> str:
    return "context " + ", ".join(dotted(i.context_expr) for i in stmt.items)


def describe_tf(value: gast.AST, effect: bool) -> str:
    calls = [n for n in nodes.walk(value) if isinstance(n, gast.Call)]
    sliced = [dotted(c.func) for c in calls if anno.get(c, Key.CALLEE)]
    unrolled = [dotted(c.func) for c in calls if anno.get(c, Key.UNROLLED) is not None]
    if unrolled:
        return ("calls " + ", ".join(unrolled) + " (a recursion over a tree: unrolled for "
                "its shape; its counters run on the host)")
    inline = [dotted(c.func) for c in calls if anno.get(c, Key.INLINE)]
    if inline:
        return ("calls " + ", ".join(inline) + " (traced in this TF part: it returns TF "
                "objects)" + ("; changes TF state" if effect else ""))
    if sliced:
        return ("calls " + ", ".join(sliced) + " (sliced too: its own FunctionDef)" +
                ("; changes TF state" if effect else ""))
    if effect:
        writes = [dotted(c.func) for c in calls if effect_call(c)]
        return "changes TF state: " + ", ".join(writes)
    if calls:
        return ", ".join(dict.fromkeys(dotted(c.func) for c in calls)) + " on tensors"
    if isinstance(value, (gast.BinOp, gast.UnaryOp, gast.Compare)):
        return "arithmetic on tensors"
    return "tensor value"


def host_reason(stmt: gast.stmt) -> tuple[bool, str]:
    """(needs to wait for the TF part's effects, why it runs on the host)."""
    touches = sorted({n.id for n in nodes.walk(stmt) if isinstance(n, gast.Name)
                      and anno.get(n, Key.KIND) in (Kind.VARIABLE, Kind.TF_OBJECT)})
    unknown = [dotted(n.func) for n in nodes.walk(stmt) if isinstance(n, gast.Call)
               and anno.get(n.func, Key.KIND) not in TF_CALLABLES | {Kind.HOST_FN}]
    if touches:
        return True, "uses TF state directly: " + ", ".join(touches)
    if unknown:
        whys = [anno.get(n.func, Key.WHY_HOST) for n in nodes.walk(stmt)
                if isinstance(n, gast.Call) and anno.get(n.func, Key.WHY_HOST)]
        return True, "calls " + ", ".join(unknown) + " (may touch TF state" + (
            "; " + "; ".join(dict.fromkeys(whys)) if whys else "") + ")"
    tf_inputs = sorted({n.id for n in nodes.walk(stmt) if isinstance(n, gast.Name)
                        and anno.get(n, Key.KIND) in TF_KINDS})
    calls = [dotted(n.func) for n in nodes.walk(stmt) if isinstance(n, gast.Call)]
    if isinstance(stmt, gast.Return):
        return False, "returns to the caller"
    if calls and tf_inputs:
        return False, f"calls {', '.join(calls)} on a TF value ({', '.join(tf_inputs)})"
    if calls:
        return False, "calls " + ", ".join(calls)
    return False, "Python work"


def effect_call(node: gast.AST) -> bool:
    """True for a call that writes TF state: `v.assign*(...)` or a stateful TF op."""
    if not isinstance(node, gast.Call):
        return False
    func = node.func
    if isinstance(func, gast.Attribute) and func.attr in VARIABLE_EFFECT_METHODS:
        # (a variable taken from a list the TF part builds is typed a tensor: no tensor
        # has these methods, so the call writes a variable all the same)
        return anno.get(func.value, Key.KIND) in TF_KINDS
    return anno.get(func, Key.KIND) == Kind.TF_EFFECT_OP
