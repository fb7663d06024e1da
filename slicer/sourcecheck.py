"""Is the source read from a function's file the code Python runs?

The slicer reads a function's source from its file when it slices (as autograph does). A
file edited after it was imported (a training script changed while it trains) then gives
the slicer one program while Python runs another: the sliced calls would silently do what
the new text says. `same_code(fn, source)` compiles the text read and compares it with
`fn.__code__`, instruction by instruction, names, constants, operators and line offsets
included; only what compiling a def away from its enclosing scope changes is left out
(where a name is stored: fast, cell, global; the closure prologue; jump offsets).
"""
from __future__ import annotations

import __future__
import dis
import re
import textwrap
import types
from typing import Callable

# what compiling the def alone (without its enclosing function or class) changes
_SKIPPED = {"RESUME", "COPY_FREE_VARS", "MAKE_CELL", "NOP", "CACHE", "EXTENDED_ARG",
            "PRECALL", "PUSH_NULL"}
_PREFIXES = ("LOAD_", "STORE_", "DELETE_")
_KEEP_ARGS = {"BINARY_OP", "COMPARE_OP", "IS_OP", "CONTAINS_OP", "UNPACK_SEQUENCE",
              "BUILD_LIST", "BUILD_TUPLE", "BUILD_MAP", "BUILD_SET", "CALL", "FORMAT_VALUE",
              "UNARY_NEGATIVE", "UNARY_NOT", "UNARY_INVERT", "CALL_FUNCTION_EX", "KW_NAMES"}
# a private name is mangled inside its class (`self.__x` -> `_Model__x`), not when its def
# is compiled alone: both sides compare unmangled
_MANGLED = re.compile(r"^_[A-Za-z0-9]\w*?(__\w*[A-Za-z0-9_])$")
# a class made inside the def names itself by qualified name (`Outer.f.<locals>.C`): the
# def compiled alone says `f.<locals>.C`
_LOCAL_QUALNAME = re.compile(r"^[\w.<>]*?(\w+\.<locals>\..*)$")
_FUTURE_FLAGS = 0
for _name in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _name).compiler_flag


def _kind(opname: str) -> str:
    if opname == "LOAD_METHOD":  # LOAD_ATTR where the object is a module imported there
        return "LOAD_ATTR"
    for prefix in _PREFIXES:
        if opname.startswith(prefix) and opname not in ("LOAD_CONST", "LOAD_ATTR",
                                                          "STORE_ATTR", "DELETE_ATTR"):
            return prefix + "NAME"
    return opname


def fingerprint(code: types.CodeType) -> list:
    first = code.co_firstlineno
    out: list = [code.co_name]
    closure = False  # the tuple of cells a nested function (a comprehension) closes over
    for ins in dis.get_instructions(code):
        if ins.opname in _SKIPPED:
            continue
        # a comprehension reading a name of the enclosing function gets it through a cell
        # (LOAD_CLOSURE ..., BUILD_TUPLE, then MAKE_FUNCTION); the def compiled alone reads
        # a global there and builds no closure
        if ins.opname == "LOAD_CLOSURE":
            closure = True
            continue
        if closure and ins.opname == "BUILD_TUPLE":
            closure = False
            continue
        closure = False
        kind = _kind(ins.opname)
        if isinstance(ins.argval, types.CodeType):
            arg = ("code", tuple(fingerprint(ins.argval)))
        elif kind in ("LOAD_NAME", "STORE_NAME", "DELETE_NAME", "LOAD_CONST", "LOAD_ATTR",
                      "STORE_ATTR", "DELETE_ATTR", "LOAD_METHOD", "IMPORT_NAME",
                      "IMPORT_FROM") or ins.opname in _KEEP_ARGS:
            value = ins.argval
            if isinstance(value, str) and kind != "LOAD_CONST":
                value = _MANGLED.sub(r"\1", value)
            elif isinstance(value, str):
                value = _LOCAL_QUALNAME.sub(r"\1", value)
            arg = (type(value).__name__, repr(value))
        else:
            arg = None
        line = ins.positions.lineno if ins.positions else None
        out.append((kind, arg, None if line is None else line - first))
    return out


def _compiled(fn: Callable, source: str, filename: str) -> types.CodeType | None:
    flags = fn.__code__.co_flags & _FUTURE_FLAGS
    try:
        module = compile(source, filename, "exec", flags=flags, dont_inherit=True)
    except SyntaxError:
        free = fn.__code__.co_freevars
        if not free:
            raise
        # a def declaring `nonlocal y` compiles only inside a function binding y
        enclosing = "def _gpe_enclosing():\n" + "".join(
            f"    {name} = None\n" for name in free) + textwrap.indent(source, "    ")
        module = compile(enclosing, filename, "exec", flags=flags, dont_inherit=True)
        module = _named(module.co_consts, "_gpe_enclosing")
    return _named(module.co_consts, fn.__code__.co_name)


def _named(consts: tuple, name: str) -> types.CodeType | None:
    return next((c for c in consts if isinstance(c, types.CodeType) and c.co_name == name),
                None)


def same_code(fn: Callable, source: str, filename: str) -> bool:
    """Whether `source` (one dedented def, as read from the file) compiles to `fn`'s code."""
    try:
        code = _compiled(fn, source, filename)
    except (SyntaxError, ValueError):
        return False
    return code is not None and fingerprint(code) == fingerprint(fn.__code__)
