"""`Pending`: what the host holds for a TF value it has not needed yet.

A Pending is created when the host program reaches the point where the TF part sends a
value; it dequeues that value only when something needs it: `.numpy()`, `float()`,
`bool()`, printing, NumPy, arithmetic, or any TF op (through `__tf_tensor__`). It then
behaves as the eager tensor it resolved to.

What a program can ask of the eager result it answers the same, waiting for the value at
the use that needs it (repr, numpy, shape, pickling, dlpack, ...); `ref()`, `copy` and
`__array_priority__` (NumPy defers mixed arithmetic to the tensor) need no value. What it
cannot answer as eager: `type(r)` and `isinstance(r, tf.Tensor)` (it is a `core.Tensor`, so
`tf.is_tensor` and Keras' checks are True). Making `isinstance(r, tf.Tensor)` True by a
`__class__` property or an ABC registration is unsafe: TF then passes the object unconverted
to its C runtime (`TensorSpec.cast` skips conversion for a Tensor; TFE_Py_Execute reads it as
an EagerTensor: a segfault), and claiming EagerTensor is refused by the C fast path ("strict
subclass of EagerTensor").
"""
from __future__ import annotations

import operator

from tensorflow.python.framework import ops
from tensorflow.python.types import core
from tensorflow.python.util import object_identity

from .trace import TRACER


class Pending(core.Tensor):
    __slots__ = ("_channel", "_value")
    _gpe_pending = True
    __array_priority__ = ops.EagerTensor.__array_priority__

    def __init__(self, channel):
        self._channel = channel
        self._value = None

    def resolve(self):
        """The eager tensor this stands for (waits for the TF part if needed)."""
        if self._value is None:
            if TRACER.on:  # a profile or `gpe run --report`: the wait is an event
                TRACER.wait(self)
            else:
                self._channel.resolve(self)
        return self._value

    # what the eager tensor offers -------------------------------------------------
    def __tf_tensor__(self, dtype=None, name=None):
        value = self.resolve()
        if dtype is not None and value.dtype != dtype:
            import tensorflow as tf
            return tf.convert_to_tensor(value, dtype=dtype, name=name)
        return value

    def __array__(self, dtype=None, copy=None):
        import numpy as np
        array = np.asarray(self.resolve().numpy())
        return array if dtype is None else array.astype(dtype)

    def __getattr__(self, name):
        if name.startswith("_gpe") or name in Pending.__slots__:
            raise AttributeError(name)
        return getattr(self.resolve(), name)

    @property
    def dtype(self):
        return self._channel.dtype

    @property
    def shape(self):
        return self.resolve().shape

    def __repr__(self):
        return repr(self.resolve())

    def __str__(self):
        return str(self.resolve())

    def __format__(self, spec):
        return format(self.resolve(), spec)

    def __hash__(self):
        return hash(self.resolve())

    def __len__(self):
        return len(self.resolve())

    def __iter__(self):
        return iter(self.resolve())

    def __bool__(self):
        return bool(self.resolve())

    def __float__(self):
        return float(self.resolve())

    def __int__(self):
        return int(self.resolve())

    def __index__(self):
        return operator.index(self.resolve())

    def __complex__(self):
        return complex(self.resolve())

    def __getitem__(self, key):
        return self.resolve()[key]

    def __dir__(self):
        return dir(self.resolve())

    def __reduce__(self):
        return self.resolve().__reduce__()

    def __copy__(self):
        return self  # as EagerTensor.__copy__: tensors are immutable

    def __deepcopy__(self, memo):
        return self

    def ref(self):
        """As Tensor.ref(): a hashable reference to this very object (deref() is self)."""
        return object_identity.Reference(self)

    def experimental_ref(self):
        return self.ref()


def _forward(name):
    def method(self, *args):
        return getattr(self.resolve(), name)(*args)
    method.__name__ = name
    return method


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and",
              "or", "xor"):
    for _dunder in (f"__{_name}__", f"__r{_name}__"):
        setattr(Pending, _dunder, _forward(_dunder))
for _dunder in ("__neg__", "__pos__", "__abs__", "__invert__", "__lt__", "__le__", "__gt__",
                "__ge__", "__eq__", "__ne__", "__round__", "__div__", "__rdiv__", "__nonzero__",
                "__dlpack__", "__dlpack_device__", "__tf_tracing_type__"):
    setattr(Pending, _dunder, _forward(_dunder))
def _binary(name, op):
    # not tensor operators: the eager tensor is given to the operator itself, so the result
    # (or the TypeError naming EagerTensor) is eager's
    setattr(Pending, f"__{name}__", lambda self, other: op(self.resolve(), other))
    setattr(Pending, f"__r{name}__", lambda self, other: op(other, self.resolve()))


for _name, _op in (("divmod", divmod), ("lshift", operator.lshift),
                   ("rshift", operator.rshift)):
    _binary(_name, _op)


_installed = False


def install() -> None:
    """TF entry points that decide by the exact class (`isinstance(x, tf.Tensor)`, C checks)
    and refuse a Pending where they accept the eager tensor: they resolve Pendings in their
    arguments first (a Pending cannot claim to be a tf.Tensor; see the module docstring)."""
    global _installed
    if _installed:
        return
    _installed = True
    import tensorflow as tf
    from tensorflow.python.dlpack import dlpack
    from tensorflow.python.eager import backprop
    from tensorflow.python.framework import tensor as tensor_lib
    tape = backprop.GradientTape
    for name in ("watch", "gradient", "jacobian", "batch_jacobian"):
        setattr(tape, name, _resolving(getattr(tape, name)))
    spec = tensor_lib.TensorSpec
    spec.from_tensor = classmethod(_resolving(spec.from_tensor.__func__))
    dlpack.to_dlpack = tf.experimental.dlpack.to_dlpack = _resolving(dlpack.to_dlpack)


def resolved(value):
    """`value` with every Pending in its structure replaced by its eager tensor."""
    if isinstance(value, Pending):
        return value.resolve()
    if isinstance(value, (list, tuple, dict)):
        import tensorflow as tf
        return tf.nest.map_structure(
            lambda v: v.resolve() if isinstance(v, Pending) else v, value)
    return value


def _resolving(function):
    import functools

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return function(*map(resolved, args), **{k: resolved(v) for k, v in kwargs.items()})
    return wrapper
