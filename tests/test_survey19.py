"""Findings of the corpus survey of public TF2 programs (session 19: /work/corpus, outside
the repository, programs sv19_*): each in their shape, compared with eager."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import gpe

V = tf.Variable(1.0)
W = tf.Variable(0.0)


def epochs(sizes):
    """handson-ml2's custom loop (chapter 12) in short: `for metric in metrics: metric(y,
    y_pred)` in the step loop, `for metric in [mean_loss] + metrics: metric.reset_state()`
    after it, host work before it. The TF part follows both loops; the step loop's gate sent
    `i` (read by TF work in the nested loop, bound later by host work) before any
    iteration had bound it: UnboundLocalError, under gpe only."""
    out = []
    for size in sizes:
        print("size", len(size))
        for step in range(2):
            with tf.GradientTape() as tape:
                loss = V * V
            V.assign_sub(0.1 * tape.gradient(loss, V))
            for i in range(len(size)):
                W.assign_add(loss * i)
        out.append(W.numpy())
        for i in range(len(size)):
            out.append(i)
    return out


def _reset():
    V.assign(1.0)
    W.assign(0.0)


@pytest.mark.timeout(120)
def test_a_nested_loop_target_first_bound_in_the_loop_is_not_sent_before_it(capsys):
    _reset()
    expected = [epochs([[1, 2], [3]]) for _ in range(5)]
    printed, state = capsys.readouterr().out, (V.numpy(), W.numpy())
    _reset()
    f = gpe.function(epochs, adaptive=False)
    got = [f([[1, 2], [3]]) for _ in range(5)]
    assert got == expected
    assert capsys.readouterr().out == printed
    assert (V.numpy(), W.numpy()) == state
    assert f.stats()["graph_calls"] >= 2


class Total:
    """A metric in a plain class (keras.metrics.Mean's shape: a call, result, a reset)."""

    def __init__(self):
        self.total = tf.Variable(0.0)

    def __call__(self, x):
        self.total.assign_add(x)

    def reset_state(self):
        self.total.assign(0.0)


METRICS = [Total(), Total()]


def train(epochs, steps):
    """handson-ml2's custom loop's shape, called once: its step loop's body binds `metric`
    (`for metric in metrics: metric(...)`), and the epoch's `for metric in ...:
    metric.reset_state()` reads it after, bound by that loop itself."""
    history = []
    for epoch in range(epochs):
        for step in range(steps):
            with tf.GradientTape() as tape:
                loss = V * V
            V.assign_sub(0.1 * tape.gradient(loss, V))
            for metric in METRICS:
                metric(loss)
        history.append(METRICS[0].total.numpy())
        for metric in METRICS:
            metric.reset_state()
    return history


@pytest.mark.timeout(120)
def test_a_loop_reading_its_own_target_after_the_step_loop_lets_that_loop_be_outlined():
    _reset()
    expected, state = train(2, 6), V.numpy()
    _reset()
    f = gpe.function(train, adaptive=False)
    assert f(2, 6) == expected and V.numpy() == state
    (body,) = f.builder.outlined.bodies.values()  # outlined before: `metric` read after it
    assert body.stats()["graph_calls"] >= 3, body.stats()


class DNN(tf.Module):
    """eat_tensorflow2_in_30_days' low-level DNN (3-1): a tf.Module whose __call__,
    loss_func (and metric_func) are tf.functions with input signatures."""

    def __init__(self):
        self.w = tf.Variable([[0.5], [-0.25]])
        self.b = tf.Variable([[0.1]])

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32)])
    def __call__(self, x):
        return tf.nn.sigmoid(x @ self.w + self.b)

    @tf.function(input_signature=[tf.TensorSpec([None, 1], tf.float32),
                                  tf.TensorSpec([None, 1], tf.float32)])
    def loss_func(self, y_true, y_pred):
        print("tracing loss_func")
        return tf.reduce_mean(tf.square(y_true - y_pred))


@tf.function
def halved(g):
    print("tracing halved")
    return 0.5 * g


def dnn_step(model, features, labels):
    with tf.GradientTape() as tape:
        predictions = model(features)
        loss = model.loss_func(labels, predictions)
    grads = tape.gradient(loss, model.trainable_variables)
    for p, g in zip(model.trainable_variables, grads):
        p.assign(p - halved(g))
    return loss


@pytest.mark.timeout(120)
def test_a_tf_function_method_called_in_the_tape_runs_in_the_graph(capsys):
    x = tf.constant([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]])
    y = tf.constant([[1.0], [0.0], [1.0]])
    runs = []  # eagerly twice (the second as gpe's: `halved` traced already), then gpe
    for wrap in (lambda f: f, lambda f: f, lambda f: gpe.function(f, adaptive=False)):
        model, step = DNN(), wrap(dnn_step)  # (a fresh model: its functions trace again)
        losses = [step(model, x, y).numpy() for _ in range(6)]
        runs.append((losses, [v.numpy().tolist() for v in model.trainable_variables],
                     capsys.readouterr().out))
    assert runs[1] == runs[2] and runs[0][:2] == runs[2][:2]
    # `model.loss_func(...)` was host work (a tf.function classified as plain Python), so
    # its tensor, made in the tape, made every call eager
    assert step.stats()["graph_calls"] == 3, step.stats()


def q_step(qnet, states, next_states, rewards):
    """handson-ml2's DQN training_step in small: the targets from `model.predict` (NumPy,
    on the host), the update in a tape."""
    next_q = qnet.predict(next_states, verbose=0)
    target = rewards + 0.9 * np.max(next_q, axis=1)
    with tf.GradientTape() as tape:
        q = tf.reduce_sum(qnet(states), axis=1)
        loss = tf.reduce_mean(tf.square(target - q))
    grads = tape.gradient(loss, qnet.trainable_variables)
    for v, g in zip(qnet.trainable_variables, grads):
        v.assign_sub(0.1 * g)
    return loss


@pytest.mark.timeout(120)
def test_keras_predict_in_a_step_runs_on_the_host_and_the_rest_in_the_graph():
    rng = np.random.default_rng(0)
    states, next_states = (rng.normal(size=(8, 4)).astype(np.float32) for _ in range(2))
    rewards = rng.normal(size=(8,)).astype(np.float32)
    runs = []
    for wrap in (lambda f: f, lambda f: gpe.function(f, adaptive=False)):
        keras.utils.set_random_seed(0)
        qnet, step = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)]), wrap(q_step)
        losses = [step(qnet, states, next_states, rewards).numpy() for _ in range(4)]
        runs.append((losses, [v.numpy().tolist() for v in qnet.trainable_variables]))
    assert runs[0] == runs[1]
    # `qnet.predict` was TF work (a Keras model's method): tracing it failed, every call eager
    assert step.stats()["graph_calls"] == 1, step.stats()


BATCHES = tf.data.Dataset.from_tensor_slices(
    np.arange(16, dtype=np.float32).reshape(8, 2)).batch(2)
NOISE = NET = OPT = None


class Net(keras.Model):
    """dragen1860's VAE in small: a subclassed model drawing from a tf.random.Generator."""

    def __init__(self):
        super().__init__()
        self.fc = keras.layers.Dense(2, kernel_initializer="ones")

    def noisy(self, h):
        return h + NOISE.normal(h.shape)

    def call(self, x):
        return self.noisy(self.fc(x))


def fit(epochs):
    """The VAE's loop (dragen1860 lesson22, called once): every statement around the step
    loop is host work, the step loop's body holds the TF work."""
    history = []
    for epoch in range(epochs):
        for step, x in enumerate(BATCHES):
            x = tf.reshape(x, [-1, 2])
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(NET(x) - x))
            grads = tape.gradient(loss, NET.trainable_variables)
            OPT.apply_gradients(zip(grads, NET.trainable_variables))
        history.append(float(loss))
    return history


@pytest.mark.timeout(120)
def test_a_function_whose_only_tf_work_is_an_outlined_loop_runs_its_steps_in_the_graph():
    global NOISE, NET, OPT
    runs = []
    for wrap in (lambda f: f, lambda f: gpe.function(f, adaptive=False)):
        NOISE, NET = tf.random.Generator.from_seed(1), Net()
        OPT, f = keras.optimizers.SGD(0.01), wrap(fit)
        NET.build((None, 2))
        runs.append((f(3), [v.numpy().tolist() for v in NET.trainable_variables]))
    assert runs[0] == runs[1]
    # the plan had no TF statement of its own: refused as "no TF work", its loop not outlined
    (body,) = f.builder.outlined.bodies.values()
    assert body.stats()["graph_calls"] >= 3, body.stats()


LEAKED = None
SEEN = []


def read_leaked():
    SEEN.append(float(LEAKED))


def leaky_function(a):
    """tf.function's guide's leaky_function (its "Known issues"): TF work rebinding a global."""
    global LEAKED
    LEAKED = a + 1.0
    read_leaked()
    return a + 2.0


@pytest.mark.timeout(120)
def test_a_global_rebound_by_tf_work_is_the_hosts_after_the_call():
    global LEAKED
    runs = []
    for wrap in (lambda f: f, lambda f: gpe.function(f, adaptive=False)):
        LEAKED, step = None, wrap(leaky_function)
        SEEN.clear()
        out = [(float(step(tf.constant(float(r)))), float(LEAKED)) for r in range(5)]
        runs.append((out, list(SEEN)))
    # the sliced calls left LEAKED (and what the helper read) at the last profile call's 3.0
    assert runs[0] == runs[1]
    assert step.stats()["graph_calls"] == 2, step.stats()


def make_tripler():
    """A closure rebinding its enclosing function's name (`nonlocal y; y = a * 3.0`)."""
    y = None

    def tripler(a):
        nonlocal y
        y = a * 3.0
        return a + 1.0

    def read():
        return y

    return tripler, read


@pytest.mark.timeout(120)
def test_a_nonlocal_rebound_by_tf_work_is_sliced_and_seen_after_the_call():
    runs = []
    for wrap in (lambda f: f, lambda f: gpe.function(f, adaptive=False)):
        fn, read = make_tripler()
        step = wrap(fn)
        runs.append([(float(step(tf.constant(float(r)))), float(read())) for r in range(5)])
    assert runs[0] == runs[1]
    # refused before as "source-changed": its def alone does not compile (`nonlocal y`)
    assert step.stats()["graph_calls"] == 2, step.stats()
