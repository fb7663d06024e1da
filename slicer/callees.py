"""Callees: a user function called on TF values whose body is all TF work.

`kind_of_call(fn, arg_kinds, facts, analyse)` parses `fn` and runs `analyse(parsed,
facts)` on it for arguments of those kinds (the pipeline gives its own passes up to
placement: this module reads `Key.PLACE` and `Key.EFFECT`), and returns `Kind.TF_OP` (or
`TF_EFFECT_OP` when it writes TF state) if every statement of it runs in the TF part, else
None. The kinds pass calls it through the hook the pipeline gives it. Such a call
stays in the caller's TF part, where it becomes a call of the callee's own FunctionDef
(no inlining). Anything else (host statements, recursion, *args) leaves the call on the
host. Results are cached per function (weakly: a function no longer used elsewhere is
collected with its closure) and argument kinds.
"""
from __future__ import annotations

import inspect
import types
import weakref
from typing import Any, Callable

import gast

from gpe.slicer import anno
from gpe.slicer.anno import Key
from gpe.slicer.errors import Refusal
from gpe.slicer.facts import TF_KINDS, ArgFact, Facts, Kind
from gpe.slicer.parser import Parsed, parse
from gpe.slicer.placement import Place

_ARG_KINDS = TF_KINDS | {Kind.PY_SCALAR}
# function -> {argument kinds: its kind as a call}; weak, so functions can be collected
_cache: "weakref.WeakKeyDictionary[types.FunctionType, dict[tuple, Kind | None]]" = \
    weakref.WeakKeyDictionary()
_active: set[Any] = set()  # functions being analysed (recursion stays on the host)

Analyse = Callable[[Parsed, Facts], None]
"""The pipeline's passes up to placement, run on a parsed callee."""


def kind_of_call(fn: Any, arg_kinds: list[Kind], facts: Facts, analyse: Analyse
                 ) -> Kind | None:
    if inspect.ismethod(fn):  # a method of an object (its `self` bound): not cached
        return _method(fn, arg_kinds, facts, analyse)
    if not isinstance(fn, types.FunctionType) or fn in _active:
        return None
    results = _cache.setdefault(fn, {})
    key = tuple(arg_kinds)
    if key not in results:
        _active.add(fn)
        try:
            results[key] = _analyse(fn, arg_kinds, facts, analyse)
        finally:
            _active.discard(fn)
    return results[key]


def _analyse(fn: types.FunctionType, arg_kinds: list[Kind], facts: Facts, analyse: Analyse
             ) -> Kind | None:
    if not all(k in _ARG_KINDS for k in arg_kinds):
        return None
    params = list(inspect.signature(fn).parameters.values())
    if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params) or \
            len(arg_kinds) > len(params):
        return None
    args = {}
    for i, param in enumerate(params):
        if i < len(arg_kinds):
            args[param.name] = ArgFact(arg_kinds[i])
        elif param.default is not param.empty and isinstance(param.default, (bool, int, float)):
            args[param.name] = ArgFact(Kind.PY_SCALAR)
        else:
            return None
    try:
        parsed = parse(fn)
        analyse(parsed, Facts(args=args, classify=facts.classify))
    except (Refusal, SyntaxError, TypeError, ValueError):
        return None
    return pure_body(parsed.node)


def _method(method: Any, arg_kinds: list[Kind], facts: Facts, analyse: Analyse
            ) -> Kind | None:
    """A bound method: its body for `self` bound to the object (an object argument: only
    attribute chains to TF objects are read in the TF part) and arguments of these kinds."""
    fn, obj = method.__func__, method.__self__
    if not isinstance(fn, types.FunctionType) or fn in _active or \
            not all(k in _ARG_KINDS for k in arg_kinds):
        return None
    params = list(inspect.signature(fn).parameters.values())
    if not params or len(params) != len(arg_kinds) + 1 or any(
            p.kind != p.POSITIONAL_OR_KEYWORD for p in params):
        return None
    this = params[0].name
    args = {this: ArgFact(Kind.HOST, python_type=type(obj).__qualname__, constant=True,
                          value=obj)}
    args.update((p.name, ArgFact(k)) for p, k in zip(params[1:], arg_kinds))
    _active.add(fn)
    try:
        parsed = parse(fn)
        analyse(parsed, Facts(args=args, classify=facts.classify, objects={this: obj}))
    except (Refusal, SyntaxError, TypeError, ValueError):
        return None
    finally:
        _active.discard(fn)
    return pure_body(parsed.node)


def pure_body(fn: gast.FunctionDef) -> Kind | None:
    """TF_OP/TF_EFFECT_OP if every statement is TF work (a final `return` of TF values)."""
    effect = False
    body = fn.body
    for i, stmt in enumerate(body):
        place_ = anno.get(stmt, Key.PLACE)
        if isinstance(stmt, gast.Return) and i == len(body) - 1:
            if stmt.value is not None and not _tf_names(stmt.value):
                return None
            continue
        if place_ not in (Place.TF, Place.BOTH):
            return None
        effect = effect or bool(anno.get(stmt, Key.EFFECT)) or any(
            anno.get(s, Key.EFFECT) for s in gast.walk(stmt) if isinstance(s, gast.stmt))
    return Kind.TF_EFFECT_OP if effect else Kind.TF_OP


def _tf_names(value: gast.expr) -> bool:
    if isinstance(value, (gast.Tuple, gast.List)):
        return all(_tf_names(e) for e in value.elts)
    return isinstance(value, gast.Name) and anno.get(value, Key.KIND) in TF_KINDS
