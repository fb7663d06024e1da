"""Functions passed to TF ops: `strategy.run(step, args=(batch,))`, `tf.map_fn(fn, x)`.

A TF op that takes a function calls it when the TF part is traced, once, as a graph: the
function's Python (a `print`, a counter, a list append) would run once at trace time
instead of on every call as eagerly. `traceable(call, parsed, facts, callee)` says
whether every function a TF call is given is the user's own function (or a method of an
object argument) whose body the callee analysis finds to be all TF work, or TF's own; a
call given anything else (a function with host work, a local function gpe cannot see
into) runs on the host, eagerly, every call. A method of an object argument that passes
(`self.replica_step`) gets `Key.PATH`: the TF part reads it where it is traced, and the
call key guards it (its object and function). Needs kinds on the operands.
"""
from __future__ import annotations

import inspect
import types
from typing import Any, Callable

import gast

from . import anno, nodes
from .anno import Key
from .facts import Facts, Kind
from .parser import MISSING, Parsed

_USER = frozenset({Kind.HOST, Kind.SLICED_FN, Kind.HOST_ONLY})


def traceable(call: gast.Call, parsed: Parsed, facts: Facts, callee: Callable | None
              ) -> bool:
    if _prints_host_data(call, parsed, facts):
        return False
    for arg in [*call.args, *(k.value for k in call.keywords)]:
        if isinstance(arg, gast.Lambda):
            continue  # an expression: its calls were given kinds like any other
        if not isinstance(arg, (gast.Name, gast.Attribute)):
            continue
        if anno.get(arg, Key.KIND) not in _USER:
            continue  # a tensor, a variable, TF's own function
        value = _value(arg, parsed, facts)
        if value is MISSING:
            if isinstance(arg, gast.Name) and arg.id in parsed_locals(parsed):
                return False  # a local function: not seen into
            continue
        if not callable(value) or isinstance(value, type):
            continue
        if not _all_tf(value, facts, callee):
            return False
        if isinstance(arg, gast.Attribute) and _root(arg) in facts.objects:
            anno.set(arg, Key.PATH, _dotted(arg))
    return True


def _prints_host_data(call: gast.Call, parsed: Parsed, facts: Facts) -> bool:
    """`tf.print("x is", x)` with `x` a NumPy array or a list: eagerly tf.print formats it
    as Python does (`array([1, 2, 3])`), in a graph as a tensor (`[1 2 3]`): such a call
    stays on the host. (A literal string or number prints the same either way.)"""
    fn = _value(call.func, parsed, facts)
    if getattr(fn, "__name__", None) not in ("print", "print_v2") or not str(
            getattr(fn, "__module__", "")).startswith("tensorflow"):
        return False
    return any(anno.get(arg, Key.KIND) == Kind.HOST_DATA and not isinstance(arg, gast.Constant)
               for arg in call.args)


def _root(node: gast.AST) -> str | None:
    while isinstance(node, gast.Attribute):
        node = node.value
    return node.id if isinstance(node, gast.Name) else None


def _dotted(node: gast.AST) -> str:
    if isinstance(node, gast.Name):
        return node.id
    return f"{_dotted(node.value)}.{node.attr}"


def parsed_locals(parsed: Parsed) -> set[str]:
    return {n.name for n in nodes.walk(parsed.node)
            if isinstance(n, gast.FunctionDef) and n is not parsed.node}


def _value(node: gast.AST, parsed: Parsed, facts: Facts) -> Any:
    """The object a Name/Attribute chain refers to: rooted at an object argument, or at a
    free name of the function."""
    if isinstance(node, gast.Name):
        if node.id in facts.objects:
            return facts.objects[node.id]
        if node.id in facts.args:
            return MISSING
        return parsed.lookup(node.id)
    if isinstance(node, gast.Attribute):
        base = _value(node.value, parsed, facts)
        return MISSING if base is MISSING else getattr(base, node.attr, MISSING)
    return MISSING


def _all_tf(fn: Any, facts: Facts, callee: Callable | None) -> bool:
    """A function or bound method whose body is all TF work for tensor arguments."""
    if getattr(type(fn), "_gpe_sliced", False):  # a sliced function (or bound method)
        obj = getattr(fn, "_obj", None)
        fn = getattr(getattr(fn, "_sliced", fn), "fn", fn)
        if obj is not None:
            fn = types.MethodType(fn, obj)
    if callee is None:
        return False
    target = fn.__func__ if inspect.ismethod(fn) else fn
    if not isinstance(target, types.FunctionType):
        return False
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.default is p.empty]
    except (TypeError, ValueError):
        return False
    kinds = [Kind.TENSOR] * len(params)
    return callee(fn, kinds, facts) is not None
