"""Turn a plan's generated source into a live Python function.

The generated code is a factory `_gpe_factory(<runtime names>, <free variables>)` whose
inner function is the program. The inner function is rebuilt around the original
function's own closure cells (so it sees later writes to them) and its globals dict, and
compiled under the user's file name so tracebacks point at the user's lines.
"""
from __future__ import annotations

import ast
import types
from typing import Any, Callable

import gast

from ...slicer.plan import Program


def load(source: str | None, module: Any, fn: Callable, runtime: dict[str, Any],
         signature: bool = True) -> Callable:
    """`module`: a plan's `Program` (compiled once, its source not needed), a bundle's ast
    Module (parsed by ast, no gast round trip), the gast Module of `source` with the user's
    line numbers, or None (compile `source`)."""
    if isinstance(module, Program):
        code = module.code(fn.__code__.co_filename)
    elif isinstance(module, ast.Module):
        code = compile(ast.fix_missing_locations(module), fn.__code__.co_filename, "exec")
    elif module is not None:
        tree = ast.fix_missing_locations(gast.gast_to_ast(module))
        code = compile(tree, fn.__code__.co_filename, "exec")
    else:
        code = compile(source, fn.__code__.co_filename, "exec")
    namespace: dict[str, Any] = {}
    exec(code, fn.__globals__, namespace)  # defines the factory only, in `namespace`
    factory = namespace["_gpe_factory"]
    inner = next(c for c in factory.__code__.co_consts if isinstance(c, types.CodeType))
    if signature:  # tracebacks (and functions it defines) name the user's function
        inner = _renamed(inner, inner.co_qualname, fn.__qualname__).replace(
            co_name=fn.__name__)
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    closure = tuple(cells[name] if name in cells else types.CellType(runtime[name])
                    for name in inner.co_freevars)
    program = types.FunctionType(inner, fn.__globals__, fn.__name__, None, closure)
    if signature:  # the program takes the original arguments
        program.__defaults__ = fn.__defaults__
        program.__kwdefaults__ = fn.__kwdefaults__
        program.__qualname__ = fn.__qualname__
    return program


def _renamed(code: types.CodeType, old: str, new: str) -> types.CodeType:
    """`code` with qualified names under `old` (the generated program's) under `new`, its
    nested functions' too (`main.<locals>.step`, as the user's function names it)."""
    consts = tuple(_renamed(c, old, new) if isinstance(c, types.CodeType) else c
                   for c in code.co_consts)
    qualname = code.co_qualname
    if qualname == old or qualname.startswith(old + "."):
        qualname = new + qualname[len(old):]
    return code.replace(co_consts=consts, co_qualname=qualname)
