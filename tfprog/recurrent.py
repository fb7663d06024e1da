"""Keras recurrent layers traced unrolled, so that their sums are eager's.

A Keras RNN (SimpleRNN, LSTM, GRU, one in a Bidirectional) that is not unrolled runs its
steps in a `tf.while_loop`. Eagerly that loop is a Python loop: every step's ops are
recorded on the tape, which adds the weights' per-step gradients in one AddN. In a graph
it is a While, whose gradient adds them one step at a time: the gradients differ from
eager's in the last bits (and Adam can turn that noise in a zero gradient into a
different update). Unrolled, Keras runs the same step ops as straight-line code, and its
results and gradients are eager's, bit for bit (measured: SimpleRNN, LSTM, GRU with and
without reset_after, go_backwards, return_sequences and return_state, Bidirectional, a
masked input: eagerly, `unroll=False` and `unroll=True` give the same bits; traced
unrolled under gpe's exact arithmetic, the same as eager).

So the layers the oracle met (`register`) are traced with `unroll=True` (`unrolled()`,
around each trace of a TF part) and set back after. The time dimension must be known when
the part is traced: Keras refuses to unroll over an unknown one, and the trace fails (the
function runs eagerly, saying so). The setting changes on the layer object itself while
gpe traces, on the tracing thread: another thread calling the same layer at that moment
would run it unrolled too (the same results, as above).
"""
from __future__ import annotations

import contextlib
import threading
import weakref

_layers: "weakref.WeakSet" = weakref.WeakSet()
_lock = threading.Lock()


def register(layer) -> None:
    """A Keras RNN layer that is not unrolled, which a TF part may call."""
    with _lock:
        _layers.add(layer)


@contextlib.contextmanager
def unrolled():
    """Every registered layer unrolled while the block runs (a trace), then as it was."""
    with _lock:
        flipped = [layer for layer in list(_layers) if not layer.unroll]
        for layer in flipped:
            layer.unroll = True
    try:
        yield
    finally:
        with _lock:
            for layer in flipped:
                layer.unroll = False
