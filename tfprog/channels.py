"""Channels: one FIFO queue per crossing, and what flows through each.

A `ValueSpec` describes one value crossing host->TF or TF->host (dtype, shape, and whether
it was a Python/NumPy value, which the TF part converts the way an eager op would).
`make_queue(specs)` creates the queue for one channel.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tensorflow as tf
from tensorflow.python.framework.ops import EagerTensor
from tensorflow.python.types.distribute import DistributedValues as _DistributedValues

# Python values take these dtypes on the wire; the TF part converts them on use.
_PY_WIRE = {bool: tf.bool, int: tf.int64, float: tf.float64, complex: tf.complex128}
# ...and, when an op asks for no dtype, the one TF gives a Python value.
_PY_DEFAULT = {bool: tf.bool, int: tf.int32, float: tf.float32, complex: tf.complex128}

HOST_TO_TF_CAPACITY = 64  # bounds how far the host runs ahead of the graph


@dataclass(frozen=True)
class ValueSpec:
    dtype: tf.DType
    shape: tuple | None         # None: unknown rank
    python: bool = False        # a Python or NumPy value (converted like eager would)
    default_dtype: tf.DType | None = None  # dtype when an op asks for none (Python values)
    type_name: str = ""
    # the dimensions every value sent is sure to have, where its source says so (a steady
    # dataset's element_spec: host/variants/steady.py): `any_size` keeps them
    given: tuple | None = None

    def describe(self) -> str:
        shape = "?" if self.shape is None else "(" + ", ".join(
            "?" if d is None else str(d) for d in self.shape) + ")"
        what = self.type_name or "tensor"
        return f"{what} {self.dtype.name}{shape}"


class Unsendable(TypeError):
    """A value that cannot cross between the parts (e.g. a list or an arbitrary object).
    `names`: the names of the values, where known."""

    def __init__(self, message: str, names: tuple[str, ...] = ()):
        super().__init__(message)
        self.names = names


def spec_of(value) -> ValueSpec:
    """The spec of a host value about to cross host->TF."""
    if isinstance(value, (tf.Tensor, tf.Variable)) or hasattr(value, "_gpe_pending"):
        return ValueSpec(tf.as_dtype(value.dtype), tuple(value.shape))
    for py_type, wire in _PY_WIRE.items():
        if type(value) is py_type:
            return python_spec(py_type)
    if isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind in "biufc":
        dtype = tf.as_dtype(value.dtype)
        # "numpy.": NumPy 2 names np.bool_ "bool", the label of a Python bool, which comes
        # back from the TF part a Python bool (host/runtime/channel.py); a NumPy value must not
        return ValueSpec(dtype, tuple(np.shape(value)), True, dtype,
                         "numpy." + type(value).__name__)
    raise Unsendable(f"a {type(value).__name__} value cannot cross into the TF part")


# TF -> host: a None the TF part computed (a callee that returns nothing, `s = bump(v)`):
# a placeholder bool crosses, the host gets None back (host/runtime/channel.py)
NONE_SPEC = ValueSpec(tf.bool, (), True, tf.bool, "NoneType")


def python_spec(py_type: type) -> ValueSpec:
    """The spec of a Python bool, int or float sent by the host."""
    return ValueSpec(_PY_WIRE[py_type], (), True, _PY_DEFAULT[py_type], py_type.__name__)


@dataclass(frozen=True)
class Distributed:
    """The layout of a per-replica value (tf.distribute's PerReplica): it crosses as its
    per-replica components, one per replica, and is rebuilt from its TypeSpec on the other
    side. `devices`: the replicas' devices (host->TF, part of the guard: the same strategy's
    replicas, in the same number)."""

    spec: object  # a PerReplicaSpec: the components' specs, hence the number of replicas
    devices: tuple = ()

    @property
    def width(self) -> int:
        return len(tf.nest.flatten(self.spec, expand_composites=True))


def is_per_replica(value) -> bool:
    """A tf.distribute value that is a composite of one tensor per replica (PerReplica).
    Mirrored values and distributed variables are not (see host.signature)."""
    return isinstance(value, _DistributedValues) and isinstance(
        value, tf.__internal__.CompositeTensor) and not isinstance(value, tf.Variable)


def _distributed(value) -> tuple["Distributed", list]:
    devices = tuple(getattr(v, "device", "") for v in value.values)
    if not tf.executing_eagerly() or tf.inside_function():
        devices = ()  # graph values: rebuilt on the host wherever the queue puts them
    return (Distributed(value._type_spec, devices),
            tf.nest.flatten(value, expand_composites=True))


MAX_NODES = 256  # larger object structures are not described (nor sent) by structure
_LEAVES = (int, float)           # numbers: sent as values (bools are constants)
_CONSTANTS = (bool, str, type(None))
_LIBRARIES = ("builtins", "tensorflow", "keras", "numpy")


@dataclass(frozen=True)
class Structure:
    """The layout of a Python data object that holds other data objects (a tree of `Node`s
    and `Leaf`s): its class and, per attribute, a nested Structure, a constant (a bool,
    string or None: part of the layout) or a number (None: it crosses as a value). The TF
    part gets a copy of the object built from the numbers it received (its classes are the
    same: `isinstance` answers as on the host; its numbers are TF values)."""

    cls: type
    fields: tuple  # ((name, Structure | Constant | None), ...)

    @property
    def width(self) -> int:
        return sum(1 if f is None else f.width if isinstance(f, Structure) else 0
                   for _, f in self.fields)

    def nodes(self) -> int:
        return 1 + sum(f.nodes() for _, f in self.fields if isinstance(f, Structure))

    def describe(self) -> str:
        inner = ", ".join(f.describe() for _, f in self.fields if isinstance(f, Structure))
        return f"{self.cls.__qualname__}({inner})" if inner else self.cls.__qualname__


@dataclass(frozen=True)
class Constant:
    """A bool, string or None held by a data object: part of its Structure."""

    value: object


def structure_of(value) -> tuple[Structure | None, list]:
    """(its Structure, its numbers in order) for a data object that holds another one (see
    Structure), else (None, [])."""
    if not _data_object(value):
        return None, []
    leaves: list = []
    count = [0]
    try:
        layout = _structure(value, leaves, count, set())
    except _NotData:
        return None, []
    if not any(isinstance(f, Structure) for _, f in layout.fields):
        return None, []
    return layout, leaves


class _NotData(Exception):
    pass


def _data_object(value) -> bool:
    cls = type(value)
    module = (getattr(cls, "__module__", None) or "").split(".", 1)[0]
    return (module not in _LIBRARIES and not isinstance(value, type) and
            not hasattr(cls, "__slots__") and not callable(value) and
            type(getattr(value, "__dict__", None)) is dict)


def _structure(value, leaves: list, count: list, seen: set) -> Structure:
    count[0] += 1
    if count[0] > MAX_NODES or id(value) in seen:
        raise _NotData  # too large, or shared / cyclic (a copy would not be the same)
    seen.add(id(value))
    fields = []
    if len(vars(value)) > MAX_NODES:
        raise _NotData
    for name, field in vars(value).items():
        if type(field) in _CONSTANTS:
            fields.append((name, Constant(field)))
        elif type(field) in _LEAVES:
            fields.append((name, None))
            leaves.append(field)
        elif _data_object(field):
            fields.append((name, _structure(field, leaves, count, seen)))
        else:
            raise _NotData
    return Structure(type(value), tuple(fields))


def _skeleton(layout: Structure, leaves: list, start: int = 0):
    """A copy of the data object `layout` describes, holding `leaves` for its numbers."""
    obj = object.__new__(layout.cls)
    i = start
    for name, field in layout.fields:
        if field is None:
            obj.__dict__[name] = leaves[i]
            i += 1
        elif isinstance(field, Constant):
            obj.__dict__[name] = field.value
        else:
            obj.__dict__[name] = _skeleton(field, leaves, i)
            i += field.width
    return obj


def flatten(value) -> tuple[object, list]:
    """A crossing value as (layout, leaves): lists, tuples and dicts of tensors and numbers
    cross leaf by leaf and are rebuilt on the other side; layout None means one leaf, a
    `Distributed` a per-replica value (its components cross). A list or tuple subclass (a
    namedtuple, Keras' TrackedList) is rebuilt as its own type (tf.nest keeps it)."""
    if type(value) is dict or isinstance(value, (list, tuple)):
        leaves = tf.nest.flatten(value)
        if not any(is_per_replica(leaf) for leaf in leaves):
            return tf.nest.map_structure(lambda _: None, value), leaves
        pairs = [_distributed(leaf) if is_per_replica(leaf) else (None, [leaf])
                 for leaf in leaves]
        return (tf.nest.pack_sequence_as(value, [layout for layout, _ in pairs]),
                [c for _, flat in pairs for c in flat])
    if is_per_replica(value):
        return _distributed(value)
    layout, leaves = structure_of(value)
    if layout is not None:
        return layout, leaves
    return None, [value]


def width(layout) -> int:
    """How many leaves cross for a value of this layout."""
    if layout is None:
        return 1
    if isinstance(layout, (Distributed, Structure)):
        return layout.width
    return sum(width(leaf) for leaf in tf.nest.flatten(layout))


def _rebuild(layout, leaves: list):
    if isinstance(layout, Distributed):
        return tf.nest.pack_sequence_as(layout.spec, leaves, expand_composites=True)
    if isinstance(layout, Structure):
        return _skeleton(layout, leaves)
    if not any(isinstance(leaf, Distributed) for leaf in tf.nest.flatten(layout)):
        return tf.nest.pack_sequence_as(layout, leaves)
    parts, i = [], 0
    for leaf in tf.nest.flatten(layout):
        n = width(leaf)
        parts.append(leaves[i] if leaf is None else _rebuild(leaf, leaves[i:i + n]))
        i += n
    return tf.nest.pack_sequence_as(layout, parts)


def unflatten(layouts: list, leaves: list) -> list:
    """The values `flatten` took apart, one per layout."""
    out, i = [], 0
    for layout in layouts:
        if layout is None:
            out.append(leaves[i])
            i += 1
        else:
            n = width(layout)
            out.append(_rebuild(layout, leaves[i:i + n]))
            i += n
    return out


def matches(spec: ValueSpec, value) -> bool:
    """Whether `value` can be sent on a channel built for `spec` (the call's guard).
    An eager tensor (every call's common case) is checked on its dtype enum and shape
    tuple, without building its spec."""
    if type(value) is EagerTensor:
        if spec.python or value._datatype_enum() != spec.dtype._type_enum:  # noqa: SLF001
            return False
        if spec.shape is None:
            return True
        shape = value._shape_tuple()  # noqa: SLF001
        return len(shape) == len(spec.shape) and all(
            a is None or a == b for a, b in zip(spec.shape, shape))
    try:
        other = spec_of(value)
    except Unsendable:
        return False
    return other.dtype == spec.dtype and other.python == spec.python and (
        spec.shape is None or (len(other.shape) == len(spec.shape) and all(
            a is None or a == b for a, b in zip(spec.shape, other.shape))))


def make_queue(dtypes: list[tf.DType], to_tf: bool) -> tf.queue.FIFOQueue:
    capacity = HOST_TO_TF_CAPACITY if to_tf else -1
    return tf.queue.FIFOQueue(capacity, dtypes)


def relaxed(spec: ValueSpec, keep_rank: bool = False) -> ValueSpec:
    """A spec for a value computed mid-call, whose shape may vary: unknown shape, or with
    `keep_rank` its rank and last (feature) dimension, which Keras layers and losses need
    when traced (a value of another rank or width later does not fit: the call then
    finishes eagerly)."""
    shape = spec.shape
    if shape and keep_rank:
        shape = (None,) * (len(shape) - 1) + (shape[-1],)
    elif shape:
        shape = None
    return ValueSpec(spec.dtype, shape, spec.python, spec.default_dtype, spec.type_name)


def any_size(spec: ValueSpec) -> ValueSpec:
    """`spec` with every dimension any size, its rank kept where known, but the dimensions
    its source guarantees (`given`): traced without them, library code can take another
    path than eagerly (Keras' convolution compiles the op with XLA where it does not know
    the input's channels, and XLA's results differ from the TF kernels eager runs)."""
    if spec.shape is None:
        return spec
    given = spec.given if spec.given is not None and len(spec.given) == len(spec.shape) \
        else (None,) * len(spec.shape)
    return ValueSpec(spec.dtype, given, spec.python, spec.default_dtype, spec.type_name)


def read_variable(var) -> tf.Tensor:
    """A variable's value read now (`v.numpy()`, `float(v)` in a sliced function read it in
    the TF part, in program order, then cross): a tf.Variable's read_value(); a Keras 3
    variable (`opt.iterations`, `keras.Variable`) has none: its tf.Variable is `.value`."""
    inner = var if isinstance(var, tf.Variable) else getattr(var, "value", var)
    return inner.read_value()
