"""What a user's layer reads from itself when its `call` is traced in the TF part (a flag
its `if` folds, the sublayers it calls) is guarded by the caller's call key, as the
caller's own chains are: a flag flipped between calls, or a sublayer replaced, runs that
call eagerly and builds another variant; a step that flips the flag itself before calling
the layer keeps the call on the host. Before, the trace froze them: d2l's dropout models
(`if self.training:` in `forward`) computed every sliced call with the flag the build saw.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from harness import differential

X = tf.constant(np.random.default_rng(0).normal(size=(4, 5)).astype(np.float32))


class Halving(keras.Model):
    """d2l's DropoutMLPScratch in small: `if self.training:` in `call`."""

    def __init__(self):
        super().__init__()
        self.lin1 = keras.layers.Dense(8, activation="relu")
        self.lin2 = keras.layers.Dense(3)
        self.training = True

    def call(self, x):
        h = self.lin1(x)
        if self.training:
            h = h * 0.5
        return self.lin2(h)


class Scaled(tf.Module):
    """A tf.Module whose `__call__` branches on its own flag (TF Core's guides' shape)."""

    def __init__(self):
        super().__init__()
        self.w = tf.Variable(tf.ones((5, 2)))
        self.double = False

    def __call__(self, x):
        y = x @ self.w
        if self.double:
            y = y * 2.0
        return y


def built_model():
    keras.utils.set_random_seed(3)
    net = Halving()
    net(X)
    return net


def test_a_flag_flipped_between_calls_is_guarded():
    def program(wrap, log):
        net = built_model()

        def loss(x):
            return tf.reduce_sum(net(x))
        loss = wrap(loss)
        results = []
        for i in range(10):
            net.training = i < 5
            results.append(loss(X))
        return results, {"w": net.lin1.kernel}
    (step,) = differential(program)
    stats = step.stats()
    assert stats["graph_calls"] == 9, stats  # all but the profile call (the flip rebuilds)
    assert list(stats["guard_failures"]) == ["net.training: expected True, got False"]


def test_a_submodule_replaced_between_calls_is_guarded():
    def program(wrap, log):
        outer = Wrapping()

        def out(x):
            return tf.reduce_sum(outer(x))
        out = wrap(out)
        results = [out(X) for _ in range(3)]
        outer.inner = Scaled()
        outer.inner.w.assign(tf.fill((5, 2), 3.0))
        results += [out(X) for _ in range(3)]
        return results, {}
    (step,) = differential(program)
    stats = step.stats()
    assert stats["graph_calls"] == 4, stats  # the new submodule is profiled again
    assert any(g.startswith("outer.inner") for g in stats["guard_failures"]), stats


class Wrapping(tf.Module):
    def __init__(self):
        super().__init__()
        self.inner = Scaled()

    def __call__(self, x):
        return self.inner(x) + 1.0


def test_a_module_flag_flipped_between_calls_is_guarded():
    def program(wrap, log):
        mod = Scaled()

        def out(x):
            return tf.reduce_sum(mod(x))
        out = wrap(out)
        results = []
        for i in range(6):
            mod.double = i >= 3
            results.append(out(X))
        return results, {"w": mod.w}
    (step,) = differential(program)
    assert step.stats()["graph_calls"] == 5, step.stats()


def test_a_step_that_sets_the_flag_before_calling_the_layer_matches_eager():
    """d2l's Trainer.fit_epoch: `self.model.training = True`, the training loop, `= False`,
    the validation loop. The key is checked at entry, so the model's calls stay on the
    host (before: traced with the flag the build saw, every sliced call wrong)."""
    def program(wrap, log):
        net = built_model()
        opt = keras.optimizers.SGD(0.1)

        def fit_epoch(x):
            net.training = True
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(net(x)))
            grads = tape.gradient(loss, net.trainable_variables)
            opt.apply_gradients(zip(grads, net.trainable_variables))
            net.training = False
            return loss, tf.reduce_sum(net(x))
        fit_epoch = wrap(fit_epoch)
        return [fit_epoch(X) for _ in range(4)], {"w": net.lin1.kernel}
    (step,) = differential(program)
    (reason,) = step.stats()["fallbacks"]
    assert "its trace would freeze `net.training`, which changes between or during " \
        "calls" in reason, reason


class Damped(keras.layers.Layer):
    """A layer reading a Python number of its own in `call` (not a flag: a factor)."""

    def __init__(self):
        super().__init__()
        self.rate = 0.5

    def call(self, x):
        return x * self.rate


@pytest.mark.parametrize("number", [False, True])
def test_what_a_layer_reads_through_a_helper_is_guarded(number):
    """`forward(x)` reaches `net` through its closure: the flag `net(x)` folds was guarded
    nowhere, and after the flip every sliced call used the flag the build saw (a wrong
    answer; the helper's reads of what it calls are its namespace's paths now, guarded by
    the caller). With `number`, also a layer reading a Python number of its own in `call`
    (`x * self.rate`; TF's style-transfer model reads `self.num_style_layers`): traced
    with it and guarded as a flag is (it was host work as a whole)."""
    def program(wrap, log):
        net, layer = built_model(), Damped()
        layer(X)

        def forward(x):
            return tf.reduce_sum(net(x))

        def forward_both(x):
            return tf.reduce_sum(net(x)) + tf.reduce_sum(layer(x))
        helper = forward_both if number else forward

        def step(x):
            return helper(x) * 2.0
        step = wrap(step)
        results = []
        for i in range(10):
            net.training = i < 5
            layer.rate = 0.5 if i < 7 else 2.0
            results.append(step(X))
        return results, {}
    (step,) = differential(program)
    stats = step.stats()
    assert stats["graph_calls"] == 9, stats  # all but the profile call (the changes rebuild)
    assert len(stats["guard_failures"]) == 1 + number, stats
