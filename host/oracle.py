"""Classify the objects a sliced function refers to into the slicer's `Kind`s."""
from __future__ import annotations

import inspect
import types
from typing import Any

import numpy as np
import tensorflow as tf

from slicer.facts import Kind

_HOST_MODULES = ("numpy", "math", "random", "statistics", "builtins", "operator", "itertools",
                 "functools", "collections", "time", "json", "re", "string")
_TF_CONTEXTS = (tf.GradientTape, tf.name_scope, tf.device)
_CONSTANT_MAKERS = (tf.constant, tf.convert_to_tensor)
_EFFECT_MODULES = ("tensorflow.python.ops.logging_ops", "tensorflow.python.ops.check_ops",
                   "tensorflow.python.ops.summary_ops_v2")


def classify(obj: Any) -> Kind:
    if isinstance(obj, tf.Variable):
        return Kind.VARIABLE
    if isinstance(obj, tf.Tensor):
        return Kind.TENSOR
    if isinstance(obj, (tf.DType, tf.TensorShape)):
        return Kind.TF_OBJECT
    if isinstance(obj, (np.ndarray, np.generic)):
        return Kind.HOST_DATA
    if isinstance(obj, types.ModuleType):
        return Kind.TF_MODULE if _top(obj.__name__) == "tensorflow" else Kind.HOST
    if inspect.isclass(obj):
        if issubclass(obj, _TF_CONTEXTS):
            return Kind.TF_FACTORY
        return Kind.HOST  # tf.Variable(...) and other constructors run eagerly on the host
    if callable(obj):
        module = getattr(obj, "__module__", None) or type(obj).__module__ or ""
        if obj in _CONSTANT_MAKERS:
            return Kind.TF_CONSTANT
        if _top(module) == "tensorflow":
            return Kind.TF_EFFECT_OP if module in _EFFECT_MODULES else Kind.TF_OP
        if _top(module) in _HOST_MODULES or isinstance(obj, np.ufunc):
            return Kind.HOST_FN
    return Kind.HOST


def _top(module_name: str) -> str:
    return module_name.split(".", 1)[0]
