"""The call key: what a call must match to take a variant (the host-side guard).

`CallKeys` (one per SlicedFunction) binds a call's arguments to parameter names, and
describes them with the identity of every object a TF part captured (`self.w`, a layer,
a global) into a key: a variant runs a call only when the keys are equal. A key that
matches no variant becomes "expected X, got Y" (speculation.Assumptions.miss).
"""
from __future__ import annotations

import builtins
import inspect
from typing import Any, Callable

from ..facts import signature
from ..speculation.speculation import BY_IDENTITY, Assumptions, guard_value
from ...slicer import namespaces
from ...slicer.speculated import compile_test


def outcome(test, value) -> Any:
    """A speculated test's outcome on the number a path holds this call (its type's name
    where it is no longer a Python number: another key, never a wrong branch)."""
    if type(value) not in (bool, int, float):
        return ("not a number", type(value).__name__)
    try:
        return bool(test(value))
    except Exception as exc:  # noqa: BLE001 (e.g. a comparison with NaN is fine; others)
        return ("raised", type(exc).__name__)


class CallKeys:
    def __init__(self, fn: Callable, assumed: Assumptions):
        self.fn = fn
        self.assumed = assumed
        self.signature = inspect.signature(fn)
        params = list(self.signature.parameters.values())
        # names of the parameters, when every one is plainly positional (else: bind)
        self._positional = tuple(p.name for p in params) if all(
            p.kind == p.POSITIONAL_OR_KEYWORD for p in params) else ()
        self._guards: tuple[str, ...] = ()  # captured names and paths (union over variants)
        self._split: tuple[list[str], ...] = ()  # the same, split at their dots
        self._paths: tuple = ()  # the same, with their parameter's position (of_call)
        self.last: tuple | None = None     # the key of the variant built last
        # callees' branches on numbers sent from paths (slicer/speculated.py): (path,
        # parameter, test source), and per test (its path split, the compiled test)
        self.tests: tuple[tuple[str, str, str], ...] = ()
        self._tests: tuple = ()
        self.calls = 0  # calls bound so far (the clock of Assumptions.note_path_value)
        # the objects variants were built on that their keys hold by identity (see
        # add_guards): a key built on an object that was then freed matched the next object
        # made at its address (a list subclass of tensors, new each call, frozen)
        self.held: dict[int, Any] = {}

    @property
    def guards(self) -> tuple[str, ...]:
        return self._guards

    @guards.setter
    def guards(self, guards: tuple[str, ...]) -> None:
        self._guards = tuple(guards)
        self._split = tuple(g.split(".") for g in self._guards)
        # (root, attributes, where of_call finds the root: its index among the positional
        # parameters, -1 for the function's global (`lookup` where it is not there), or
        # None: `lookup` (a closure variable, a callee's name))
        index = {name: i for i, name in enumerate(self._positional)}
        code, cells = self.fn.__code__, self.fn.__closure__
        self._paths = tuple((root, tuple(attrs), index.get(root, None if ":" in root or (
            cells and root in code.co_freevars) else -1)) for root, *attrs in self._split)

    def values(self, args: tuple, kwargs: dict) -> dict:
        """The arguments by parameter name, defaults applied (TypeError if they do not
        bind, as the function would raise)."""
        self.calls += 1
        if not kwargs and len(args) == len(self._positional):  # the common case, fast
            return dict(zip(self._positional, args))
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.arguments

    def of_call(self, args: tuple, kwargs: dict) -> tuple:
        """(the call's key, its arguments by name), or (None, None) where they do not bind
        (a TypeError, as the function would raise). On every call's path: a call by
        position alone (no keywords, every parameter given) to a function with no callee
        test, no argument relaxed or sent, is keyed as `key` keys it, without binding
        its arguments by name (None in their place: `bound` gives them)."""
        assumed = self.assumed
        if kwargs or len(args) != len(self._positional) or self._tests or \
                assumed.relaxed or assumed.dynamic or assumed.appended:
            try:
                values = self.values(args, kwargs)
            except TypeError:
                return None, None
            return self.key(values), values
        self.calls += 1
        missing, by_identity, names = signature.MISSING, BY_IDENTITY, self.fn.__globals__
        key = list(map(signature.describe, args))
        for root, attrs, index in self._paths:  # each guarded path, as `key` resolves it
            if index is None:
                obj = self.lookup(root)
            elif index < 0:
                obj = names[root] if root in names else self.lookup(root)
            else:
                obj = args[index]
            for attr in attrs:
                obj = getattr(obj, attr, missing)
            key.append(id(obj) if type(obj) in by_identity else guard_value(obj))
        return tuple(key), None

    def bound(self, args: tuple, kwargs: dict) -> dict:
        """`values` of a call `of_call` counted already."""
        self.calls -= 1
        return self.values(args, kwargs)

    def key(self, values: dict) -> tuple:
        """Argument descriptions, and the identity of every object a TF part captured (a
        rebound global, another `self`, a replaced layer all differ). On every call's path:
        each path is resolved as `signature.resolve_split` does, inline, and an object of a
        type guarded by identity gives its id without a call of `guard_value`."""
        described = self.assumed.describe(values)
        if not self._split and not self._tests:
            return described
        key, missing, by_identity = list(described), signature.MISSING, BY_IDENTITY
        for root, *attrs in self._split:
            obj = values[root] if root in values else self.lookup(root)
            for attr in attrs:
                obj = getattr(obj, attr, missing)
            key.append(id(obj) if type(obj) in by_identity else guard_value(obj))
        if not self._tests:
            return tuple(key)
        lookup, resolve = self.lookup, signature.resolve_split
        return tuple(key) + tuple([("tests", path, outcome(test, resolve(split, values, lookup)))
                                   for path, split, test in self._tests])

    def key_for(self, args: tuple, kwargs: dict) -> tuple | None:
        """The key of these arguments (None where they do not bind)."""
        try:
            return self.key(self.values(args, kwargs))
        except TypeError:
            return None

    def missed(self, key: tuple, values: dict, built=()) -> str:
        """Why `key` matched no variant ("expected X, got Y"), against the variant (of
        the keys `built`) it differs from least, the latest built of those: a step
        called with a model swapped for another after variants for two batch sizes is
        told of the model, not of a batch size. Numbers on objects that keep changing
        stop being guarded (they are sent from now on)."""
        labels = self.guards + tuple(f"{path} (`{text}`)" for path, _, text in self.tests)
        same_guards = [k for k in built if len(k) == len(key)]
        nearest = min(reversed(same_guards), default=self.last,
                      key=lambda k: sum(a != b for a, b in zip(k, key)))
        reason = self.assumed.miss(nearest, key, list(values), labels, self.calls)
        dynamic = self.assumed.dynamic_paths
        self.guards = tuple(g for g in self.guards if g not in dynamic)
        return reason

    def add_guards(self, captures: tuple[str, ...], values: dict, tests: tuple = ()) -> tuple:
        """Guard what a new variant captured too, and the outcomes of the branches its
        callees take on numbers it sends; returns the key it is stored under."""
        self.guards = tuple(sorted(set(self.guards) | set(captures)))
        if not set(tests) <= set(self.tests):
            self.tests = tuple(sorted(set(self.tests) | set(tests)))
            self._tests = tuple((path, path.split("."), compile_test(name, text))
                                for path, name, text in self.tests)
        for guard in self.guards:
            obj = signature.resolve(guard, values, self.lookup)
            value = guard_value(obj)
            if isinstance(value, tuple):
                self.assumed.note_path_value(guard, value, self.calls)
            else:  # by identity (of it, or of its items): held, so that no object made
                # later can take its address, and so its identity, while the key holds it
                self.held[id(obj)] = obj
        self.last = self.key(values)
        return self.last

    def lookup(self, name: str) -> Any:
        """A free name of the function: its closure cell, its global, or a builtin; or a
        callee's free name (`module/helper:PARAMS`, slicer/namespaces.py)."""
        if ":" in name:
            return namespaces.resolve(name)
        code = self.fn.__code__
        if self.fn.__closure__ and name in code.co_freevars:
            try:
                return self.fn.__closure__[code.co_freevars.index(name)].cell_contents
            except ValueError:  # an empty cell
                return None
        if name in self.fn.__globals__:
            return self.fn.__globals__[name]
        return getattr(builtins, name, None)
