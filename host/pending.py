"""`Pending`: what the host holds for a TF value it has not needed yet.

A Pending is created when the host program reaches the point where the TF part sends a
value; it dequeues that value only when something needs it: `.numpy()`, `float()`,
`bool()`, printing, NumPy, arithmetic, or any TF op (through `__tf_tensor__`). It then
behaves as the eager tensor it resolved to.
"""
from __future__ import annotations

import operator

from tensorflow.python.types import core


class Pending(core.Tensor):
    __slots__ = ("_channel", "_value")
    _gpe_pending = True

    def __init__(self, channel):
        self._channel = channel
        self._value = None

    def resolve(self):
        """The eager tensor this stands for (waits for the TF part if needed)."""
        if self._value is None:
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
                "__ge__", "__eq__", "__ne__"):
    setattr(Pending, _dunder, _forward(_dunder))
