"""Callees: a user function called on TF values whose body is all TF work.

`kind_of_call(fn, arg_kinds, facts, analyse)` parses `fn` and runs `analyse(parsed,
facts)` on it for arguments of those kinds (the pipeline gives its own passes up to
placement: this module reads `Key.PLACE` and `Key.EFFECT`), and returns `Kind.TF_OP` (or
`TF_EFFECT_OP` when it writes TF state) if every statement of it runs in the TF part, else
None. Arguments that are objects (a Keras model, an optimizer, a user's model object) are
given by value, judged for that object: the result lists what the callee reads from them
(`self.w1`, `self.rate`), which the caller captures and guards as its own paths (by
identity; a Python number by value, and once it keeps changing the caller no longer
treats the call as TF work: it would be frozen when the callee is traced). The kinds pass calls it through the hook the pipeline gives it. Such a call
stays in the caller's TF part, where it becomes a call of the callee's own FunctionDef
(no inlining). Anything else (host statements, recursion, *args) leaves the call on the
host. Results are cached per function (weakly: a function no longer used elsewhere is
collected with its closure), argument kinds and the objects' identities; a caller whose
slice turns out provisional (a user's Keras layer met before its first call built it)
`forget`s the judgements made during it (listed by a `Recording`).
"""
from __future__ import annotations

import inspect
import linecache
import os
import threading
import types
import weakref
from typing import Any, Callable, NamedTuple

import gast

from . import anno, namespaces, nodes, recursion, reproduced, shapes, speculated
from .anno import Key
from .errors import Refusal
from .facts import CALLEE_ARG_KINDS, TF_KINDS, ArgFact, Facts, Kind
from .parser import MISSING, Parsed, parse
from .placement import Place
from .reasons import effect_call

# function -> {argument kinds: its kind as a call}; weak, so functions can be collected
# (with objects: {kinds + their ids: (its kind, weak references to the objects)})
_cache: "weakref.WeakKeyDictionary[types.FunctionType, dict[tuple, Any]]" = \
    weakref.WeakKeyDictionary()
_active: set[Any] = set()  # functions being analysed (recursion stays on the host)
# function -> why it was last judged host work (host_statement), for the caller's messages
_why: "weakref.WeakKeyDictionary[types.FunctionType, str]" = weakref.WeakKeyDictionary()

Analyse = Callable[[Parsed, Facts], None]
"""The pipeline's passes up to placement, run on a parsed callee."""


class Judged(NamedTuple):
    """A callee found to be all TF work: its kind, and what it reads from the objects passed
    to it: (argument position, attribute chain below it, True for a Python number)."""

    kind: Kind
    reads: tuple = ()
    # a recursion over a tree, unrolled per shape (recursion.py): the attributes of its
    # counters (the host half changes them during the call)
    unrolled: tuple | None = None
    # branches on a Python number the caller sends (not folded): (argument position, the
    # `if` test's source, the parameter's name); the caller's call key holds each test's
    # outcome, the TF part takes the branch it had when built (see speculated.py)
    tests: tuple = ()
    # what it reads from its own namespace (globals, closure cells, chains on them), named
    # for the caller's call key (namespaces.py): (path, a Python number?)
    globals: tuple = ()
    # the static dimensions it reads of its tensor arguments (slicer/shapes.py): checked
    # where the caller's TF part traces the call
    shapes: tuple = ()
    # it returns TF objects themselves (`return [self.w1, self.w2]`: variables, a list of
    # them): traced inline in the caller's TF part, which gets the objects (a FunctionDef
    # would return their values)
    inline: bool = False


def kind_of_call(fn: Any, arg_kinds: list[Kind], facts: Facts, analyse: Analyse,
                 objects: list | tuple = (), constants: list | tuple = ()) -> Judged | None:
    """`objects`: per argument, the object it is (a Keras model, an optimizer, a user's
    object: the callee sees it by value, as the caller's TF part captures it) or MISSING;
    `constants`: per argument, True where the caller's value is fixed for its call (a
    Python number folded there: the callee is traced with it), or the shape of a tensor
    the call key fixes (callsites.fixed)."""
    if inspect.ismethod(fn):  # a method given to a TF op (strategy.run): not cached
        return _method(fn, arg_kinds, facts, analyse)
    if not isinstance(fn, types.FunctionType) or fn in _active:
        return None
    objects = list(objects) + [MISSING] * (len(arg_kinds) - len(objects))
    if Kind.STRUCTURE in arg_kinds:  # a tree of data objects: a recursion over it?
        judged = recursion.judge(fn, arg_kinds, objects, facts.classify)
        return None if judged is None else Judged(*judged)
    constants = list(constants) + [False] * (len(arg_kinds) - len(constants))
    results = _cache.setdefault(fn, {})
    held = [o for o in objects if o is not MISSING]
    key = tuple(arg_kinds) + tuple(constants) * any(constants) + tuple(id(o) for o in held) \
        + ("reads",) * (facts.reads is not None)  # (judged with what TF methods read)
    if key in results and not held:
        return results[key]
    if key in results and all(ref() is o for ref, o in zip(results[key][1], held)) and \
            results[key][2] == _read_state(results[key][0], objects):
        # the same objects (not new ones at the same address), holding what it read then
        return results[key][0]
    _active.add(fn)
    try:
        judged = _analyse(fn, arg_kinds, objects, constants, facts, analyse)
    finally:
        _active.discard(fn)
    try:
        results[key] = (judged, [weakref.ref(o) for o in held],
                        _read_state(judged, objects)) if held else judged
        if _written.entries is not None:
            _written.entries.append((weakref.ref(fn), key))
    except TypeError:  # an object without weak references: judged again next time
        pass
    return judged


def _read_state(judged: Judged | None, objects: list) -> tuple:
    """What a callee judged TF work read from its objects, as it is now (identities; a
    Python number's value): a cached judgement holds only while it is the same (the model
    on `self.model` replaced, a model compiled again with another loss: judged again)."""
    if judged is None:
        return ()
    state = []
    for position, below, _ in judged.reads:
        value = objects[position]
        try:
            for attr in below.split(".")[1:]:
                value = getattr(value, attr)
        except Exception:  # noqa: BLE001 (a property that fails now: judged again)
            return (object(),)
        if type(value) in (bool, int, float, str):
            state.append((type(value), value))
        elif type(value) in (list, tuple):  # made anew on each access (`model.weights`)
            state.append(tuple(map(id, value)))
        elif inspect.ismethod(value):
            state.append((id(value.__self__), id(value.__func__)))
        else:
            state.append(id(value))
    return tuple(state)


class _Written(threading.local):
    """The judgements cached inside a `Recording` block, as (function, key)."""

    def __init__(self):
        self.entries: list | None = None


_written = _Written()


class Recording:
    """Record the judgements cached inside the block, for `forget`: a judgement may turn
    out provisional (a user's Keras layer met before its first call built it is not TF
    work yet; the caller slices again once it is built, and must judge again). A class,
    not a generator: the slicer's Refusal is a frozen exception (contextlib's generator
    manager sets `__traceback__` on what passes through it)."""

    def __enter__(self) -> list:
        self.outer, _written.entries = _written.entries, []
        return _written.entries

    def __exit__(self, *exc) -> None:
        entries, _written.entries = _written.entries, self.outer
        if self.outer is not None:
            self.outer.extend(entries)


def forget(entries: list) -> None:
    """Drop the judgements a `Recording` listed from the cache."""
    for ref, key in entries:
        fn = ref()
        if fn is not None:
            _cache.get(fn, {}).pop(key, None)


def _analyse(fn: types.FunctionType, arg_kinds: list[Kind], objects: list, constants: list,
             facts: Facts, analyse: Analyse) -> Judged | None:
    params = list(inspect.signature(fn).parameters.values())
    spread = {p.name for p in params if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    params = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind == p.KEYWORD_ONLY for p in inspect.signature(fn).parameters.values()) or \
            len(arg_kinds) > len(params):
        return None
    args, held = {}, {}
    for i, param in enumerate(params):
        if i < len(arg_kinds) and objects[i] is not MISSING:
            # bound into the callee's TF part; only chains to TF objects are read there
            args[param.name] = ArgFact(Kind.HOST, constant=True, value=objects[i])
            held[param.name] = objects[i]
        elif i < len(arg_kinds) and arg_kinds[i] in CALLEE_ARG_KINDS:
            # a Python number the caller folded is fixed for the callee's trace too, and
            # so is the shape of the caller's tensor argument of exact shape
            fixed = constants[i]
            args[param.name] = ArgFact(arg_kinds[i], constant=fixed is True,
                                       shape=fixed if isinstance(fixed, tuple) else None)
        elif i < len(arg_kinds):
            return None
        elif param.default is not param.empty and isinstance(param.default, (bool, int, float)):
            args[param.name] = ArgFact(Kind.PY_SCALAR, constant=True, value=param.default)
        elif param.default is None:  # `training=None` (a layer's `call`: Keras may pass
            # its call context's flag instead, a Python value the trace sees as eager does)
            args[param.name] = ArgFact(Kind.HOST_DATA, python_type="NoneType", constant=True)
        else:
            return None
    try:
        parsed = parse(fn)
        if spread & {n.id for s in parsed.node.body for n in nodes.walk(s)
                     if isinstance(n, gast.Name)}:
            return None  # it reads its *args or **kwargs (what a call spreads there varies)
        analyse(parsed, Facts(args=args, classify=facts.classify, objects=held,
                               reads=facts.reads))
    except (Refusal, SyntaxError, TypeError, ValueError):
        return None
    sent = {p.name: i for i, p in enumerate(params) if p.name in args and
            args[p.name].kind == Kind.PY_SCALAR and not args[p.name].constant}
    tests: list = []
    kind = pure_body(parsed.node, sent, tests)
    if kind is None:
        _note_why(fn, parsed)
    if kind is None or (sent and not speculated.only_in_tests(parsed.node, set(sent),
                                                              tests)):
        return None
    tests = [(test, name) for test, name in tests if test is not None]
    needs = shapes.reads(parsed.node, {p.name: i for i, p in enumerate(params)
                                       if p.name in args and args[p.name].kind == Kind.TENSOR})
    position = {p.name: i for i, p in enumerate(params) if p.name in held}
    return Judged(kind, tuple(sorted(_object_reads(parsed.node, position))), shapes=needs,
                  tests=tuple((sent[name], speculated.source(test), name)
                              for test, name in tests),
                  globals=namespaces.free_reads(parsed, {p.name for p in params}),
                  inline=_returns_objects(parsed.node))


def why_host(fn: Any) -> str:
    """Why `fn` was last judged host work (see host_statement), or ""."""
    try:
        return _why.get(fn, "")
    except TypeError:
        return ""


def _note_why(fn: types.FunctionType, parsed: Parsed) -> None:
    why = host_statement(parsed)
    if why:
        try:
            _why[fn] = why
        except TypeError:  # (no weak reference to it)
            pass


def host_statement(parsed: Parsed) -> str:
    """Why the analysed function is host work, in the user's terms: `{source}` ({file}:{line})
    of its first statement that runs on the host, and through a call of a callee judged
    host work, where in that callee (d2l's LeNet: `return self.forward(X, *args)` calls
    Module.forward, whose `assert ...` runs on the host); "" if none is found."""
    for node in nodes.walk(parsed.node):
        if not isinstance(node, gast.stmt) or node is parsed.node or \
                anno.get(node, Key.PLACE) != Place.HOST or (
                    isinstance(node, gast.Expr) and isinstance(node.value, gast.Constant)):
            continue  # (a docstring: no reason)
        inner = next((_why[c[0]] for c in (anno.get(n, Key.SPLICE) for n in nodes.walk(node)
                                            if isinstance(n, gast.Call))
                      if c is not None and c[0] in _why), "")
        text = linecache.getline(parsed.filename, node.lineno).strip()
        where = f"{os.path.basename(parsed.filename)}:{node.lineno}"
        said = f"`{text}` ({where})" if text else f"a statement at {where}"
        if inner:
            return f"{said} calls {_qualname(node)}, where {inner}"
        if not isinstance(node, gast.Return):  # (a `return` is on the host: no reason)
            return f"{said} runs on the host"
    return ""


def _qualname(stmt: gast.stmt) -> str:
    for n in nodes.walk(stmt):
        if isinstance(n, gast.Call) and anno.get(n, Key.SPLICE) is not None:
            return anno.get(n, Key.SPLICE)[0].__qualname__
    return "a function"


def _object_reads(fn: gast.FunctionDef, position: dict[str, int]) -> set[tuple]:
    """(argument position, chain below it, a Python number?) for every attribute chain the
    callee reads from an object argument, its own callees' reads included."""
    reads = set()
    folded = [n for test in anno.get(fn, Key.FOLDED, ()) for n in nodes.walk(test)]
    for node in list(nodes.walk(fn)) + folded:  # (the tests hoist folded away: guarded too)
        paths = [(anno.get(node, Key.PATH), anno.get(node, Key.KIND) == Kind.PY_SCALAR)] \
            if isinstance(node, gast.Attribute) and anno.has(node, Key.PATH) else []
        paths += [(p, number) for p, number in anno.get(node, Key.CALLEE_READS, ())]
        for path, number in paths:
            root, _, below = path.partition(".")
            if root in position:
                reads.add((position[root], "." + below if below else "", number))
    return reads


def reads_python_numbers(fn: gast.FunctionDef) -> bool:
    """A Python number read from an object (`self.rate`): folded when traced."""
    return any(isinstance(n, gast.Attribute) and anno.has(n, Key.PATH)
               and anno.get(n, Key.KIND) == Kind.PY_SCALAR for n in nodes.walk(fn))


def _method(method: Any, arg_kinds: list[Kind], facts: Facts, analyse: Analyse
            ) -> Judged | None:
    """A bound method: its body for `self` bound to the object (an object argument: only
    attribute chains to TF objects are read in the TF part) and arguments of these kinds."""
    fn, obj = method.__func__, method.__self__
    if not isinstance(fn, types.FunctionType) or fn in _active or \
            not all(k in CALLEE_ARG_KINDS for k in arg_kinds):
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
        analyse(parsed, Facts(args=args, classify=facts.classify, objects={this: obj},
                               reads=facts.reads))
    except (Refusal, SyntaxError, TypeError, ValueError):
        return None
    finally:
        _active.discard(fn)
    kind = pure_body(parsed.node)
    if kind is None:
        _note_why(fn, parsed)
    return None if kind is None else Judged(
        kind, globals=namespaces.free_reads(parsed, {p.name for p in params}))


def pure_body(fn: gast.FunctionDef, sent: dict | None = None,
              tests: list | None = None) -> Kind | None:
    """TF_OP/TF_EFFECT_OP if every statement is TF work or Python its trace reproduces as
    eager runs it (reproduced.py: locals, constants, guarded reads, a `for` over a range,
    an `if` on a value fixed for the call, such as a default `apply_sigmoid=False`: the
    callee is traced per value, so Python takes the branch when it is traced).
    `sent`: parameters that are Python numbers the caller sends; an `if` testing only one
    of them against constants is speculated (appended to `tests` with its parameter)."""
    effect = _pure(fn.body, sent or {}, tests if tests is not None else [],
                   reproduced.fresh_locals(fn))
    if effect is None:
        return None
    return Kind.TF_EFFECT_OP if effect else Kind.TF_OP


def _pure(body: list[gast.stmt], sent: dict, tests: list, fresh: set) -> bool | None:
    """None if a statement of `body` is host work, else whether one changes TF state."""
    effect = False
    for stmt in body:
        if isinstance(stmt, gast.Return):
            if stmt.value is not None and not _tf_value(stmt.value, sent, fresh):
                return None
            continue
        if speculated.arithmetic(stmt, sent, tests):
            continue  # Python arithmetic on sent numbers: the TF part's HostValues do it
        tested = speculated.tested(stmt.test, set(sent)) if isinstance(stmt, gast.If) \
            and anno.get(stmt, Key.PLACE) != Place.TF else None
        if tested is not None:
            tests.append((stmt.test, tested))
        if isinstance(stmt, gast.If) and (anno.get(stmt.test, Key.CONSTANT) or tested) and \
                anno.get(stmt, Key.PLACE) != Place.TF:
            branches = [_pure(stmt.body, sent, tests, fresh),
                        _pure(stmt.orelse, sent, tests, fresh)]
            if None in branches:
                return None
            effect = effect or any(branches)
            continue
        if isinstance(stmt, gast.With) and anno.get(stmt, Key.PLACE) == Place.TF:
            inner = _pure(stmt.body, sent, tests, fresh)  # (a host statement in a tape)
            if inner is None:
                return None
            effect = effect or inner or bool(anno.get(stmt, Key.EFFECT))
            continue
        if anno.get(stmt, Key.PLACE) not in (Place.TF, Place.BOTH):
            inner = _reproduced(stmt, sent, tests, fresh)
            if inner is None:
                return None
            effect = effect or inner
            continue
        effect = effect or bool(anno.get(stmt, Key.EFFECT)) or any(
            anno.get(s, Key.EFFECT) for s in nodes.walk(stmt) if isinstance(s, gast.stmt))
    return effect


def _reproduced(stmt: gast.stmt, sent: dict, tests: list, fresh: set) -> bool | None:
    """A statement left to the host that the callee's trace runs as eager would (see
    reproduced.py): None if it is not; else whether TF work inside it changes TF state."""
    if not reproduced.statement(stmt, set(sent), fresh):
        return None
    if isinstance(stmt, (gast.For, gast.If)):
        branches = [_pure(stmt.body, sent, tests, fresh), _pure(stmt.orelse, sent, tests, fresh)]
        return None if None in branches else any(branches)
    return any(effect_call(n) for n in nodes.walk(stmt))


def _tf_value(value: gast.expr, sent: dict, fresh: set) -> bool:
    """A returned expression of TF values (`total / n`, `(h, c)`, `tf.stack(outs)`,
    `[self.w1, self.w2]`) that the trace computes as eager does."""
    parts = value.elts if isinstance(value, (gast.Tuple, gast.List)) else [value]
    return all(anno.get(p, Key.KIND) in TF_KINDS for p in parts) and \
        reproduced.expression(value, set(sent), fresh)


def _returns_objects(fn: gast.FunctionDef) -> bool:
    """A `return` of variables or structures of TF objects (not only tensors computed)."""
    for node in nodes.walk(fn):
        if isinstance(node, gast.Return) and node.value is not None:
            value = node.value
            parts = value.elts if isinstance(value, (gast.Tuple, gast.List)) else [value]
            if any(anno.get(p, Key.KIND) in (Kind.VARIABLE, Kind.TF_OBJECT) for p in parts):
                return True
    return False
