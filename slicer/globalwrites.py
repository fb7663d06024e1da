"""Globals the module's own code rebinds (`def bump(): global step; step += 1`).

A call of the user's code on the host may rebind such a global (or a closure variable:
`nonlocal count` in a helper beside the step) in the middle of a call
(eagerly, `x * step` after `bump()` reads the new value). `rebound(parsed)` names the
globals any function or method of the function's module stores (`STORE_GLOBAL` in its
code, nested functions included); activity.resolve counts them as written by each
statement that calls user code on the host, so the TF part reads the value the host has
there, sent after the call, not the one sent when the call started. Nothing here imports
TensorFlow.
"""
from __future__ import annotations

import dis
import functools
import inspect
import types

from .parser import Parsed

_STORES = frozenset({"STORE_GLOBAL", "DELETE_GLOBAL"})
_CELL_STORES = frozenset({"STORE_DEREF", "DELETE_DEREF"})


def rebound(parsed: Parsed) -> frozenset:
    """Names of globals the code of the function's module rebinds anywhere, and of its
    closure variables a function in its closure rebinds (`nonlocal count` in a `bump`
    beside it), holding values that cross between the parts (numbers, strings, tensors:
    an object, a model, is captured by identity and cannot be sent)."""
    fn = parsed.fn
    module = getattr(fn, "__module__", None)
    namespace = getattr(fn, "__globals__", {})
    names: set[str] = set()
    for value in list(namespace.values()):
        for code in _codes(value, module):
            names |= _stored(code, _STORES)
    found = {n for n in names if _crosses(namespace.get(n))}
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ())) \
        if isinstance(fn, types.FunctionType) else {}
    values = {name: cell.cell_contents for name, cell in cells.items()
              if _filled(cell)}
    stored: set[str] = set()
    for value in values.values():
        for code in _codes(value, module):
            stored |= _stored(code, _CELL_STORES)
    return frozenset(found | {n for n in stored & values.keys() if _crosses(values[n])})


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # an empty cell (a name bound later in the enclosing function)
        return False
    return True


def _crosses(value) -> bool:
    if value is None or type(value) in (bool, int, float, str):
        return True
    return hasattr(value, "dtype") and hasattr(value, "shape") and not hasattr(value, "assign")


def _codes(value, module):
    """Code objects of a function or class of `module` (a gpe wrapper: its function)."""
    value = inspect.unwrap(value) if callable(value) and hasattr(value, "__wrapped__") \
        else value
    if isinstance(value, types.FunctionType):
        if value.__module__ == module:
            yield value.__code__
    elif isinstance(value, type) and value.__module__ == module:
        for member in list(vars(value).values()):
            member = getattr(member, "__func__", member)  # staticmethod, classmethod
            for part in (member, getattr(member, "fget", None), getattr(member, "fset", None)):
                if isinstance(part, types.FunctionType):
                    yield part.__code__


@functools.lru_cache(maxsize=4096)
def _stored(code: types.CodeType, ops: frozenset) -> frozenset:
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ops}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _stored(const, ops)
    return frozenset(names)


def mutated(fn, depth: int = 3) -> frozenset:
    """Globals a plain function may change in place (`CFG.scale += 1`, `LOG[k] = v`,
    `SCHED.step()`): those its code loads, where it assigns an attribute or item, those
    on which it calls a method of the user's, and those of the functions of its module it
    calls (`depth` deep). Over-approximates: for the kinds pass, a number on such an
    object (or on one it reaches) is not folded (slicer/chains.mutated_roots)."""
    if not isinstance(fn, types.FunctionType) or depth <= 0:
        return frozenset()
    names = set(_mutated(fn.__code__))
    names |= {name for name, attr in _method_calls(fn.__code__)
              if _user_method(getattr(fn.__globals__.get(name), attr, None))}
    for name in _loaded(fn.__code__):
        callee = fn.__globals__.get(name)
        if isinstance(callee, types.FunctionType) and callee is not fn and \
                callee.__module__ == fn.__module__:
            names |= mutated(callee, depth - 1)
    return frozenset(names)


_IN_PLACE = frozenset({"STORE_ATTR", "DELETE_ATTR", "STORE_SUBSCR", "DELETE_SUBSCR"})


@functools.lru_cache(maxsize=4096)
def _loaded(code: types.CodeType) -> frozenset:
    names = {i.argval for i in dis.get_instructions(code) if i.opname == "LOAD_GLOBAL"}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _loaded(const)
    return frozenset(names)


@functools.lru_cache(maxsize=4096)
def _method_calls(code: types.CodeType) -> frozenset:
    """(global, attribute) pairs the code reads as `GLOBAL.attribute` (a method it calls,
    `SCHED.step()`, among them)."""
    found = set()
    ops = list(dis.get_instructions(code))
    for op, after in zip(ops, ops[1:]):
        if op.opname == "LOAD_GLOBAL" and after.opname in ("LOAD_METHOD", "LOAD_ATTR"):
            found.add((op.argval, after.argval))
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found |= _method_calls(const)
    return frozenset(found)


def _user_method(value) -> bool:
    """A bound method of an object of the user's code (not TensorFlow's or Keras's)."""
    if not inspect.ismethod(value):
        return False
    module = (getattr(value.__func__, "__module__", None) or "").split(".", 1)[0]
    return module not in ("keras", "tensorflow", "tf_keras", "builtins")


@functools.lru_cache(maxsize=4096)
def _mutated(code: types.CodeType) -> frozenset:
    if not any(i.opname in _IN_PLACE for i in dis.get_instructions(code)):
        names = frozenset()
    else:
        names = frozenset(i.argval for i in dis.get_instructions(code)
                          if i.opname == "LOAD_GLOBAL")
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _mutated(const)
    return names
