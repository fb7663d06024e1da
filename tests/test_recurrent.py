"""A Keras recurrent layer (SimpleRNN, LSTM, GRU: not unrolled) in a step runs in the
graph, traced unrolled (tfprog/recurrent.py). Traced as Keras writes it, its loop is a
While, whose gradient adds the weights' per-step gradients one step at a time where eager's
tape adds them in one AddN: the gradients differed from eager's in the last bits (rel 8e-8
in aymericdamien's dynamic_rnn, 4e-7 in TF's text generation; in the attention tutorial
Adam turned that noise in a zero gradient into rel 8), so such steps ran eagerly. Unrolled,
the step ops are eager's and so are the sums, bit for bit."""
import numpy as np
import pytest
import tensorflow as tf

import gpe

X = tf.constant(np.random.RandomState(0).rand(16, 12, 1).astype(np.float32))


def _grads(layer):
    def grads(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(x))
        return tape.gradient(loss, layer.trainable_variables)
    return grads


@pytest.mark.timeout(120)
@pytest.mark.parametrize("make", [
    lambda: tf.keras.layers.SimpleRNN(8),
    lambda: tf.keras.Sequential([tf.keras.layers.LSTM(8)])])
def test_a_keras_recurrent_layer_in_a_step_runs_in_the_graph_as_eager_sums(make):
    tf.keras.utils.set_random_seed(0)
    layer, x = make(), X  # (12 steps: at 6 a While's gradient happens to add as eager)
    want = [g.numpy() for g in _grads(layer)(x)]
    sliced = gpe.function(_grads(layer), adaptive=False)
    for _ in range(4):
        got = [g.numpy() for g in sliced(x)]
        assert all(np.array_equal(a, b) for a, b in zip(want, got))
    stats = sliced.stats()
    assert stats["graph_calls"] == 1, stats
    assert all(not getattr(sub, "unroll", False) for sub in layer._flatten_layers()), \
        "the layers are set back after the trace"


@pytest.mark.timeout(120)
def test_an_unrolled_recurrent_layer_runs_in_the_graph():
    """Unrolled, Keras runs the steps as straight-line ops both ways: the same sums."""
    tf.keras.utils.set_random_seed(0)
    layer = tf.keras.layers.SimpleRNN(8, unroll=True)
    want = [g.numpy() for g in _grads(layer)(X)]
    sliced = gpe.function(_grads(layer), adaptive=False)
    for _ in range(4):
        got = [g.numpy() for g in sliced(X)]
        assert all(np.array_equal(a, b) for a, b in zip(want, got))
    assert sliced.stats()["graph_calls"] == 1, sliced.stats()


def test_the_layers_a_wrapper_holds_are_traced_unrolled_too():
    """A Bidirectional's forward and backward layers are met in its tree: each traced
    unrolled, and set back after (checked on the layers, no trace needed here)."""
    from gpe.host.facts import oracle
    from gpe.tfprog import recurrent
    layer = tf.keras.layers.Bidirectional(tf.keras.layers.GRU(4))
    layer(X[:2, :3])
    oracle.classify(layer)
    inner = [layer.forward_layer, layer.backward_layer]
    with recurrent.unrolled():
        assert all(sub.unroll for sub in inner)
    assert not any(sub.unroll for sub in inner)
