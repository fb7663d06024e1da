"""Python values the host sends, inside a TF part.

A `HostValue` is a Python or NumPy value received from the host: TF ops convert it as
they would have converted the original value eagerly, and arithmetic between two Python
numbers stays Python arithmetic (its type and precision). A `Speculated` one is a number
a callee branches on (slicer/speculated.py).
"""
from __future__ import annotations

import operator

import tensorflow as tf
from tensorflow.python.types import core

from .channels import ValueSpec, python_spec


class SentDecides(TypeError):
    """A Python decision on a number the host sends, while a part is traced."""

class HostValue(core.Tensor):
    """A Python or NumPy value received from the host, inside the TF part.

    TF ops convert it as they would have converted the original value eagerly: to the
    dtype the op asks for, else to TF's default dtype for that Python type.
    """

    def __init__(self, tensor: tf.Tensor, spec: ValueSpec):
        self._tensor, self._spec = tensor, spec

    def __tf_tensor__(self, dtype=None, name=None):
        dtype = tf.as_dtype(dtype) if dtype is not None else self._spec.default_dtype
        if dtype == self._tensor.dtype:
            return self._tensor
        return tf.cast(self._tensor, dtype, name=name)

    @property
    def dtype(self):
        return self._spec.default_dtype

    @property
    def shape(self):
        return self._tensor.shape

    def get_shape(self):
        return self._tensor.shape

    def __bool__(self):
        # the value is known only when the part runs: a Python decision on it while the
        # part is traced would be taken once, silently (the part is not built instead)
        raise SentDecides("a number the host sends cannot decide Python control flow in "
                          "the TF part")

    def _like(self, other):
        """This value as an operand next to `other`, converted as eager converts it."""
        if isinstance(other, (tf.Tensor, tf.Variable)):
            if self._spec.type_name == "float" and not (
                    other.dtype.is_floating or other.dtype.is_complex):
                raise TypeError(f"Cannot convert a Python float to EagerTensor of dtype "
                                f"{other.dtype.name}")
            return self.__tf_tensor__(other.dtype)
        return self.__tf_tensor__()


class Speculated(HostValue):
    """A Python number sent by the host that a callee branches on (slicer/speculated.py):
    compared with a Python number (only in the callee's `if` tests, whose outcomes the
    call key guards) it answers from `seen`, the value the number had when this TF part
    was built; anywhere else it is the sent value (arithmetic, TF ops)."""

    def __init__(self, value: HostValue, seen):
        super().__init__(value._tensor, value._spec)
        self._seen = seen

    def __bool__(self):
        return bool(self._seen)

    __hash__ = HostValue.__hash__


def _comparison(name):
    op = getattr(operator, name)

    def compare(self, other):
        if type(other) in (bool, int, float):
            return op(self._seen, other)
        return op(self._like(other), other)  # a tensor: TF's comparison, as eagerly
    return compare


for _name in ("lt", "le", "gt", "ge", "eq", "ne"):
    setattr(Speculated, f"__{_name}__", _comparison(_name))

_PY_TYPES = {"bool": bool, "int": int, "float": float}


def _python_type(value) -> type | None:
    """bool, int or float for a Python number or a HostValue holding one, else None."""
    if isinstance(value, HostValue):
        return _PY_TYPES.get(value._spec.type_name)
    return type(value) if type(value) in (bool, int, float) else None


def _python_arithmetic(op, name: str, a, b) -> HostValue:
    """Arithmetic between two Python numbers (one sent by the host): Python's result type,
    computed at Python's precision (float64, int64), still a Python value for later ops."""
    result = float if name == "truediv" or float in (_python_type(a), _python_type(b)) else int
    spec = python_spec(result)

    def wire(v):
        if isinstance(v, HostValue):
            return tf.cast(v._tensor, spec.dtype)
        return tf.constant(v, spec.dtype)
    return HostValue(op(wire(a), wire(b)), spec)


def _binary(op, name):
    # TF's operators convert a plain operand without the other's dtype and, when that
    # fails, call the operand's reflected method: these give eager's result.
    def forward(self, other):
        if _python_type(self) and _python_type(other):
            return _python_arithmetic(op, name, self, other)
        return op(self._like(other), other)

    def reflected(self, other):
        if _python_type(self) and _python_type(other):
            return _python_arithmetic(op, name, other, self)
        return op(other, self._like(other))
    return forward, reflected


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow"):
    _forward, _reflected = _binary(getattr(operator, _name), _name)
    setattr(HostValue, f"__{_name}__", _forward)
    setattr(HostValue, f"__r{_name}__", _reflected)


def _ordering(op):
    """`<`, `<=`, `>`, `>=`. Between two Python numbers: a Python bool, compared exactly
    (two ints as int64, else as float64), still a value the host sent (it cannot decide
    Python control flow here: __bool__). Else TF's comparison of the value converted as
    eager converts it: a NumPy array of indices that a Keras op compares (`take`'s
    `tf.where(i < 0, ...)` in an Embedding) gives the bools NumPy would."""
    def compare(self, other):
        if _python_type(self) and _python_type(other):
            exact = tf.int64 if int in (_python_type(self), _python_type(other)) and \
                float not in (_python_type(self), _python_type(other)) else tf.float64

            def wire(v):
                return tf.cast(v._tensor, exact) if isinstance(v, HostValue) else \
                    tf.constant(v, exact)
            return HostValue(op(wire(self), wire(other)), python_spec(bool))
        return op(self._like(other), other)
    return compare


for _name in ("lt", "le", "gt", "ge"):  # (not == and !=: HostValues stay hashable)
    setattr(HostValue, f"__{_name}__", _ordering(getattr(operator, _name)))


def python_leaf_spec(leaf) -> ValueSpec | None:
    """The Python spec of a leaf that is a Python bool, int or float (or holds one)."""
    if isinstance(leaf, HostValue):
        return leaf._spec if leaf._spec.python else None
    kind = type(leaf)
    return python_spec(kind) if kind in (bool, int, float) else None


def constant(maker, value, dtype=None, shape=None, name=None, **kwargs):
    """tf.constant / tf.convert_to_tensor on a value the host sent (a HostValue)."""
    if shape is not None:
        kwargs["shape"] = shape
    leaves = tf.nest.flatten(value)
    if not any(isinstance(v, HostValue) for v in leaves):
        return maker(value, dtype=dtype, name=name, **kwargs)
    if isinstance(value, HostValue):
        tensor = tf.convert_to_tensor(value, dtype=dtype or value._spec.default_dtype)
    else:  # a list of them (`tf.constant(sizes)` of a list argument): packed
        tensor = tf.convert_to_tensor(tf.nest.map_structure(
            lambda v: v.__tf_tensor__(dtype) if isinstance(v, HostValue) else v, value),
            dtype=dtype)
    if shape is None:
        return tensor
    if tensor.shape.rank == 0:
        return tf.fill(shape, tensor)
    return tf.reshape(tensor, shape)
