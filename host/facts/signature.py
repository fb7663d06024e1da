"""Call signatures: the host-side guard on arguments, and the facts the slicer is given.

`describe(value)` gives one argument's entry in the cache key: dtype and shape for
tensors and arrays, the value itself for Python ints/bools/strings/None (folded into the
TF part as constants), the identity of a tf.Variable. `facts_for(key, names)` turns a key
into the slicer's `Facts`.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.framework.ops import EagerTensor

from . import oracle
from ...slicer.facts import ArgFact, Facts, Kind
from ...tfprog.channels import is_per_replica, structure_of
from tensorflow.python.types.distribute import DistributedValues as _DistributedValues

try:  # a Keras 3 variable (layers' and optimizers' variables) holds a tf.Variable, is none
    from keras import Variable as _KerasVariable
except ImportError:  # pragma: no cover - keras comes with tensorflow
    _KerasVariable = tf.Variable
_VARIABLES = (tf.Variable, _KerasVariable)

_FOLDED = (bool, int, str, type(None))
MAX_DESCRIBED = 32  # longer tuples, lists and dicts are described by their type only


def describe(value: Any, dynamic: bool = False, relaxed: tuple | None = None) -> tuple:
    """One argument's part of the cache key. `dynamic`: send ints instead of folding them;
    `relaxed`: for a tensor, the dimensions described as None (any size).

    On every call's path: an eager tensor is recognised by its exact type first (a
    `hasattr` on one goes through Tensor.__getattr__'s slow miss, and `.shape` builds a
    TensorShape)."""
    cls = type(value)
    if cls is EagerTensor:
        shape = value._shape_tuple()  # noqa: SLF001 (the tuple `.shape` is built from)
        if relaxed is not None and len(relaxed) == len(shape):
            shape = tuple(None if r else d for d, r in zip(shape, relaxed))
        enum = value._datatype_enum()  # noqa: SLF001
        return ("tensor", _DTYPE_NAMES.get(enum) or _dtype_name(enum), shape)
    if cls in _FOLDED and not (dynamic and cls is int):
        return ("constant", cls.__name__, value)
    if isinstance(value, _VARIABLES):  # (a Keras variable too: by type alone, a variant
        return ("variable", id(value))  # built on one read it for another)
    if isinstance(value, _DistributedValues):  # PerReplica, Mirrored (never baked in)
        return _distributed(value)
    if getattr(cls, "_gpe_pending", False) or isinstance(value, tf.Tensor):
        shape = tuple(value.shape)
        if relaxed is not None and len(relaxed) == len(shape):
            shape = tuple(None if r else d for d, r in zip(shape, relaxed))
        return ("tensor", value.dtype.name, shape)
    if type(value) in (float, int, complex):
        return ("python", type(value).__name__)
    if isinstance(value, (np.ndarray, np.generic)):
        return ("array", value.dtype.str, np.shape(value))
    if isinstance(value, _COMPOSITE):
        return ("composite", type(value).__qualname__, _spec(value))
    layout, _ = structure_of(value)
    if layout is not None:  # a tree of the user's data objects: described by its shape
        return ("structure", type(value).__qualname__, layout)
    if isinstance(value, (tuple, list)) and len(value) <= MAX_DESCRIBED and any(
            _holds_tensor(v) for v in value):
        # (a subclass too: Keras' TrackedList, a namedtuple; it crosses as its elements and
        # is rebuilt as its own type, tfprog/channels.flatten; as an object it was captured
        # whole, its first tensors frozen into the TF part)
        return ("sequence", type(value).__qualname__, tuple(describe(v) for v in value))
    if type(value) in (tuple, list):  # plain data (a log, a list of names): its type only
        return ("data", type(value).__name__)
    if type(value) is dict and len(value) <= MAX_DESCRIBED and all(
            type(k) is str for k in value):
        return ("mapping", tuple((k, describe(v, dynamic)) for k, v in value.items()))
    return ("object", type(value).__qualname__, id(type(value)))


_COMPOSITE = (tf.__internal__.CompositeTensor, tf.IndexedSlices)
_DTYPE_NAMES: dict[int, str] = {}


def _dtype_name(enum: int) -> str:
    """A dtype's name from its enum (`tensor.dtype.name` goes through two properties)."""
    name = _DTYPE_NAMES.get(enum)
    if name is None:
        name = _DTYPE_NAMES[enum] = tf.dtypes.as_dtype(enum).name
    return name


def _distributed(value: Any) -> tuple:
    """A tf.distribute value: its type, the replicas' devices (hence their number and which
    strategy's they are) and, for a per-replica value, its TypeSpec (each component's dtype
    and shape). A per-replica value crosses as its components; any other (a Mirrored value
    that is not a variable) is read on the host, each call."""
    devices = tuple(getattr(v, "device", "") for v in value.values)
    spec = value._type_spec if is_per_replica(value) else None
    return ("distributed", type(value).__qualname__, devices, spec)


def _spec(value: Any) -> Any:
    """A composite tensor's TypeSpec (dtype, shape, ragged rank...), or its type."""
    try:
        spec = tf.type_spec_from_value(value)
        hash(spec)
        return spec
    except (TypeError, ValueError):
        return type(value).__qualname__


def _holds_tensor(value: Any) -> bool:
    if isinstance(value, (tf.Tensor, *_VARIABLES)) or hasattr(value, "_gpe_pending"):
        return True
    if is_per_replica(value):
        return True
    if type(value) in (tuple, list):
        return any(_holds_tensor(v) for v in value)
    if type(value) is dict:
        return any(_holds_tensor(v) for v in value.values())
    return False


def arg_fact(entry: tuple, value: Any) -> ArgFact:
    what = entry[0]
    if what == "variable":
        return ArgFact(Kind.VARIABLE, constant=True, value=value, python_type="Variable")
    if what == "tensor":
        length = entry[2][0] if entry[2] and entry[2][0] is not None else None
        return ArgFact(Kind.TENSOR, dtype=entry[1], shape=entry[2], python_type="Tensor",
                       length=length)
    if what == "constant":
        kind = Kind.PY_SCALAR if entry[1] in ("bool", "int") else Kind.HOST_DATA
        return ArgFact(kind, python_type=entry[1], constant=True, value=value)
    if what == "python":
        return ArgFact(Kind.PY_SCALAR, python_type=entry[1])
    if what == "data":
        return ArgFact(Kind.HOST_DATA, python_type=entry[1])
    if what == "array":
        return ArgFact(Kind.HOST_DATA, dtype=entry[1], shape=entry[2], python_type="ndarray")
    if what == "distributed":  # a PerReplica crosses as its components; else on the host
        if entry[3] is None:
            return ArgFact(Kind.HOST_ONLY, python_type=entry[1])
        return ArgFact(Kind.TENSOR, python_type=entry[1])
    if what == "composite":  # RaggedTensor, SparseTensor, IndexedSlices: never baked in
        # as a constant; what reads it runs on the host, every call, on this call's value
        return ArgFact(Kind.HOST_ONLY, python_type=entry[1], elements=_elements(value))
    if what == "structure":  # sent as its numbers, rebuilt in the TF part (channels.Structure)
        return ArgFact(Kind.STRUCTURE, python_type=entry[1])
    if _all_variables(entry):  # `params`, a list or dict of variables: captured as an
        # object is (the key holds each variable's identity), not sent
        return ArgFact(Kind.HOST, python_type=type(value).__name__, constant=True,
                       value=value)
    if what == "mapping" and type(value) is dict and _numbers_only(entry):
        return ArgFact(Kind.HOST_DATA, python_type="dict", number_items=True)
    if what in ("sequence", "mapping"):  # *args, **kwargs, a list of tensors
        kind = Kind.TENSOR if _all_tensors(entry) else Kind.HOST_DATA
        length = len(entry[2]) if what == "sequence" and kind == Kind.TENSOR else None
        return ArgFact(kind, python_type=type(value).__name__, length=length)
    # an object (self, a trainer...): bound into the TF part, where only attribute chains
    # that lead to TF objects are read (each guarded by identity in the call key)
    return ArgFact(Kind.HOST, python_type=entry[1], constant=True, value=value)


def _elements(value: Any) -> int | None:
    """A tf.data.Dataset whose elements are a tensor (0) or a tuple of n tensors (n)."""
    if not isinstance(value, tf.data.Dataset):
        return None
    spec = value.element_spec
    if isinstance(spec, tf.TensorSpec):
        return 0
    if type(spec) is tuple and spec and all(isinstance(s, tf.TensorSpec) for s in spec):
        return len(spec)
    return None


def _all_tensors(entry: tuple) -> bool:
    """A described tuple/list/dict whose leaves are all tensors (it crosses as a structure)."""
    if entry[0] == "tensor" or (entry[0] == "distributed" and entry[3] is not None):
        return True
    if entry[0] == "sequence":
        return bool(entry[2]) and all(_all_tensors(e) for e in entry[2])
    if entry[0] == "mapping":
        return bool(entry[1]) and all(_all_tensors(e) for _, e in entry[1])
    return False


def _numbers_only(entry: tuple) -> bool:
    """A described dict with string keys whose values are all Python numbers."""
    return bool(entry[1]) and all(
        isinstance(k, str) and (e[0] == "python" and e[1] in ("float", "int") or
                                e[0] == "constant" and e[1] in ("bool", "int"))
        for k, e in entry[1])


def _all_variables(entry: tuple) -> bool:
    """A described list, tuple or dict of variables only, or of such containers (d2l's
    Adam states: a list of (v, s) pairs of variables)."""
    if entry[0] == "sequence":
        leaves = entry[2]
    elif entry[0] == "mapping":
        leaves = [e for _, e in entry[1]]
    else:
        return False
    return bool(leaves) and all(e[0] == "variable" or _all_variables(e) for e in leaves)


def facts_for(key: tuple, bound: dict[str, Any], assumed: str = "") -> Facts:
    args = {name: arg_fact(entry, bound[name]) for name, entry in zip(bound, key)}
    objects = {name: fact.value for name, fact in args.items()  # (captured, guarded)
               if fact.kind == Kind.HOST and fact.constant}
    return Facts(args=args, classify=oracle.classify, assumed=assumed, objects=objects,
                 why_host=oracle.why_host)


def text(entry: tuple) -> str:
    """A described argument, for messages ("expected X, got Y")."""
    what = entry[0]
    if what == "tensor":
        dims = ", ".join("?" if d is None else str(d) for d in entry[2])
        return f"tensor {entry[1]}({dims})"
    if what == "constant":
        return f"{entry[1]} {entry[2]!r}"
    if what == "python":
        return f"a {entry[1]}"
    if what == "array":
        return f"array {entry[1]}{entry[2]}"
    if what == "sequence":
        return f"{entry[1]} of {len(entry[2])} (" + ", ".join(text(e) for e in entry[2]) + ")"
    if what == "data":
        return f"a {entry[1]}"
    if what == "mapping":
        return "dict (" + ", ".join(f"{k}: {text(e)}" for k, e in entry[1]) + ")"
    if what == "variable":
        return "a tf.Variable"
    if what == "composite":
        return f"a {entry[1]} ({entry[2]})"
    if what == "structure":
        return f"a {entry[1]} shaped {entry[2].describe()}"
    if what == "distributed":
        return f"a {entry[1]} over {len(entry[2])} replicas ({', '.join(entry[2])})"
    return f"a {entry[1]}"


def difference(old: tuple, new: tuple, where: str = "") -> str:
    """How a described argument differs from the one a variant was built for, as
    "WHERE: expected X, got Y"; where both read the same (another tf.Variable, a list
    holding one), the first element that differs and why."""
    if old[0] == new[0] == "sequence" and len(old[2]) == len(new[2]):
        for i, (a, b) in enumerate(zip(old[2], new[2])):
            if a != b:
                return difference(a, b, f"{where}[{i}]")
    if old[0] == new[0] == "mapping" and [k for k, _ in old[1]] == [k for k, _ in new[1]]:
        for (k, a), (_, b) in zip(old[1], new[1]):
            if a != b:
                return difference(a, b, f"{where}[{k!r}]")
    if old[0] == new[0] == "variable":
        return (f"{where}: expected the tf.Variable seen when sliced, got another tf.Variable "
                "(a variable is part of the variant: each new one is sliced again)")
    return f"{where}: expected {text(old)}, got {text(new)}"


MISSING = object()  # an attribute a path names is missing


def resolve(path: str, values: dict[str, Any], namespace_lookup) -> Any:
    """The object at a dotted `path` whose root is an argument or a free name."""
    return resolve_split(path.split("."), values, namespace_lookup)


def resolve_split(parts, values: dict[str, Any], namespace_lookup) -> Any:
    """`resolve` of a path already split at its dots (the call key's guards, every call)."""
    root = parts[0]
    obj = values[root] if root in values else namespace_lookup(root)
    for attr in parts[1:]:
        obj = getattr(obj, attr, MISSING)
    return obj
