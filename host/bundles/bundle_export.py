"""Slice one function ahead of time, for its declared argument types, into a bundle entry.

`export(sliced, signature)` slices and builds the function as a call with arguments of
those types would (host/variants/builder.py), without calling it: the profile that would give the
types of values crossing mid-call is not run, so a function with such a crossing (a
Python value the host computes and sends to the TF part) is skipped (`Skipped`, with why).
What the TF part captured is bound by name: each captured variable or tensor must be a
global of the function's module (or of a module a function it reads lives in), or a
variable of a `tf.Module`/Keras object held there (by its position in `.variables`).
The entry's source hash covers the files of every module it binds a name in.
"""
from __future__ import annotations

import ast
import inspect
import sys
from dataclasses import dataclass
from typing import Any, Callable

import gast
import tensorflow as tf

from ..facts import signature as signatures
from ..variants.builder import NotBuilt
from ..speculation.speculation import FOLDABLE
from ...slicer import Refusal
from ...slicer.plan import ChannelKind
from ...tfprog import bundle_codec as codec, sink
from ...tfprog.bundle_codec import dispatch_to_json, module_hash, synthetic
from ...tfprog.bundle import callees


class Skipped(Exception):
    """A function not put in the bundle, with why."""


@dataclass
class Exported:
    entry: dict       # the index entry (without "host", set when written)
    host_source: str
    fdefs: list       # the FunctionDefs (its own last), not renamed yet


def declared_signature(fn: Callable) -> list | None:
    """The TensorSpecs declared for `fn`'s arguments: `@gpe.function(input_signature=...)`,
    else a `tf.TensorSpec` annotation on every parameter; None when not declared."""
    declared = getattr(fn, "input_signature", None)
    if declared is not None:
        return list(declared)
    target = getattr(fn, "fn", fn)
    try:
        hints = inspect.get_annotations(target, eval_str=True)
        params = inspect.signature(target).parameters
    except Exception:  # an annotation that does not evaluate: not declared
        return None
    specs = [hints.get(name) for name in params]
    if specs and all(isinstance(s, tf.TensorSpec) for s in specs):
        return specs
    return None


def arguments(sliced, specs: list, instance: Any = None) -> dict[str, Any]:
    """Synthetic arguments by parameter name; dimensions declared None are relaxed (any
    size takes the variant). For a method, `instance` is its `self` (the declared types
    are those of the other parameters)."""
    params = list(sliced.keys.signature.parameters.values())
    values: dict[str, Any] = {}
    if instance is not None:
        values[params.pop(0).name] = instance
    if len(params) != len(specs) or any(p.kind != p.POSITIONAL_OR_KEYWORD for p in params):
        raise Skipped(f"{len(specs)} declared types for {len(params)} parameters (each "
                      "parameter needs one, and no *args/**kwargs)")
    if any(not isinstance(s, tf.TensorSpec) or s.shape.rank is None for s in specs):
        raise Skipped("every declared type must be a tf.TensorSpec of known rank")
    for param, spec in zip(params, specs):
        mask = tuple(d is None for d in spec.shape.as_list())
        if any(mask):
            sliced.assumed.relaxed[param.name] = mask
        values[param.name] = synthetic(spec)
    return values


def export(sliced, specs: list, instance: Any = None) -> Exported:
    """Slice and build `sliced` (a SlicedFunction) for arguments of types `specs`; a
    method for its `self` = `instance` (whose variables it binds as `self-variable`s:
    at load, those of the object it is called on)."""
    values = arguments(sliced, specs, instance)
    try:
        plan = sliced.builder.plan(values)
    except (Refusal, NotBuilt) as exc:
        raise Skipped(f"not sliced: {exc}") from None
    if not any(line.place == "TF" for line in plan.lines):
        raise Skipped("no TF work (plain Python)")
    entry = next((c for c in plan.channels if c.kind == ChannelKind.ENTRY), None)
    runs: list[dict] = [{}]
    if entry is not None:
        runs = [{entry.index: [_entry_value(sliced, n, values) for n in entry.names]}]
    try:
        variant = sliced.builder.build(plan, values, runs, None, adaptive=False,
                                       speculate=False)
    except NotBuilt as exc:
        if exc.keep_runs:  # NotObserved: "no profile call reached the crossing at line N"
            where = str(exc).rsplit(" at ", 1)[-1]
            raise Skipped(f"a value the host computes crosses into the TF part at {where}: "
                          "its type is known only from a call") from None
        raise Skipped(f"not built: {exc}") from None
    if plan.nested:
        raise Skipped("calls another gpe function from host code (nested parts are not "
                      "bundled)")
    if plan.tests:  # the index has no place for a callee's speculated branch tests
        raise Skipped("a callee branches on a number the host sends (not bundled)")
    return _entry(sliced, plan, variant, specs, values, instance)


def _entry_value(sliced, name: str, values: dict) -> Any:
    """A value sent when the call starts: an argument, or a global Python number (sent
    each call: with one run nothing is folded, so its value at the call is the one used)."""
    if name in values:
        return values[name]
    value = sliced.keys.lookup(name) if name.isidentifier() else None
    if type(value) in FOLDABLE:
        return value
    raise Skipped(f"a value computed by host code ({name}) crosses when the call starts: "
                  "its type is known only from a call")


def _entry(sliced, plan, variant, specs, values, instance=None) -> Exported:
    if variant.part.seeds:  # drawn by the host at each call: not in a bundle's index
        raise Skipped("it runs legacy random ops (tf.random.normal, ...) with eager's seeds")
    concrete = variant.part.function
    fn = sliced.fn
    modules = _modules(fn, plan, values, sliced.keys.lookup)
    captured = [_binding(t, modules, instance) for t in concrete.captured_inputs]
    guards = [_guard(path, signatures.resolve(path, values, sliced.keys.lookup))
              for path in plan.captures]
    params = list(values)[1:] if instance is not None else list(values)
    used = sorted({b["module"] for b in captured if "module" in b} | {g["module"] for g in guards
                                                     if g.get("module")} | {fn.__module__})
    library = list(concrete.graph.as_graph_def().library.function)
    own = concrete.function_def
    # what the session's sink calls (see tfprog.sink): its handles, its dispatch queue's
    # and relay queue's first
    count = 1 + (variant.part.dispatch[0] is not None) + len(own.signature.input_arg) - \
        len(concrete.captured_inputs)
    wrapper = sink.wrapper(concrete, count, variant.part.dispatch)
    names = {f.signature.name for f in library}
    host = _host_source(plan)
    entry = {
        "module": fn.__module__, "qualname": fn.__qualname__,
        "signature": [{"name": n, "dtype": s.dtype.name, "shape": s.shape.as_list()}
                      for n, s in zip(params, specs)],
        "function": own.signature.name,
        "callees": sorted(n for n in _transitive(own, library) if n in names),
        "captured": captured, "guards": guards,
        "sources": {m: module_hash(m) for m in used},
        "plan": codec.plan_to_json(plan),
        "part": {"specs": codec.specs_to_json(variant.part.specs),
                 "layouts": codec.layouts_to_json(variant.part.layouts),
                 "waits": sorted(variant.part.waits), "uid": variant.part.uid},
        "host_lines": host[1],
    }
    if instance is not None:
        entry["method"] = {"class": type(instance).__qualname__, "self": list(values)[0]}
    if wrapper.captured_inputs:  # it holds a tensor of its own: traced at load
        return Exported(entry, host[0], library + [own])
    entry["wrapper"] = {"function": wrapper.function_def.signature.name, "handles": count,
                        "dispatch": dispatch_to_json(variant.part.dispatch)}
    # the wrapper's own callees (its dispatch's cond branches: tfprog.sink.dispatched)
    extra = [f for f in wrapper.graph.as_graph_def().library.function
             if f.signature.name not in names and f.signature.name != own.signature.name]
    return Exported(entry, host[0], library + extra + [wrapper.function_def, own])


def _transitive(own, library) -> set[str]:
    by_name = {f.signature.name: f for f in library}
    seen, todo = set(), list(callees(own))
    while todo:
        name = todo.pop()
        if name in by_name and name not in seen:
            seen.add(name)
            todo += callees(by_name[name])
    return seen


def _host_source(plan) -> tuple[str, list | None]:
    """The host code and the user's line numbers of its nodes (None where the source does
    not parse back to the tree the plan holds)."""
    source = plan.host_source
    if plan.host_tree is None:
        return source, None
    tree = ast.fix_missing_locations(gast.gast_to_ast(plan.host_tree))
    numbers = codec.line_numbers(tree)
    try:
        again = codec.with_line_numbers(source, numbers)
    except (ValueError, SyntaxError):
        return source, None
    if ast.dump(again) != ast.dump(tree):
        return source, None
    return source, numbers


def _modules(fn, plan, values, lookup) -> list[str]:
    """Modules whose globals may hold what the TF part captured: the function's own, and
    those of the functions it reads (its callees)."""
    out = [fn.__module__]
    for path in plan.captures:
        obj = signatures.resolve(path, values, lookup)
        target = getattr(obj, "fn", obj)
        module = getattr(target, "__module__", None) if callable(target) else None
        if module and module not in out and _is_user_module(module):
            out.append(module)
    return out


def _is_user_module(name: str) -> bool:
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None) or ""
    return bool(path) and "site-packages" not in path and "/lib/python" not in path


def _binding(tensor, modules: list[str], instance: Any = None) -> dict:
    """Where a captured tensor is found by name: a variable of a method's `self` (by its
    position in `self.variables`, with its name), a variable's handle or a tensor."""
    if instance is not None:
        found = _match(tensor, instance)
        if found is not None and found["kind"] == "module-variable":
            var = list(instance.variables)[found["index"]]
            return dict(found, kind="self-variable", name=var.name)
    for module in modules:
        for name, obj in vars(sys.modules[module]).items():
            found = _match(tensor, obj)
            if found is not None:
                return dict(found, module=module, path=name)
    raise Skipped(f"the TF part captures a {tensor.dtype.name} tensor not held by a "
                  f"global of {', '.join(modules)} (a bundle binds captures by name)")


def _match(tensor, obj) -> dict | None:
    if isinstance(obj, tf.Variable) and obj.handle is tensor:
        return {"kind": "variable", "dtype": obj.dtype.name, "shape": obj.shape.as_list()}
    if isinstance(obj, tf.Tensor) and obj is tensor:
        return {"kind": "tensor", "dtype": obj.dtype.name, "shape": obj.shape.as_list()}
    if isinstance(obj, tf.Module) or hasattr(obj, "variables") and hasattr(obj, "weights"):
        try:
            variables = list(obj.variables)
        except Exception:
            return None
        for i, var in enumerate(variables):
            if isinstance(var, tf.Variable) and var.handle is tensor:
                return {"kind": "module-variable", "index": i, "dtype": var.dtype.name,
                        "shape": var.shape.as_list(), "count": len(variables)}
    return None


def _guard(path: str, obj: Any) -> dict:
    """What the call key checks of a captured name: a Python number's value (the TF part
    holds it as a constant), else the object's type (its identity is taken at load)."""
    if type(obj) in FOLDABLE:
        return {"path": path, "kind": "number", "type": type(obj).__name__, "value": obj}
    kind = type(obj)
    entry = {"path": path, "kind": "object", "type": f"{kind.__module__}.{kind.__qualname__}"}
    target = getattr(obj, "fn", obj)
    if callable(target) and _is_user_module(getattr(target, "__module__", "") or ""):
        entry["module"] = target.__module__
    return entry
