"""Count the TF ops run eagerly on the host, and the ops in a sliced function's TF part.

Used by tests and benchmarks to show where TF work ran. `eager_ops()` patches TF's eager
dispatch points (the generated ops' fast path, `execute.execute` and the cancellable
execution gpe's waits use) for the duration of a `with` block; `graph_ops(part)` counts the nodes of a TF part's FunctionDef.
"""
from __future__ import annotations

import collections
import contextlib
import threading

from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import execute

CHANNEL_OPS = frozenset({"QueueEnqueueV2", "QueueDequeueV2", "QueueCloseV2", "FIFOQueueV2",
                         "QueueDequeueManyV2", "QueueSizeV2", "DestroyResourceOp"})
"""Ops gpe runs on the host to move values, and resource clean-up: not the user's TF work."""
SINK_MARK = "gpe_sink"  # the sink program's function name contains this
_plumbing = threading.local()  # see plumbing()


@contextlib.contextmanager
def plumbing():
    """Around gpe's own eager ops that are not channel operations (packing the queue and
    variable handles for a new sink, see tfprog.sink): not counted as the user's work."""
    _plumbing.active = True
    try:
        yield
    finally:
        _plumbing.active = False


@contextlib.contextmanager
def eager_ops():
    """Yields a Counter of op type -> eager executions inside the block (all threads)."""
    counts: collections.Counter = collections.Counter()
    fast, slow = pywrap_tfe.TFE_Py_FastPathExecute, execute.execute
    cancellable = pywrap_tfe.TFE_Py_ExecuteCancelable  # (handle, device, op_name, ...)

    def counted_fast(ctx, op_name, *args, **kwargs):
        if not getattr(_plumbing, "active", False):
            counts[op_name] += 1
        return fast(ctx, op_name, *args, **kwargs)

    def counted_slow(op_name, *args, **kwargs):
        if not getattr(_plumbing, "active", False):
            counts[op_name.decode() if isinstance(op_name, bytes) else op_name] += 1
        return slow(op_name, *args, **kwargs)

    def counted_cancellable(handle, device, op_name, *args):
        counts[op_name] += 1
        return cancellable(handle, device, op_name, *args)

    pywrap_tfe.TFE_Py_FastPathExecute, execute.execute = counted_fast, counted_slow
    pywrap_tfe.TFE_Py_ExecuteCancelable = counted_cancellable
    try:
        yield counts
    finally:
        pywrap_tfe.TFE_Py_FastPathExecute, execute.execute = fast, slow
        pywrap_tfe.TFE_Py_ExecuteCancelable = cancellable


def user_ops(counts: collections.Counter) -> collections.Counter:
    """The counts without gpe's own channel operations."""
    return collections.Counter({k: v for k, v in counts.items()
                                if k not in CHANNEL_OPS and SINK_MARK not in k})


def graph_ops(part) -> collections.Counter:
    """Op types in a TF part's FunctionDef, nested functions (cond branches) included."""
    library = {f.signature.name: f for f in part.function.function_def.library.function} \
        if hasattr(part.function.function_def, "library") else {}
    graph = part.function.graph.as_graph_def()
    library.update({f.signature.name: f for f in graph.library.function})
    counts: collections.Counter = collections.Counter()
    for node in part.function.function_def.node_def:
        counts[node.op] += 1
    for fdef in library.values():
        for node in fdef.node_def:
            counts[node.op] += 1
    return counts
