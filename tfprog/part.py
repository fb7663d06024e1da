"""Build a sliced function's TF part into a graph function (one FunctionDef).

`build_part(plan, tf_factory, bound, specs)` traces the plan's TF program with
TensorFlow's own function machinery. The function takes one resource argument per
channel (the queue handles, so the FunctionDef does not depend on which queues it is run
with) and captures the variables it uses by handle. Tracing also finds the dtype of
every TF->host value.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import tensorflow as tf
from tensorflow.python.ops import gen_data_flow_ops
from tensorflow.python.types import core

from slicer.plan import ChannelKind, SlicePlan
from tfprog.channels import ValueSpec

_RESOURCE = tf.TensorSpec([], tf.resource)


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


class PartError(Exception):
    """The TF part could not be built (the function then runs eagerly)."""


@dataclass
class Part:
    """A traced TF part: the concrete function and the specs of every channel."""

    plan: SlicePlan
    function: Any                      # tf ConcreteFunction(queue handles...) -> int32
    specs: dict[int, list[ValueSpec]]  # channel index -> component specs

    @property
    def function_name(self) -> str:
        return self.function.function_def.signature.name

    def dtypes(self, index: int) -> list[tf.DType]:
        kind = self.plan.channel(index).kind
        flag = [tf.bool] if kind in (ChannelKind.GATE, ChannelKind.BARRIER) else []
        return flag + [s.dtype for s in self.specs[index]]


class _TraceRuntime:
    """What the TF program calls as `_gpe_rt` while it is traced."""

    def __init__(self, plan: SlicePlan, specs: dict[int, list[ValueSpec]]):
        self.plan, self.specs = plan, specs

    def entry(self, queues, index):
        return self._receive(queues[index], self.specs[index], [])

    def gate(self, queues, index, segment: Callable):
        flag, *values = self._receive(queues[index], self.specs[index], [tf.bool])
        with tf.control_dependencies(_stateful_ops()):
            tf.cond(flag, lambda: segment(*values), self.done)

    def output(self, queues, index, value):
        try:
            tensor = tf.convert_to_tensor(value)
        except (TypeError, ValueError) as exc:
            raise PartError(f"{self.plan.channel(index).names[0]} is not a tensor: {exc}")
        self.specs[index] = [ValueSpec(tensor.dtype, tuple(tensor.shape.as_list())
                                       if tensor.shape.rank is not None else None)]
        gen_data_flow_ops.queue_enqueue_v2(queues[index], [tensor])

    def barrier(self, queues, index):
        self.specs[index] = []
        with tf.control_dependencies(_stateful_ops()):
            gen_data_flow_ops.queue_enqueue_v2(queues[index], [tf.constant(True)])

    @staticmethod
    def constant(maker, value, dtype=None, shape=None, name=None, **kwargs):
        """tf.constant / tf.convert_to_tensor on a value the host sent (a HostValue)."""
        if shape is not None:
            kwargs["shape"] = shape
        if not isinstance(value, HostValue):
            return maker(value, dtype=dtype, name=name, **kwargs)
        tensor = tf.convert_to_tensor(value, dtype=dtype or value._spec.default_dtype)
        if shape is None:
            return tensor
        if tensor.shape.rank == 0:
            return tf.fill(shape, tensor)
        return tf.reshape(tensor, shape)

    def done(self):
        return tf.constant(0, tf.int32)

    @staticmethod
    def _receive(queue, specs: list[ValueSpec], flag: list):
        dtypes = flag + [s.dtype for s in specs]
        parts = gen_data_flow_ops.queue_dequeue_v2(queue, dtypes)
        out = [tf.reshape(parts[0], [])] if flag else []
        for tensor, spec in zip(parts[len(flag):], specs):
            if spec.shape is not None:
                tensor.set_shape(spec.shape)
            out.append(HostValue(tensor, spec) if spec.python else tensor)
        return out


def _stateful_ops() -> list:
    graph = tf.compat.v1.get_default_graph()
    return [op for op in graph.get_operations()
            if op.op_def is not None and op.op_def.is_stateful and op.type != "Placeholder"]


def build_part(plan: SlicePlan, tf_factory: Callable[..., Callable], bound: dict[str, Any],
               specs: dict[int, list[ValueSpec]]) -> Part:
    """Trace the TF program. `tf_factory(runtime, bound)` returns the `_gpe_tf` function."""
    specs = dict(specs)
    runtime = _TraceRuntime(plan, specs)
    program = tf_factory(runtime, bound)

    def traced(*queues):
        return program(queues)

    traced.__name__ = f"gpe_{plan.name}"
    signature = [_RESOURCE] * len(plan.channels)
    try:
        concrete = tf.function(traced, input_signature=signature,
                               autograph=False).get_concrete_function()
    except PartError:
        raise
    except Exception as exc:  # tracing user code can raise anything
        raise PartError(f"tracing the TF part failed: {type(exc).__name__}: {exc}") from exc
    return Part(plan=plan, function=concrete, specs=specs)
