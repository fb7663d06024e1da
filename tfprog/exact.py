"""Graph rewrites that change float results are off for gpe's graphs.

Grappler's constant folding and arithmetic optimizer rewrite float arithmetic (e.g.
`x / 1000.0` becomes `x * 0.001`), and its remapper swaps op sequences for fused kernels
that need not round the same way, so a graph's results can differ from eager's in the
last bits. gpe promises eager's results, so its TF parts and sink are traced and run with
those three rewrites off (measured on the example: about 5% slower with the remapper off,
within run-to-run noise), and AddN traced as ordered adds (see _install_ordered_add_n). The setting is TensorFlow's per-thread function-call options: it
applies to what gpe traces and to the sink thread, and to nothing else in the program.

With oneDNN on (TF's default on x86), one more rewrite runs on every graph and has no
per-graph switch: MklLayoutRewritePass (after partitioning) merges a float32 BiasAddGrad
with the Conv2DBackpropFilter that reads the same gradient tensor into
_MklNativeConv2DBackpropFilterWithBias, whose bias gradient sums in another order than the
BiasAddGrad kernel eager runs (a conv layer's bias gradient an ulp off; Keras' Conv2D adds
its bias with BiasAdd). While gpe traces, BiasAdd's gradient takes its input through a
Snapshot, so the pass finds no shared input and leaves BiasAddGrad as eager runs it (see
_install_unmerged_bias_grad).

One op accepts eagerly what a graph refuses: Reshape reads a scalar shape as a one-element
one (`tf.reshape(t, -1)`, d2l's `reshape(tf.transpose(Y), (-1))`), where graph shape
inference requires a vector; while gpe traces, such a shape is given as the vector the
kernel reads (see _install_scalar_reshape).
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np
import tensorflow as tf

from tensorflow.core.protobuf import rewriter_config_pb2
from tensorflow.python.distribute import mirrored_run
from tensorflow.python.eager import context
from tensorflow.python.framework import ops
from tensorflow.python.ops import gen_array_ops, gen_math_ops, gen_nn_ops
from tensorflow.python.util import _pywrap_util_port

_VALUE_CHANGING = ("constant_folding", "arithmetic_optimization", "remapping")
# Grappler's dependency optimizer drops a read's control edge to a later write of the same
# variable when another path orders them, then removes the IdentityN on that path (here
# Keras Adam's IdentityN over all the gradients): the read and the write are left unordered, and
# now and then the read sees the update. With the arithmetic optimizer off nothing merges the
# reads first, so gpe's graphs hit it: a WGAN-GP critic step's pre-update mean(critic(x))
# read the updated output-layer kernel about once in 150 calls.
_ORDER_BREAKING = ("dependency_optimization",)


def _options() -> context.FunctionCallOptions:
    config = context.context().config
    rewrites = config.graph_options.rewrite_options
    for name in _VALUE_CHANGING + _ORDER_BREAKING:
        setattr(rewrites, name, rewriter_config_pb2.RewriterConfig.OFF)
    # Grappler's second round over a graph and its MLIR (TFG) passes (topological sort,
    # shape inference, moving ops into branches) change no value and, on gpe's graphs,
    # nothing else measurable: the second round found nothing to do, and together they
    # were about 20% of the CPU time of a sink's first run (instantiating it with its
    # parts inlined; measured on examples/mylib's train_step from its bundle)
    rewrites.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    rewrites.disable_tfg_optimizer = True
    if not _gpus():
        # without a GPU, the layout optimizer and the memory optimizer only analyse the
        # graph (shapes, a simulated run for its memory) and change nothing (the layouts
        # are converted for GPUs, and on a CPU only when asked; the swaps go to GPUs):
        # together about a fifth of the CPU time of instantiating a sink (mylib's
        # train_step from its bundle, 56 -> 45 ms)
        rewrites.layout_optimizer = rewriter_config_pb2.RewriterConfig.OFF
        rewrites.memory_optimization = rewriter_config_pb2.RewriterConfig.NO_MEM_OPT
    return context.FunctionCallOptions(config_proto=config)


_GPUS: list = []


def _gpus() -> bool:
    """Whether TensorFlow sees a GPU (asked once)."""
    if not _GPUS:
        _GPUS.append(bool(context.context().list_physical_devices("GPU")))
    return _GPUS[0]


_tracing = threading.local()


@contextlib.contextmanager
def exact_arithmetic():
    """Within the block, functions traced or called on this thread keep eager's arithmetic."""
    ctx = context.context()
    previous = ctx.function_call_options
    ctx.function_call_options = _options()
    _install_ordered_add_n()
    _install_unmerged_bias_grad()
    _install_scalar_reshape()
    depth = getattr(_tracing, "depth", 0)
    _tracing.depth = depth + 1
    _tracers[threading.get_ident()] = _tracers.get(threading.get_ident(), 0) + 1
    try:
        yield
    finally:
        _tracing.depth = depth
        _tracers[threading.get_ident()] -= 1
        if not _tracers[threading.get_ident()]:
            del _tracers[threading.get_ident()]
        ctx.function_call_options = previous


_tracers: dict[int, int] = {}  # threads inside exact_arithmetic -> depth


def _exact_here() -> bool:
    """This thread traces with eager's arithmetic: inside exact_arithmetic, or a replica
    thread of a MirroredStrategy whose `strategy.run` a part being traced holds (it builds
    the replica's ops into the part's graph: tfprog/replica_part.py; a per-replica step
    whose Conv2D bias gradient oneDNN merged was an ulp off from the first steps)."""
    if getattr(_tracing, "depth", 0):
        return True
    return bool(_tracers) and isinstance(threading.current_thread(),
                                         mirrored_run._MirroredReplicaThread)  # noqa: SLF001


traces_here = _exact_here  # this thread traces a gpe part (for tfprog/rows.py)


_original_add_n = None


def _install_ordered_add_n() -> None:
    """AddN sums its inputs in order, except that in a graph it may reuse the buffer of any
    input that nothing else holds and then adds that one first: results can change in the
    last bit from run to run (eagerly the inputs are held by Python, so the order holds).
    Gradient aggregation uses it too. While gpe traces a TF part, an AddN becomes the same
    sums as binary adds, grouped as the kernel groups them (see _kernel_order_sum)."""
    global _original_add_n
    if _original_add_n is not None:
        return
    _original_add_n = gen_math_ops.add_n

    def add_n(inputs, name=None):
        if not _exact_here() or context.executing_eagerly() or \
                len(inputs) < 2 or not all(isinstance(t, tf.Tensor) for t in inputs) or \
                not all(t.dtype.is_floating or t.dtype.is_integer or t.dtype.is_complex
                        for t in inputs):  # a variant (an RNN's gradient lists) has no AddV2
            return _original_add_n(inputs, name=name)
        return tf.identity(_kernel_order_sum(inputs), name=name)

    gen_math_ops.add_n = add_n


def _kernel_order_sum(inputs):
    """AddN's CPU kernel (aggregate_ops): the first N % 8 inputs (8 or 9 when that is 0 or 1)
    summed left to right, then each following group of 8 summed left to right on its own and
    added to the total (`out += in1 + ... + in8`). Up to 9 inputs that is a left-to-right
    sum; from 10 it is not, and a left-to-right sum differs in the last bits."""
    def left_to_right(tensors):
        total = tensors[0]
        for tensor in tensors[1:]:
            total = gen_math_ops.add_v2(total, tensor)
        return total
    first = len(inputs) % 8
    first = {0: 8, 1: 9}.get(first, first)
    total = left_to_right(inputs[:first])
    for start in range(first, len(inputs), 8):
        total = gen_math_ops.add_v2(total, left_to_right(inputs[start:start + 8]))
    return total


_original_bias_add_grad = None


def _install_unmerged_bias_grad() -> None:
    """While gpe traces a TF part (oneDNN on), BiasAdd's gradient reads the incoming
    gradient through a Snapshot (a copy, which Grappler's pruner keeps where it removes an
    Identity): oneDNN's layout pass then sees no Conv2DBackpropFilter sharing BiasAddGrad's
    input and does not merge them (see the module docstring)."""
    global _original_bias_add_grad
    if _original_bias_add_grad is not None or not _pywrap_util_port.IsMklEnabled():
        return
    entry = ops._gradient_registry._registry["BiasAdd"]  # noqa: SLF001 (no public override)
    _original_bias_add_grad = entry["type"]

    def bias_add_grad(op, received_grad):
        if not _exact_here() or context.executing_eagerly() or \
                not isinstance(received_grad, tf.Tensor) or received_grad.dtype != tf.float32:
            return _original_bias_add_grad(op, received_grad)
        try:
            data_format = op.get_attr("data_format")
        except ValueError:  # BiasAddV1
            data_format = None
        unshared = gen_array_ops.snapshot(received_grad)
        return received_grad, gen_nn_ops.bias_add_grad(out_backprop=unshared,
                                                       data_format=data_format)

    entry["type"] = bias_add_grad


_original_reshape = None


def _install_scalar_reshape() -> None:
    """While gpe traces a TF part, Reshape's scalar shape becomes the one-element vector its
    kernel reads it as (eagerly `tf.reshape(t, -1)` flattens; traced, shape inference
    raised "Shape must be rank 1 but is rank 0" and the call ran eagerly)."""
    global _original_reshape
    if _original_reshape is not None:
        return
    _original_reshape = gen_array_ops.reshape

    def reshape(tensor, shape, name=None):
        if _exact_here() and not context.executing_eagerly() and _scalar(shape):
            shape = tf.expand_dims(shape, 0)
        return _original_reshape(tensor, shape, name=name)

    gen_array_ops.reshape = reshape


def _scalar(shape) -> bool:
    if isinstance(shape, (int, np.integer)):
        return True
    return isinstance(shape, tf.Tensor) and shape.shape.rank == 0


def use_exact_arithmetic_on_this_thread() -> None:
    """For a thread that runs only gpe graphs (the sink thread)."""
    context.context().function_call_options = _options()
