"""Layers: a user's own Keras layer or model class whose `call` is all TF work.

`kind_of_layer_call(call, layer, classify)` analyses the class's `call` for this instance
(its attributes are known: `self.dense` is a Dense layer, `self.w` a variable) with the
passes of the pipeline up to placement. When every statement of it runs in the TF part
(no print, no list append, no `.numpy()`, no host call) and it reads no Python number from
the object (a rate or flag the program could change between calls: those would be frozen
when the TF part is traced), calling the layer builds TF ops and nothing else, so tracing
it once in the TF part gives what eager runs on every call: the layer is TF work
(`Kind.TF_EFFECT_OP`: a layer may update its own variables). Anything else: None, and the
layer's calls stay on the host, as before.

Parameters of `call`: those without a default are tensors; those with one (`training`,
`mask`) are Python values fixed for the call (the TF part is traced with them).

What a trace of `call` reads from the layer (`if self.training:` folded, the sublayers
`self.lin1` it calls, a helper's reads of `self`) is kept in `READS` (paths below the
layer): the caller captures and guards them where it calls the layer (slicer/callsites.py
`method_reads`), so that a flag changed between calls runs the call eagerly and builds
another variant, and a sublayer replaced is not the traced one.
"""
from __future__ import annotations

import inspect
import os
import weakref
from typing import Any, Callable

import gast

from . import anno, arity, nodes
from .anno import Key
from .callees import host_statement, pure_body
from .errors import Refusal
from .facts import ArgFact, Facts, Kind
from .parser import parse
from .pipeline import Pass, analyse


def kind_of_layer_call(call: Callable, layer: Any, classify: Callable[[Any], Kind]
                       ) -> Kind | None:
    return judge_layer_call(call, layer, classify)[0]


def judge_layer_call(call: Callable, layer: Any, classify: Callable[[Any], Kind]
                     ) -> tuple[Kind | None, str]:
    """(kind_of_layer_call's answer, and when it is None, why: the first statement of
    `call` that runs on the host, with its file and line, where one is found)."""
    params = list(inspect.signature(call).parameters.values())
    if not params:
        return None, "its `call` takes no `self`"
    self_name = params[0].name
    args = {self_name: ArgFact(Kind.HOST, constant=True, value=layer)}
    for param in params[1:]:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            # d2l's Module.call(self, X, *args, **kwargs): judged for calls that pass
            # nothing there (what they pass varies per call); a call that may is checked
            # where it is made (arity.py)
            empty = () if param.kind == param.VAR_POSITIONAL else {}
            args[param.name] = ArgFact(Kind.HOST_DATA, constant=True, value=empty)
            arity.VARARGS[layer] = sum(p.kind == p.POSITIONAL_OR_KEYWORD for p in params[1:])
        elif param.default is param.empty:
            args[param.name] = ArgFact(Kind.TENSOR)
        else:
            args[param.name] = ArgFact(Kind.PY_SCALAR, constant=True, value=param.default)
    facts = Facts(args=args, classify=classify, objects={self_name: layer})
    try:
        parsed = parse(call)
        analyse(parsed, facts, until=Pass.PLACEMENT)
    except (Refusal, SyntaxError, TypeError, ValueError) as exc:
        return None, f"its `call` cannot be analysed ({exc})"
    if pure_body(parsed.node) is None:
        return None, host_statement(parsed) or "its `call` does host work"
    try:
        READS[layer] = _own_reads(parsed.node, self_name)
    except TypeError:  # (no weak reference to it: a plain object's `__call__`)
        pass
    return Kind.TF_EFFECT_OP, ""


# a layer (or module) whose `call` was judged TF work -> the attribute paths below it that
# the trace reads ("training", "lin1"), each with whether it held a Python number
READS: "weakref.WeakKeyDictionary[Any, tuple[tuple[str, bool], ...]]" = \
    weakref.WeakKeyDictionary()


def _own_reads(fn: gast.FunctionDef, self_name: str) -> tuple[tuple[str, bool], ...]:
    """(path below `self`, a Python number?) for each chain on `self` the analysed `call`
    reads when traced: guarded chains (a folded test's too: hoist folded it away) and what
    the callees it calls read."""
    folded = [n for test in anno.get(fn, Key.FOLDED, ()) for n in nodes.walk(test)]
    found = set()
    for node in list(nodes.walk(fn)) + folded:
        if isinstance(node, gast.Attribute) and anno.has(node, Key.PATH):
            found.add((anno.get(node, Key.PATH), anno.get(node, Key.KIND) == Kind.PY_SCALAR))
        found |= set(anno.get(node, Key.CALLEE_READS, ()))
    prefix = self_name + "."
    return tuple(sorted((path[len(prefix):], number) for path, number in found
                        if path.startswith(prefix)))


def _where(parsed, node) -> str:
    return f"{os.path.basename(parsed.filename)}:{getattr(node, 'lineno', '?')}"

