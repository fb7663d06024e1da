"""Type facts the slicer works on, as plain data (the slicer never imports TensorFlow).

The caller (the host package) classifies the objects it sees into `Kind`s and describes
the arguments of the call being sliced as `ArgFact`s.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping


class Kind(enum.Enum):
    TENSOR = "a TF tensor value"
    VARIABLE = "a tf.Variable (captured by handle in the TF part)"
    TF_OBJECT = "a TF-side object such as a GradientTape (exists only in the TF part)"
    TF_MODULE = "the tensorflow module or one of its submodules"
    TF_OP = "a callable that builds TF ops and returns tensors"
    TF_EFFECT_OP = "a callable that builds a stateful TF op (tf.print, asserts)"
    TF_CONSTANT = ("tf.constant / tf.convert_to_tensor: a tensor from a Python value (the TF "
                   "part gets the value from the host already as a tensor)")
    TF_FACTORY = "a TF callable returning a TF-side object (tf.GradientTape)"
    PY_SCALAR = "a Python int, float or bool"
    HOST_FN = "a host callable known not to touch TF state (builtins, numpy, math)"
    HOST_DATA = "plain Python data (containers, strings, arrays): its methods do not touch TF"
    HOST = "any other host value or callable (calling it may touch TF state)"
    SLICED_FN = ("a function gpe slices too (decorated, or wrapped by gpe run): called from a "
                 "sliced function, its TF part runs inside the caller's")
    STRUCTURE = ("a tree of the user's data objects, described by its shape in the call key: "
                 "its numbers cross as values, the TF part gets a copy of it (a recursion "
                 "over it is unrolled for that shape: slicer/recursion.py)")
    HOST_ONLY = ("a host value seen not to fit a channel (a string, an arbitrary object): "
                 "TF work that reads it stays on the host")


TF_KINDS = frozenset({Kind.TENSOR, Kind.VARIABLE, Kind.TF_OBJECT})
"""Kinds of values that live in the TF part."""

CALLEE_ARG_KINDS = TF_KINDS | {Kind.PY_SCALAR, Kind.HOST_DATA}
"""Kinds of arguments a user function judged all TF work may get in the TF part (an array
is converted by the TF ops that use it; host arithmetic on one keeps the callee on the host)."""

TF_CALLABLES = frozenset({Kind.TF_OP, Kind.TF_EFFECT_OP, Kind.TF_FACTORY, Kind.TF_CONSTANT})
"""Kinds of callables whose calls run in the TF part."""

MATERIALIZE_METHODS = frozenset({"numpy", "tolist", "item", "__array__"})
"""Methods of a TF value that hand its contents to Python (host side)."""

VARIABLE_EFFECT_METHODS = frozenset({
    "assign", "assign_add", "assign_sub", "scatter_update", "scatter_add", "scatter_sub",
    "scatter_nd_update", "scatter_nd_add", "scatter_nd_sub", "scatter_max", "scatter_min",
})
"""Methods of a tf.Variable that write it."""

META_ATTRIBUTES = frozenset({"shape", "dtype", "ndim", "name", "device"})
"""Attributes of a TF value that are static metadata, readable on either side."""

STRUCTURAL_BUILTINS = frozenset({"zip", "list", "tuple", "enumerate", "reversed", "dict"})
"""Builtins that only rearrange Python containers: on TF values they run in the TF part."""

ORDERING_BUILTINS = frozenset({"enumerate", "zip", "reversed"})
"""Builtins that pair or order a sequence: over sequences fixed for the call, fixed too."""

STATIC_META = frozenset({"shape", "dtype", "ndim"})
"""A TF value's metadata a trace knows (the call key fixes a tensor argument's)."""

CONSTANT_BUILTINS = frozenset({"float", "int", "bool", "abs", "min", "max", "round", "len",
                               "range"})
"""Pure builtins: on values fixed for the call, their result is fixed for the call too."""

MATERIALIZE_BUILTINS = frozenset({"float", "int", "bool", "complex", "len", "str", "repr", "print"})
"""Builtins whose use on a TF value needs that value on the host."""


@dataclass(frozen=True)
class ArgFact:
    """What is known about one argument of the call being sliced.

    kind: its Kind; dtype: dtype name for tensors and arrays; shape: tuple of ints/None;
    python_type: the Python type name; constant: True when the value is folded into the
    TF part as a constant (and guarded), in which case `value` holds it.
    """

    kind: Kind
    dtype: str | None = None
    shape: tuple | None = None
    python_type: str = ""
    constant: bool = False
    value: Any = None
    # a list or tuple of tensors, or a tensor: its length (fixed for the call), where known
    length: int | None = None
    # an iterable of tensors (a tf.data.Dataset): how many tensors each element is, 0 for
    # a bare tensor (`for x in ds`), n for a tuple of n (`for x, y in ds`); else None
    elements: int | None = None
    # a dict of Python numbers (d2l's `hyperparams`): `d['lr']` is a number read at entry
    number_items: bool = False


@dataclass(frozen=True)
class Facts:
    """Everything the slicer is told. `classify` maps a namespace object to its Kind."""

    args: Mapping[str, ArgFact]
    classify: Callable[[Any], Kind]
    objects: Mapping[str, Any] = field(default_factory=dict)  # values of object arguments
    assumed: str = ""  # human-readable note of what was assumed (for explain)
    host_only: frozenset = frozenset()  # names whose values a profile call saw cannot cross
    # attribute chains holding Python numbers that keep changing: sent, not folded
    dynamic_paths: frozenset = frozenset()
    entry_always: bool = False  # an entry channel even with nothing to send (random seeds)
    # names host work rebinds (`n += 1` in a loop the host drives, its counter) that a TF
    # statement reads: the host sends their values, so not fixed for the call once
    # rebound (slicer/pipeline.py)
    host_numbers: frozenset = frozenset()
    # what iterating an object (`for X, Y in train_iter`, a user's data loader) gives, by
    # the iterable's dotted path: tensors, so many per element (0 a bare tensor, n a tuple
    # of n; -1 any of those: a user's iterable argument, speculated before a profile call
    # saw it). JANUS speculation: the profile calls must see tensors, each element is
    # checked where the host sends it, one that does not fit is handed back to the host
    # (host/variants/builder.py)
    iterables: Mapping[str, int] = field(default_factory=dict)
    # why calling an object is host work, where the caller knows (a user's layer whose
    # `call` has host statements): named in explain and in fallback reasons
    why_host: Callable[[Any], str | None] | None = None
    # the attributes of its object a TF method reads when the TF part is traced (a Keras
    # model's compiled loss for `model.compute_loss(...)`): captured and guarded as paths
    reads: Callable[[Any], tuple] | None = None
