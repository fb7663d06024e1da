"""Names and attribute chains of a function, for the kinds pass (slicer/kinds.py).

Pure helpers on gast trees and the objects a chain reaches when slicing: the root Name of
`self.model.w`, the object it refers to, its dotted text, the names a function binds or
rebinds, the objects it may mutate. Needs no annotations.
"""
from __future__ import annotations

import inspect
from typing import Any

import gast

from . import nodes
from .facts import TF_CALLABLES, Kind
from .parser import MISSING, Parsed

CAPTURABLE = frozenset({Kind.VARIABLE, Kind.TENSOR, Kind.TF_OBJECT, Kind.TF_OP,
                        Kind.TF_EFFECT_OP})
"""Kinds of objects the TF part captures from an attribute chain."""


def static_value(node: gast.AST, parsed: Parsed) -> Any:
    """The object a Name or dotted Attribute chain refers to in the namespace, or MISSING."""
    if isinstance(node, gast.Name):
        return parsed.lookup(node.id)
    if isinstance(node, gast.Attribute):
        base = static_value(node.value, parsed)
        if base is MISSING:
            return MISSING
        return getattr(base, node.attr, MISSING)
    return MISSING


def user_code(fn: Any) -> bool:
    """A plain function of the user's (not TensorFlow's or Keras's own code)."""
    module = (getattr(fn, "__module__", None) or "").split(".", 1)[0]
    return inspect.isfunction(fn) and module not in ("keras", "tensorflow", "tf_keras")


def is_range(node: gast.AST) -> bool:
    return (isinstance(node, gast.Call) and isinstance(node.func, gast.Name)
            and node.func.id == "range")


def stable(value: Any) -> bool:
    """An object kept as an attribute (a variable, a layer), not one made on each access
    (a bound method, a property's fresh list): only those are guarded by identity."""
    return not (inspect.ismethod(value) or isinstance(value, (list, tuple)))


def mutated_roots(fn: gast.FunctionDef, objects, classify) -> set[str]:
    """Names whose objects this function may change: an attribute or item of theirs is
    assigned, one of their methods (or a method of an attribute) that is not TF's is
    called, or they are passed to a call."""
    roots = set()
    for node in nodes.walk(fn):
        if isinstance(node, (gast.Attribute, gast.Subscript)) and isinstance(
                node.ctx, (gast.Store, gast.Del)):
            root = chain_root(node.value if isinstance(node, gast.Subscript) else node)
            if root is not None:
                roots.add(root.id)
        elif isinstance(node, gast.Call):
            root = chain_root(node.func) if isinstance(node.func, gast.Attribute) else None
            if root is not None:
                value = chain_value(node.func, objects[root.id]) if root.id in objects \
                    else MISSING
                if value is MISSING or classify(value) not in TF_CALLABLES | CAPTURABLE:
                    roots.add(root.id)  # self.update(), self.history.append(...)
            for arg in node.args + [k.value for k in node.keywords]:
                if isinstance(arg, gast.Name):
                    roots.add(arg.id)
    return roots


def chain_root(node: gast.AST) -> gast.Name | None:
    while isinstance(node, gast.Attribute):
        node = node.value
    return node if isinstance(node, gast.Name) else None


def chain_value(node: gast.AST, root_value: Any) -> Any:
    if isinstance(node, gast.Name):
        return root_value
    base = chain_value(node.value, root_value)
    return MISSING if base is MISSING else getattr(base, node.attr, MISSING)


def own_data(node: gast.Attribute, root_value: Any) -> bool:
    """Whether `node` names a data attribute of its object (`self.steps`, a list the user
    keeps on a tf.Module: Python data, changed on the host), not one its class computes
    (`model.trainable_variables`, `model.layers`: TF objects even while still empty)."""
    owner = chain_value(node.value, root_value)
    return node.attr in getattr(owner, "__dict__", {})


def dotted(node: gast.AST) -> str:
    if isinstance(node, gast.Name):
        return node.id
    return f"{dotted(node.value)}.{node.attr}"


def stored_names(fn: gast.FunctionDef) -> set[str]:
    return {n.id for n in nodes.walk(fn) if isinstance(n, gast.Name)
            and isinstance(n.ctx, (gast.Store, gast.Del))}


def bound_names(fn: gast.FunctionDef) -> set[str]:
    names = {a.id for a in fn.args.args + fn.args.kwonlyargs}
    for extra in (fn.args.vararg, fn.args.kwarg):
        if extra is not None:
            names.add(extra.id)
    for node in nodes.walk(fn):
        if isinstance(node, gast.Name) and isinstance(node.ctx, gast.Store):
            names.add(node.id)
    return names


def is_static(node: gast.AST, inferer: Any) -> bool:
    """A Name/Attribute chain rooted at a free (global/closure) name, not a local."""
    while isinstance(node, gast.Attribute):
        node = node.value
    return isinstance(node, gast.Name) and node.id not in inferer.env and (
        node.id not in inferer.local_names)
