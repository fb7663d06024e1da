"""Graph rewrites that change float results are off for gpe's graphs.

Grappler's constant folding and arithmetic optimizer rewrite float arithmetic (e.g.
`x / 1000.0` becomes `x * 0.001`), and its remapper swaps op sequences for fused kernels
that need not round the same way, so a graph's results can differ from eager's in the
last bits. gpe promises eager's results, so its TF parts and sink are traced and run with
those three rewrites off (measured on the example: about 5% slower with the remapper off,
within run-to-run noise). The setting is TensorFlow's per-thread function-call options: it
applies to what gpe traces and to the sink thread, and to nothing else in the program.
"""
from __future__ import annotations

import contextlib

from tensorflow.core.protobuf import rewriter_config_pb2
from tensorflow.python.eager import context

_VALUE_CHANGING = ("constant_folding", "arithmetic_optimization", "remapping")


def _options() -> context.FunctionCallOptions:
    config = context.context().config
    rewrites = config.graph_options.rewrite_options
    for name in _VALUE_CHANGING:
        setattr(rewrites, name, rewriter_config_pb2.RewriterConfig.OFF)
    return context.FunctionCallOptions(config_proto=config)


@contextlib.contextmanager
def exact_arithmetic():
    """Within the block, functions traced or called on this thread keep eager's arithmetic."""
    ctx = context.context()
    previous = ctx.function_call_options
    ctx.function_call_options = _options()
    try:
        yield
    finally:
        ctx.function_call_options = previous


def use_exact_arithmetic_on_this_thread() -> None:
    """For a thread that runs only gpe graphs (the sink thread)."""
    context.context().function_call_options = _options()
