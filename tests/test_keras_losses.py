"""Losses a Keras layer adds in its `call` (`self.add_loss(...)`, an activity regularizer)
while the model call runs in the TF part: after each sliced call `model.losses` holds that
call's values, as eagerly (tfprog/losses.py, host/runtime/losses.py).

The Keras guide "Writing a training loop from scratch" trains exactly such a model
(`ActivityRegularizationLayer`, then `loss_value += sum(model.losses)` in the tape): its
step ran eagerly at every call under gpe (`self.add_loss` was host work)."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import gpe
from gpe.host.runtime.opcount import eager_ops, user_ops
from harness import check

RNG = np.random.default_rng(3)
X = tf.constant(RNG.normal(size=(8, 6)).astype(np.float32))
LABELS = tf.constant(RNG.integers(0, 4, size=(8,)))


class ActivityRegularizationLayer(keras.layers.Layer):
    def call(self, inputs):
        self.add_loss(1e-2 * tf.reduce_sum(inputs))
        return inputs


def guide_model(activity=None):
    """The guide's functional model (smaller), or one whose Dense layer has an activity
    regularizer instead of the user layer."""
    keras.utils.set_random_seed(5)
    inputs = keras.Input(shape=(6,))
    x = keras.layers.Dense(8, activation="relu", activity_regularizer=activity)(inputs)
    if activity is None:
        x = ActivityRegularizationLayer()(x)
    outputs = keras.layers.Dense(4)(x)
    return keras.Model(inputs=inputs, outputs=outputs)


def guide_step(model, metric):
    optimizer = keras.optimizers.SGD(learning_rate=1e-2)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss_value = loss_fn(y, logits)
            loss_value += sum(model.losses)
        grads = tape.gradient(loss_value, model.trainable_weights)
        optimizer.apply_gradients(zip(grads, model.trainable_weights))
        metric.update_state(y, logits)
        return loss_value
    return train_step


def train(make_step, sliced: bool, batches: list):
    """Per step: the loss, and `model.losses` read after the call (outside it, as a
    program's logging does); at the end the weights and the metric; the sliced calls and
    the TF ops run on the host during them."""
    model, metric = make_step()
    step = guide_step(model, metric)
    target = gpe.function(step, profile_calls=1) if sliced else step
    seen, host_ops = [], {}
    for x, y in batches:
        before = target.stats()["graph_calls"] if sliced else 0
        with eager_ops() as counts:
            loss = target(x, y)
        seen.append((float(loss), [float(t) for t in model.losses]))
        if sliced and target.stats()["graph_calls"] > before:
            for op, n in user_ops(counts).items():
                host_ops[op] = host_ops.get(op, 0) + n
    end = [w.numpy() for w in model.weights] + [float(metric.result())]
    return seen, end, (target.stats()["graph_calls"] if sliced else None), host_ops


def batches(n):
    return [(X * (1.0 + 0.1 * i), LABELS) for i in range(n)]


@pytest.mark.parametrize("activity", [None, "l2"])
def test_the_guides_training_loop_runs_in_the_graph_and_model_losses_are_eagers(activity):
    def make():
        regularizer = keras.regularizers.L2(0.05) if activity else None
        return guide_model(regularizer), keras.metrics.SparseCategoricalAccuracy()
    eager_seen, eager_end, _, _ = train(make, False, batches(6))
    seen, end, graph_calls, host_ops = train(make, True, batches(6))
    assert seen == eager_seen  # losses and each step's model.losses, exactly
    assert all(np.array_equal(a, b) for a, b in zip(eager_end, end))
    assert graph_calls == 5 and not host_ops, (graph_calls, host_ops)
    assert all(len(losses) == 1 for _, losses in seen)


def test_host_code_reading_model_losses_in_the_step_keeps_it_eager():
    """The host replays a call's losses when the call ends: host code of the step that
    reads `.losses` after the model call would read the call before's, so that step is
    refused (runs eagerly, says why)."""
    def make(log):
        model = guide_model()
        step = guide_step(model, keras.metrics.SparseCategoricalAccuracy())

        def logged_step(x, y):
            loss = step(x, y)
            log.append(len(model.losses))
            return loss
        return logged_step, {f"w{i}": w for i, w in enumerate(model.weights)}
    under = check(make, [(X, LABELS)] * 4, graph_calls=0)
    assert any(".losses" in reason for reason in under.target.stats()["fallbacks"])


def test_a_step_that_raises_before_or_after_the_model_call_leaves_eagers_losses():
    """A host exception after the TF part ran the model call (the call is cut short):
    the host waits for the graph and replays the losses its queues hold; one raised
    before the model call leaves the losses of the call before. Next calls go on."""
    def make(log):
        model = guide_model()
        optimizer = keras.optimizers.SGD(learning_rate=1e-2)

        def train_step(x, first, then):
            if float(tf.reduce_max(x)) > first:  # host decision before the model call
                raise ValueError("batch too large")
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x))) + sum(model.losses)
            grads = tape.gradient(loss, model.trainable_weights)
            optimizer.apply_gradients(zip(grads, model.trainable_weights))
            if float(loss) > then:  # host decision after it
                raise ValueError(f"loss {float(loss):.4f} over {then}")
            return loss
        return model, train_step

    big = 1e9
    calls = [(X, big, big), (X * 1.5, big, big), (X * 2.0, -big, big), (X * 0.5, big, big),
             (X * 3.0, big, -big), (X * 0.7, big, big), (X * 0.9, -big, big),
             (X * 1.1, big, big)]

    def run(sliced):
        model, step = make(None)
        target = gpe.function(step, profile_calls=1) if sliced else step
        seen = []
        for args in calls:
            try:
                result = float(target(*args))
            except ValueError as exc:
                result = str(exc)
            seen.append((result, [float(t) for t in model.losses]))
        return seen, [w.numpy() for w in model.weights], target

    eager_seen, eager_weights, _ = run(False)
    seen, weights, target = run(True)
    assert seen == eager_seen
    assert all(np.array_equal(a, b) for a, b in zip(eager_weights, weights))
    assert sum(isinstance(r, str) for r, _ in seen) == 3
    assert target.stats()["graph_calls"] == 7, (target.stats()["fallbacks"], target.stats())


def test_a_loss_added_inside_a_tensor_branch_keeps_the_step_eager():
    """Whether a loss added inside a `tf.cond` of the TF part was added is the graph's: the
    host could not replay it, so the step runs eagerly (says why), as eager would."""
    def make(log):
        model = guide_model()

        def step(x):
            if tf.reduce_sum(x) > 0.0:
                out = tf.reduce_sum(model(x)) + sum(model.losses)
            else:
                out = tf.reduce_sum(x)
            return out
        return step, {f"w{i}": w for i, w in enumerate(model.weights)}
    under = check(make, [(X,), (-X,), (X * 2.0,), (X,)], graph_calls=0)
    assert any("inside a branch" in reason for reason in under.target.stats()["fallbacks"])


def test_losses_read_before_the_model_call_keep_the_step_eager():
    """`model.losses` read before the model call holds the call before's values: traced,
    the TF part would keep those of the call it was traced after. Refused."""
    def make(log):
        model = guide_model()
        optimizer = keras.optimizers.SGD(learning_rate=1e-2)

        def step(x):
            with tf.GradientTape() as tape:
                before = sum(model.losses)
                loss = tf.reduce_mean(tf.square(model(x))) + before
            grads = tape.gradient(loss, model.trainable_weights)
            optimizer.apply_gradients(zip(grads, model.trainable_weights))
            return loss
        return step, {f"w{i}": w for i, w in enumerate(model.weights)}
    under = check(make, [(X * (1.0 + i),) for i in range(5)], graph_calls=0)
    assert any("is read before" in reason for reason in under.target.stats()["fallbacks"])
