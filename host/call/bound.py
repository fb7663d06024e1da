"""A sliced method bound to an instance, and a sliced function found by its name.

`BoundSliced` is what `SlicedFunction.__get__` gives for an object's method (the object
is an ordinary host argument); `resolve` finds a pickled sliced function again.
"""
from __future__ import annotations

import importlib
import inspect
import pickle
import sys
from typing import Any


class BoundSliced:
    """A sliced method bound to an instance (the instance is an ordinary host argument)."""

    _gpe_sliced = True
    autograph_info__: dict = {}  # see function.SlicedFunction

    def __init__(self, sliced, obj):
        self._sliced, self._obj = sliced, obj
        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            setattr(self, attr, getattr(sliced, attr, None))

    def __repr__(self) -> str:
        return f"<gpe sliced method {self.__qualname__} of {self._obj!r}>"

    @property
    def __self__(self):  # as a bound method's (the slicer's callee analysis reads them)
        return self._obj

    @property
    def __func__(self):
        return self._sliced

    @property
    def __signature__(self) -> inspect.Signature:  # as a bound method's (Keras reads it)
        params = list(self._sliced.keys.signature.parameters.values())
        return self._sliced.keys.signature.replace(parameters=params[1:])

    def __call__(self, *args, **kwargs):
        return self._sliced(self._obj, *args, **kwargs)

    def stats(self):
        return self._sliced.stats()

    def __reduce__(self):  # as a bound method: the instance and the method's name
        return getattr, (self._obj, self._sliced.__name__)


def by_name(sliced) -> tuple:
    """A sliced function pickled as functions are, by module and qualified name
    (multiprocessing sends a script's functions so): the name resolves to the wrapper where
    the module is loaded as `gpe run` loads it (a forked child), else to the function."""
    if resolve(sliced.__module__, sliced.__qualname__) is not sliced:
        raise pickle.PicklingError(f"Can't pickle {sliced.fn!r}: it's not found as "
                                   f"{sliced.__module__}.{sliced.__qualname__}")
    return resolve, (sliced.__module__, sliced.__qualname__)


def resolve(module: str, qualname: str) -> Any:
    """The object named `module.qualname` (None where there is none)."""
    try:
        obj = sys.modules.get(module) or importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, TypeError, ValueError):
        return None
    return obj
