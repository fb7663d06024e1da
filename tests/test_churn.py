"""Never much slower than eager: a function whose call key changes on every call (a tensor
an object keeps from its last call; a counter in a dict argument, until such counters were
sent) ran every call as a profile call or a fresh build, 2-80x eager's time for ever (TF's
optimizer guide's Momentum; d2l's yogi). After CHURN new keys in a row, none met again, it
runs eagerly, saying why."""
import numpy as np
import pytest
import tensorflow as tf

import gpe
from gpe.host.call.function import CHURN

pytestmark = pytest.mark.timeout(240)


def yogi_like(params, grads, hyperparams):
    for p, g in zip(params, grads):
        p.assign_sub(hyperparams["lr"] * g / (1 - 0.9 ** hyperparams["t"]))
    hyperparams["t"] += 1


def test_a_counter_in_a_dict_argument_is_sent_once_it_keeps_changing():
    """d2l's yogi: `hyperparams['t']`, new at each call, was folded into the call key (a
    new key each call: profiled until the churn bound sent the function eagerly). It is
    sent as a value once it keeps changing, as an int argument is, and the calls after
    run sliced on one variant."""
    results = {}
    for way in ("eager", "gpe"):
        w, hp = tf.Variable(tf.ones(3)), {"lr": 0.01, "t": 1}
        # (adaptive=False: the eager calls counted are the churn's, not timed ones)
        fn = gpe.function(yogi_like, adaptive=False) if way == "gpe" else yogi_like
        for _ in range(30):
            fn([w], [tf.ones(3)], hp)
        results[way] = (w.numpy(), hp["t"])
        if way == "gpe":
            stats = fn.stats()
    np.testing.assert_array_equal(results["eager"][0], results["gpe"][0])
    assert results["eager"][1] == results["gpe"][1] == 31
    assert stats["graph_calls"] >= 15 and stats["eager_calls"] <= CHURN + 4, stats
    assert not fn.plain and stats["variants_built"] == [
        "params: list of 1 (a tf.Variable), grads: list of 1 (tensor float32(3)), "
        "hyperparams: dict (lr: a float, t: a int)"], stats


class Momentum(tf.Module):
    """tf-docs optimizers_core: keeps the last call's tensor in an attribute."""

    def __init__(self, learning_rate=1e-2, momentum=0.7):
        self.learning_rate, self.momentum, self.change = learning_rate, momentum, 0.

    def apply_gradients(self, grads, variables):
        for grad, var in zip(grads, variables):
            curr_change = self.learning_rate * grad + self.momentum * self.change
            var.assign_sub(curr_change)
            self.change = curr_change


def test_a_tensor_kept_on_an_object_stops_rebuilding():
    values = {}
    for way in ("eager", "gpe"):
        x, opt = tf.Variable(2.0), Momentum()
        step = gpe.function(opt.apply_gradients) if way == "gpe" else opt.apply_gradients
        for _ in range(40):
            step([tf.constant(1.0)], [x])
        if way == "gpe":
            before = step.stats()
        for _ in range(20):
            step([tf.constant(1.0)], [x])
        values[way] = float(x)
    stats = step.stats()
    assert values["gpe"] == values["eager"]
    # builds stop within CHURN new keys (each profiled, then built and run once): the
    # last 20 calls ran eagerly, none profiled or sliced
    assert before["profile_calls"] + before["graph_calls"] <= 3 * CHURN, before
    assert stats["eager_calls"] - before["eager_calls"] == 20
    assert (stats["profile_calls"], stats["graph_calls"]) == \
        (before["profile_calls"], before["graph_calls"])
    assert any("none met again" in r and "self.change" in r for r in stats["fallbacks"])


W = tf.Variable(tf.ones((3, 1)))


def step_logging_losses(x, losses):
    with tf.GradientTape() as tape:
        l = tf.reduce_sum(tf.matmul(x, W) ** 2)
    W.assign_sub(0.01 * tape.gradient(l, W))
    losses.append(l)  # (a tensor: the list grows by one at every call)


def test_a_list_argument_the_step_only_appends_to_is_not_in_the_key():
    """The key described a list argument by its items (a list holding tensors may be read
    by the TF part): one the step only appends a tensor to (`losses.append(l)`, TF's
    quickstart, an outlined training loop's `batch_losses`) made a new key at every call,
    and the step ran eagerly after CHURN of them. Such a list is described by its type."""
    results = {}
    for way in ("eager", "gpe"):
        W.assign(tf.ones((3, 1)))
        fn = gpe.function(step_logging_losses, adaptive=False) if way == "gpe" \
            else step_logging_losses
        losses = []
        for k in range(12):
            fn(tf.ones((2, 3)) * (k % 3), losses)
        results[way] = (W.numpy(), [float(l) for l in losses], tf.reduce_mean(losses).numpy())
        if way == "gpe":
            stats = fn.stats()
    for a, b in zip(results["eager"], results["gpe"]):
        np.testing.assert_array_equal(a, b)
    assert stats["variants"] == 1 and not stats["fallbacks"], stats
    assert stats["graph_calls"] == 12 - stats["profile_calls"], stats
