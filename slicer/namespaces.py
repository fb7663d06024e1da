"""What a callee reads from its own namespace, as paths the caller's call key can guard.

A callee judged TF work runs in the caller's TF part as its own FunctionDef, traced with
the values its globals and closure cells held then (`PARAMS["w"]`, `LAYERS[0]`,
`HOLDER.w`, a global number). The caller's call key must guard them as it guards its own
free names, but the callee's namespace is not the caller's (another module, a closure).

`free_reads(parsed, params)` lists the free names a callee's body reads and the attribute
chains on them the kinds pass marked (`Key.PATH`); `root(fn, name)` names one of them for
the caller: `module|qualname:name` (dots as `/`: a guard path splits at dots; a `:` no
Python name has), registered with the function whose namespace it is; `resolve(root)`
gives its value now (the callee's closure cell, global or builtin; a module-level function
not registered in this process, as a bundle's guard, is found by its names), or MISSING
once that function is gone. Nothing here imports TensorFlow.
"""
from __future__ import annotations

import builtins
import sys
import weakref
from typing import Any, Callable

import gast

from . import anno, scope
from .anno import Key
from .parser import MISSING, Parsed

_functions: dict[str, weakref.ref] = {}  # root prefix -> the function whose namespace it is
_prefixes: "weakref.WeakKeyDictionary[Callable, str]" = weakref.WeakKeyDictionary()


def is_root(name: str) -> bool:
    return ":" in name


def root(fn: Callable, name: str) -> str:
    """The caller's name for `name` in `fn`'s namespace (its closure, globals, builtins)."""
    prefix = _prefixes.get(fn)
    if prefix is None:
        module = (getattr(fn, "__module__", None) or "?").replace(".", "/")
        base = f"{module}|{fn.__qualname__.replace('.', '/')}"
        prefix, n = base, 1
        while prefix in _functions and _functions[prefix]() not in (None, fn):
            n += 1
            prefix = f"{base}#{n}"
        _functions[prefix] = weakref.ref(fn)
        _prefixes[fn] = prefix
    return f"{prefix}:{name}"


def resolve(root_name: str) -> Any:
    """The value a `root` names now (MISSING where its function is gone or the cell empty)."""
    prefix, _, name = root_name.rpartition(":")
    fn = _functions.get(prefix, lambda: None)() or _by_name(prefix)
    if fn is None:
        return MISSING
    code = fn.__code__
    if fn.__closure__ and name in code.co_freevars:
        try:
            return fn.__closure__[code.co_freevars.index(name)].cell_contents
        except ValueError:
            return MISSING
    if name in fn.__globals__:
        return fn.__globals__[name]
    return getattr(builtins, name, MISSING)


def _by_name(prefix: str) -> Callable | None:
    """The module-level function (or method) a prefix names, where no slicing in this
    process registered it (a bundle's guards, read in a fresh process)."""
    module, _, qualname = prefix.partition("|")
    obj = sys.modules.get(module.replace("/", "."))
    for part in qualname.split("/"):
        obj = getattr(obj, part, None)
    fn = getattr(obj, "__func__", obj)
    if not callable(fn) or not hasattr(fn, "__code__") or "#" in prefix:
        return None
    _functions[prefix], _prefixes[fn] = weakref.ref(fn), prefix
    return fn


def free_reads(parsed: Parsed, params: set[str]) -> tuple[tuple[str, bool], ...]:
    """(path as the caller names it, a Python number?) for each free name the callee reads
    (not a builtin) and each chain on one the kinds pass marked with a PATH; the paths its
    own callees read from their namespaces (CALLEE_READS with a root) come with them."""
    body = parsed.node
    names = [n for n in scope.walk(body) if isinstance(n, gast.Name)]
    stored = {n.id for n in names if not isinstance(n.ctx, gast.Load)} | set(params)
    stored |= {a.id for f in gast.walk(body) if isinstance(f, (gast.FunctionDef, gast.Lambda))
               for a in f.args.args if isinstance(a, gast.Name)}
    fn = parsed.fn
    found: dict[str, bool] = {}
    for node in names:
        if isinstance(node.ctx, gast.Load) and node.id not in stored and _namespaced(fn, node.id):
            found.setdefault(root(fn, node.id), _number(parsed.lookup(node.id)))
    folded = [n for test in anno.get(body, Key.FOLDED, ()) for n in gast.walk(test)]
    for node in list(gast.walk(body)) + folded:  # (and the tests hoist folded away)
        if isinstance(node, gast.Attribute) and anno.has(node, Key.PATH):
            path = anno.get(node, Key.PATH)
            first = path.split(".")[0]
            if first not in stored and _namespaced(fn, first):
                rest = path[len(first):]
                found[root(fn, first) + rest] = anno.get(node, Key.KIND) is not None and \
                    anno.get(node, Key.KIND).name == "PY_SCALAR"
        elif isinstance(node, gast.Call):  # (what a callee or layer called here reads)
            for path, number in anno.get(node, Key.CALLEE_READS, ()):
                first = path.split(".")[0]
                if is_root(first):
                    found.setdefault(path, number)
                elif first not in stored and _namespaced(fn, first):
                    found[root(fn, first) + path[len(first):]] = number  # `layer.rate`
    return tuple(sorted(found.items()))


def _namespaced(fn: Callable, name: str) -> bool:
    """A name of the function's closure or globals (a builtin is not guarded)."""
    return name in fn.__code__.co_freevars or name in fn.__globals__


def _number(value: Any) -> bool:
    return type(value) in (bool, int, float)
