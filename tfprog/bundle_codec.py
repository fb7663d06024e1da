"""JSON forms of what a bundle's index holds: a `SlicePlan`, channel specs and layouts,
the line numbers of generated host code, a part's dispatch, a module's source hash; and
the synthetic arguments a declared signature stands for. What both the exporter and the
loader use lives here, so that loading a bundle imports none of the exporter (nor, through
it, the slicer).

Everything decodes to plain data (no pickle, no eval): a bad field raises `ValueError`
(or `KeyError`/`TypeError`), which the loader turns into a refusal.
"""
from __future__ import annotations

import ast
import hashlib
import sys
from typing import Any

import tensorflow as tf

from ..slicer.plan import Channel, ChannelKind, LineReport, Program, SlicePlan
from .channels import ValueSpec

_PLAN_TUPLES = ("sites", "bound", "assumptions", "captures", "nested")


def plan_to_json(plan: SlicePlan) -> dict:
    return {
        "name": plan.name, "qualname": plan.qualname, "filename": plan.filename,
        "lineno": plan.lineno, "host_source": plan.host_source,
        "channels": [[c.index, c.kind.name, list(c.names), c.lineno] for c in plan.channels],
        "routes": [[list(drains), cancel] for drains, cancel in plan.routes],
        "lines": [[r.lineno, r.place, r.reason, r.source, list(r.crossings)]
                  for r in plan.lines],
        "rescuable": plan.rescuable,
        "rescues": [list(r) for r in plan.rescues],
        "with_gates": [[k, list(names)] for k, names in plan.with_gates],
        **{name: list(getattr(plan, name)) for name in _PLAN_TUPLES},
    }


def plan_from_json(data: dict) -> SlicePlan:
    """The plan (without its TF and profile programs: a bundle has the TF part built)."""
    channels = tuple(Channel(int(i), ChannelKind[kind], tuple(map(str, names)), int(line))
                     for i, kind, names, line in data["channels"])
    if [c.index for c in channels] != list(range(len(channels))):
        raise ValueError("channel indices are not 0..n-1")
    routes = tuple((tuple(int(k) for k in drains), None if cancel is None else int(cancel))
                   for drains, cancel in data["routes"])
    lines = tuple(LineReport(int(a), str(b), str(c), str(d), tuple(map(str, e)))
                  for a, b, c, d, e in data["lines"])
    plan = SlicePlan(
        name=str(data["name"]), qualname=str(data["qualname"]),
        filename=str(data["filename"]), lineno=int(data["lineno"]),
        host=Program(text=str(data["host_source"])), tf=Program(text=""),
        profile=Program(text=""),
        channels=channels, routes=routes, lines=lines,
        sites=tuple(int(k) for k in data["sites"]),
        bound=tuple(map(str, data["bound"])),
        assumptions=tuple(map(str, data["assumptions"])),
        captures=tuple(map(str, data["captures"])),
        nested=tuple(int(k) for k in data["nested"]),
        rescuable=bool(data["rescuable"]),
        rescues=tuple((int(a), int(b)) for a, b in data["rescues"]),
        with_gates=tuple((int(k), tuple(map(str, n))) for k, n in data["with_gates"]))
    if any(not 0 <= k < len(channels) for k in plan.sites) or len(routes) != len(
            plan.sites) + 1:
        raise ValueError("sites or routes do not match the channels")
    return plan


def spec_to_json(spec: ValueSpec) -> list:
    return [spec.dtype.name, None if spec.shape is None else list(spec.shape), spec.python,
            None if spec.default_dtype is None else spec.default_dtype.name, spec.type_name]


def spec_from_json(data: list) -> ValueSpec:
    dtype, shape, python, default, type_name = data
    return ValueSpec(tf.as_dtype(dtype), None if shape is None else tuple(
        None if d is None else int(d) for d in shape), bool(python),
        None if default is None else tf.as_dtype(default), str(type_name))


def specs_to_json(specs: dict[int, list | None]) -> dict[str, Any]:
    return {str(k): None if v is None else [spec_to_json(s) for s in v]
            for k, v in specs.items()}


def specs_from_json(data: dict) -> dict[int, list | None]:
    return {int(k): None if v is None else [spec_from_json(s) for s in v]
            for k, v in data.items()}


def layout_to_json(layout: Any) -> Any:
    """A channels.flatten layout (None, or lists/tuples/dicts of layouts), tagged."""
    if layout is None:
        return None
    if type(layout) in (list, tuple):
        return {"t": type(layout).__name__, "v": [layout_to_json(x) for x in layout]}
    if type(layout) is dict:
        return {"t": "dict", "k": list(layout), "v": [layout_to_json(x)
                                                      for x in layout.values()]}
    raise ValueError(f"cannot store a layout of type {type(layout).__name__}")


def layout_from_json(data: Any) -> Any:
    if data is None:
        return None
    kind, values = data["t"], [layout_from_json(x) for x in data["v"]]
    if kind == "list":
        return values
    if kind == "tuple":
        return tuple(values)
    if kind == "dict":
        return dict(zip(data["k"], values, strict=True))
    raise ValueError(f"unknown layout kind {kind!r}")


def layouts_to_json(layouts: dict[int, list]) -> dict:
    return {str(k): [layout_to_json(x) for x in v] for k, v in layouts.items()}


def layouts_from_json(data: dict) -> dict[int, list]:
    return {int(k): [layout_from_json(x) for x in v] for k, v in data.items()}


def line_numbers(tree: ast.AST) -> list[list[int]]:
    """The (lineno, end_lineno) of each node of `tree` that has them, in walk order."""
    return [[node.lineno, node.end_lineno or node.lineno] for node in ast.walk(tree)
            if hasattr(node, "lineno")]


def with_line_numbers(source: str, numbers: list) -> ast.Module:
    """`source` parsed, its nodes given the user's line numbers recorded by line_numbers
    (ValueError when they do not fit the source)."""
    tree = ast.parse(source)
    nodes = [node for node in ast.walk(tree) if hasattr(node, "lineno")]
    if len(nodes) != len(numbers):
        raise ValueError("the host code's line numbers do not match it")
    for node, (start, end) in zip(nodes, numbers):
        node.lineno, node.end_lineno = int(start), int(end)
    return tree


def dispatch_to_json(dispatch: tuple) -> list:
    """A part's dispatch (tfprog.part.Part.dispatch) as a bundle's index holds it."""
    entry, dtypes = dispatch
    return [entry, [tf.as_dtype(d).name for d in dtypes]]


def module_hash(name: str) -> str:
    """SHA-256 of a module's source file ('' where it has none)."""
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    if not path:
        return ""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def synthetic(spec: tf.TensorSpec) -> tf.Tensor:
    """A tensor of the spec's dtype and shape (1 where any size is declared): only its
    type is used (the slicer and the key look at dtypes and shapes, not values)."""
    shape = [1 if d is None else d for d in spec.shape.as_list()]
    return tf.zeros(shape, spec.dtype)
