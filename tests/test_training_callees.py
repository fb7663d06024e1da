"""Training steps that call the user's own helpers on model objects (issue 12, item 1).

A model class with methods besides `call` (`model.encode(x)`, `model.sample(...)`) and a
module-level helper that takes the model as an argument (`elbo_loss(net, x)`): the slicer
analyses the method or helper for that object and, when it is all TF work, the call stays
in the TF part as the callee's own FunctionDef (the object captured by the caller's part,
guarded by identity). A helper or method with host work in it keeps its call on the host.
"""
from __future__ import annotations

import math
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import gpe
from harness import check

FEATURES, CODE = 6, 2


class Autoencoder(keras.Model):
    """No `call` of its own: used only through its methods."""

    def __init__(self, seed):
        super().__init__()
        self.inner = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(2 * CODE)])
        self.outer = keras.Sequential([keras.Input((CODE,)), keras.layers.Dense(FEATURES)])
        self.draws = tf.random.Generator.from_seed(seed)

    def encode(self, x):
        mean, logvar = tf.split(self.inner(x), num_or_size_splits=2, axis=1)
        return mean, logvar

    def sample(self, mean, logvar):
        return self.draws.normal(shape=tf.shape(mean)) * tf.exp(0.5 * logvar) + mean

    def decode(self, z, apply_sigmoid=False):  # as the TF CVAE tutorial's
        logits = self.outer(z)
        if apply_sigmoid:
            return tf.sigmoid(logits)
        return logits


class ChattyAutoencoder(Autoencoder):
    """The same model, whose `decode` also prints on the host."""

    def decode(self, z, apply_sigmoid=False):
        print("decode")
        return self.outer(z)


def gaussian_log_density(sample, mean, logvar, axis=1):
    log_2pi = math.log(2.0 * math.pi)
    return tf.reduce_sum(-0.5 * ((sample - mean) ** 2.0 * tf.exp(-logvar) + logvar + log_2pi),
                         axis=axis)


def tf_log_density(sample, mean, logvar, raxis=1):  # the tutorial's own spelling
    log2pi = tf.math.log(2. * np.pi)
    return tf.reduce_sum(-.5 * ((sample - mean) ** 2. * tf.exp(-logvar) + logvar + log2pi),
                         axis=raxis)


def elbo_loss(net, x):
    mean, logvar = net.encode(x)
    z = net.sample(mean, logvar)
    recon = tf.reduce_sum(tf.square(net.decode(z) - x), axis=1)
    return tf.reduce_mean(recon - gaussian_log_density(z, 0.0, 0.0)
                          + tf_log_density(z, mean, logvar))


def make_program(model_class):
    def make(log):
        keras.utils.set_random_seed(0)
        net = model_class(seed=3)
        rng = np.random.RandomState(1)
        x = tf.constant(rng.normal(size=(5, FEATURES)).astype(np.float32))
        net.outer(net.inner(x)[:, :CODE])  # builds the weights
        opt = keras.optimizers.Adam(0.01)

        def train_step(net, x, opt):
            with tf.GradientTape() as tape:
                loss = elbo_loss(net, x)
            grads = tape.gradient(loss, net.trainable_variables)
            opt.apply_gradients(zip(grads, net.trainable_variables))
            return loss
        state = {f"w{i}": v for i, v in enumerate(net.weights)}
        state["draws"] = net.draws.state
        return train_step, state, [(net, x, opt)] * 6
    return make


def test_a_helper_taking_the_model_and_its_methods_run_in_the_graph():
    under = check(make_program(Autoencoder), None, graph_calls=5)
    assert under.target.stats()["fallbacks"] == {}


def test_a_method_with_host_work_keeps_the_call_on_the_host():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpe.GpeWarning)
        under = check(make_program(ChattyAutoencoder), None, graph_calls=0)
    assert under.stdout == "decode\n" * 6  # once per call, as eagerly


class Scaled(keras.Model):
    """A method reading a Python number the program changes between steps."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)
        self.scale = 1.0

    def score(self, x):
        return self.dense(x) * self.scale


def scaled_loss(net, x):
    return tf.reduce_mean(tf.square(net.score(x)))


def test_a_python_number_read_by_a_method_is_never_frozen():
    def make(log):
        keras.utils.set_random_seed(0)
        net = Scaled()
        x = tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3) / 10)
        net.score(x)

        def step(net, x):
            loss = scaled_loss(net, x)
            net.scale = net.scale * 0.5  # a new value on every call
            return loss
        return step, {"w": net.dense.kernel}, [(net, x)] * 6
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpe.GpeWarning)
        # net.scale is folded into scaled_loss's part, guarded by value: each new value
        # breaks the guard (an eager call), then it keeps changing and the call runs on the
        # host, reading it every time; never a stale value
        check(make, None, graph_calls=5, host_ops_allowed=frozenset(
            {"ReadVariableOp", "MatMul", "AddV2", "Mul", "Square", "Mean"}))


# --- item 2: a plain object's `__call__` reading a rate the loop changes ---------------

class Schedule:
    def __init__(self):
        self.rate, self.keep = 0.1, 0.5


class TwoLayer:
    """Plain Python, no Keras: variables in a list, a Generator for dropout masks."""

    def __init__(self):
        rng = np.random.RandomState(0)
        self.w1 = tf.Variable(rng.normal(size=(3, 4)).astype(np.float32))
        self.w2 = tf.Variable(rng.normal(size=(4, 1)).astype(np.float32))
        self.variables = [self.w1, self.w2]
        self.noise = tf.random.Generator.from_seed(5)

    def __call__(self, x, keep):
        w1, w2 = self.variables
        h = tf.nn.relu(tf.matmul(x, w1))
        if keep < 1.0:
            h = h * tf.cast(self.noise.uniform(tf.shape(h)) < keep, tf.float32) / keep
        return tf.matmul(h, w2)


def schedule_program(keeps, rates):
    def make(log):
        model, hp = TwoLayer(), Schedule()
        x = tf.constant(np.linspace(-1, 1, 15, dtype=np.float32).reshape(5, 3))

        def train_step(model, hp, x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x, hp.keep)))
            grads = tape.gradient(loss, model.variables)
            for v, g in zip(model.variables, grads):
                v.assign_sub(hp.rate * g)
            return loss

        def set_then_step(model, hp, x, keep, rate):
            hp.keep, hp.rate = keep, rate
            return train_step(model, hp, x)
        state = {"w1": model.w1, "w2": model.w2, "noise": model.noise.state}
        calls = [(model, hp, x, k, r) for k, r in zip(keeps, rates)]
        return set_then_step, state, calls, train_step
    return make


def run_schedule(keeps, rates):
    """eager vs gpe.function(train_step): the loop outside sets the schedule's numbers."""
    results = {}
    for sliced in (False, True):
        _, state, calls, step = schedule_program(keeps, rates)(None)
        target = gpe.function(step, adaptive=False) if sliced else step
        out = []
        for model, hp, x, keep, rate in calls:
            hp.keep, hp.rate = keep, rate
            out.append(float(target(model, hp, x)))
        results[sliced] = (out, {k: v.numpy() for k, v in state.items()}, target)
    (eager, eager_state, _), (under, under_state, target) = results[False], results[True]
    assert eager == under
    for name in eager_state:
        np.testing.assert_array_equal(eager_state[name], under_state[name], err_msg=name)
    return target.stats()


def test_a_rate_changed_every_step_is_sent_and_a_flag_changed_rarely_is_folded():
    keeps = [1.0] * 10 + [0.8] * 10 + [0.6] * 10 + [1.0] * 10
    rates = [0.01 * (i + 1) for i in range(40)]  # a new learning rate on every step
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpe.GpeWarning)
        stats = run_schedule(keeps, rates)
    assert stats["fallbacks"] == {}, stats
    assert stats["graph_calls"] >= 25, stats  # folded keep: a variant per value
    assert not any("keep" in r for r in stats["guard_failures"] if "1.0" in r.split("got")[1]), \
        stats  # the variant for keep=1.0 built first is taken again at the end


def test_a_rate_annealed_every_few_steps_is_sent_and_its_branch_guarded():
    """lr_schedule_object's dropout: a number on an object that the callee branches on
    (`if keep < 1.0`), changed every 6 steps. Its second value gets a folded variant built
    from the first one's observations (no eager call); from its third it is sent as a
    value (one profile call of the new plan): one variant takes every later value, the call key holding the branch's outcome
    (`keep < 1.0`), so the step back to 1.0 gets a variant of its own (one profile call)
    and 0.3 after it takes the first one again."""
    keeps = [1.0] * 6 + [0.8] * 6 + [0.6] * 6 + [0.4] * 6 + [1.0] * 6 + [0.3] * 6
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpe.GpeWarning)
        stats = run_schedule(keeps, [0.05] * len(keeps))  # identical to eager
    assert stats["fallbacks"] == {}, stats
    assert stats["guard_failures"] == {"hp.keep: expected 1.0, got 0.8": 1,
                                       "hp.keep: expected 0.8, got 0.6": 1,
                                       "hp.keep (`keep < 1.0`): expected True, got False": 1
                                       }, stats
    # 3 profile calls (folded 1.0), none for 0.8, 1 once sent (a new plan for the same
    # arguments), 1 for the other branch
    assert stats["eager_calls"] == stats["profile_calls"] == 5, stats
    assert stats["graph_calls"] == len(keeps) - 5 and stats["variants"] == 4, stats


def test_a_number_a_callee_uses_other_than_in_a_test_is_never_speculated():
    """`int(keep * 10)` inside the callee is a Python decision on the value that no test
    guards: once the number is sent, the callee is not TF work (the call runs eagerly
    rather than with the value seen when its TF part was built)."""
    def make(log):
        w, hp = tf.Variable([1.0, 2.0, 3.0]), Schedule()

        def scaled(x, keep):
            if keep > 0:
                return x * w[: int(keep * 10) % 3 + 1]
            return x * w

        def step(hp, x):
            return tf.reduce_sum(scaled(x, hp.keep))
        return step, hp
    results = {}
    for sliced in (False, True):
        step, hp = make(None)
        target = gpe.function(step, adaptive=False) if sliced else step
        out = []
        for keep in [0.1, 0.2, 0.1, 0.2, 0.3, 0.1, 0.2, 0.3]:
            hp.keep = keep
            out.append(target(hp, tf.constant(2.0)).numpy().tolist())
        results[sliced] = out
    assert results[True] == results[False]


def test_a_list_of_variables_on_an_object_is_guarded_by_its_elements():
    keeps, rates = [1.0] * 8, [0.05] * 8
    make = schedule_program(keeps, rates)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpe.GpeWarning)
        for sliced in (False, True):
            _, state, calls, step = make(None)
            target = gpe.function(step, adaptive=False) if sliced else step
            out = []
            for i, (model, hp, x, _, _) in enumerate(calls):
                if i == 5:  # the program swaps a variable in the list
                    model.variables[1] = tf.Variable(tf.ones([4, 1]))
                out.append(float(target(model, hp, x)))
            if sliced:
                assert out == expected, (out, expected)
                np.testing.assert_array_equal(model.variables[1].numpy(), final)
                assert any("model.variables" in r for r in target.stats()["guard_failures"])
            expected, final = out, model.variables[1].numpy()


# --- a loss a host call computes inside the tape, differentiated after it ---------------

def noisy_loss(w, x, *rest):
    print("loss")  # host work, in a callee not spliced (*rest): the call stays on the host
    return tf.reduce_sum(w * x)


def test_a_tensor_host_code_made_inside_a_tape_never_reaches_its_gradient_as_a_constant():
    def make(log):
        w = tf.Variable([1.0, -2.0])

        def step(x):
            with tf.GradientTape() as tape:
                loss = noisy_loss(w, x)
            grad = tape.gradient(loss, w, unconnected_gradients="zero")
            w.assign_sub(0.1 * grad)
            return loss
        return step, {"w": w}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpe.GpeWarning)
        # the TF part would receive `loss` as a value its tape never saw: zero gradients
        under = check(make, [(tf.constant([0.5, 1.5]),)] * 5, graph_calls=0)
    reasons = list(under.target.stats()["fallbacks"])
    assert any("`loss`" in r and "cannot cross" in r for r in reasons), reasons


# --- the static shape of a tensor argument (the Keras GAN guide's labels) ---------------

LATENT, HALF = 3, 4  # module-level sizes, read by the step as the guide reads batch_size


def test_the_static_shape_of_an_argument_stays_static_in_the_graph():
    def make(log):
        w = tf.Variable(np.linspace(-1, 1, LATENT * 2, dtype=np.float32).reshape(LATENT, 2))

        def step(real):
            labels = tf.concat([tf.ones((HALF, 1)), tf.zeros((real.shape[0], 1))], axis=0)
            labels += 0.05 * tf.ones(labels.shape)  # needs the static shape (HALF + n, 1)
            with tf.GradientTape() as tape:
                fake = tf.matmul(tf.ones((HALF, LATENT)), w)
                combined = tf.concat([fake, real], axis=0)
                loss = tf.reduce_mean(tf.square(tf.reduce_sum(combined, 1, True) - labels))
            w.assign_sub(0.1 * tape.gradient(loss, w))
            return loss
        real = tf.constant(np.arange(10, dtype=np.float32).reshape(5, 2) / 10)
        return step, {"w": w}, [(real,)] * 6
    # three profile calls: the module-level sizes sent when the call starts are folded
    # (seen the same each time), so every shape in the TF part is static, as eagerly
    check(make, None, graph_calls=3, profile_calls=3)


# --- the TF Core guide's shape: a tf.Module model, loss functions passed as arguments ----

class CoreMLP(tf.Module):
    def __init__(self):
        self.w = tf.Variable(np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2))

    @tf.function
    def __call__(self, x):
        return tf.matmul(x, self.w)


def squared_loss(y_pred, y):
    return tf.reduce_mean(tf.square(y_pred - y))


def absolute_loss(y_pred, y):
    return tf.reduce_mean(tf.abs(y_pred - y))


def test_a_loss_passed_as_an_argument_runs_in_the_graph_and_is_guarded_by_identity():
    def make(log):
        model = CoreMLP()
        x = tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3) / 10)
        y = tf.ones([4, 2])

        def train_step(x, y, loss, model):
            with tf.GradientTape() as tape:
                batch_loss = loss(model(x), y)
            model.w.assign_sub(0.1 * tape.gradient(batch_loss, model.w))
            return batch_loss
        calls = [(x, y, squared_loss, model)] * 4 + [(x, y, absolute_loss, model)] * 4
        return train_step, {"w": model.w}, calls
    under = check(make, None, graph_calls=6)  # the other loss: a new key, profiled once
    assert not under.target.stats()["fallbacks"]


def test_another_model_of_the_same_class_passed_as_an_argument_is_not_the_captured_one():
    def make(log):
        keras.utils.set_random_seed(2)
        first = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        second = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        opt = keras.optimizers.SGD(0.1)
        opt.build(first.trainable_variables + second.trainable_variables)
        x = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3))

        def step(model, x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x)))
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                    model.trainable_variables))
            return loss
        state = {"a": first.weights[0], "b": second.weights[0]}
        return step, state, [(first, x)] * 3 + [(second, x)] * 3 + [(first, x)] * 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpe.GpeWarning)
        check(make, None, graph_calls=6)  # one eager call: the guard on `model` failed


# --- a helper reads the batch size from its argument's shape (keras-io's WGAN-GP) -------

def mix(real, fake):
    alpha = tf.random.uniform([real.shape[0], 1], 0.0, 1.0)
    return real + alpha * (fake - real)


def gradient_penalty(critic, real, fake):
    mixed = mix(real, fake)
    with tf.GradientTape() as tape:
        tape.watch(mixed)
        score = critic(mixed)
    grads = tape.gradient(score, [mixed])[0]
    return tf.reduce_mean((tf.sqrt(tf.reduce_sum(tf.square(grads), axis=1)) - 1.0) ** 2)


def critic_program(penalty):
    def make(log):
        keras.utils.set_random_seed(5)
        critic = keras.Sequential([keras.Input((2,)), keras.layers.Dense(4, activation="tanh"),
                                   keras.layers.Dense(1)])
        opt = keras.optimizers.SGD(0.01)

        def critic_step(real):
            fake = tf.random.normal([real.shape[0], 2])
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(critic(fake)) - tf.reduce_mean(critic(real))
                loss += 10.0 * gradient_penalty(critic, real, fake)
            grads = tape.gradient(loss, critic.trainable_variables)
            opt.apply_gradients(zip(grads, critic.trainable_variables))
            return loss

        def mixed_step(real):
            fake = tf.random.normal([real.shape[0], 2])
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(critic(mix(real, fake)))
            grads = tape.gradient(loss, critic.trainable_variables)
            opt.apply_gradients(zip(grads, critic.trainable_variables))
            return loss
        step = critic_step if penalty else mixed_step
        return step, {f"w{i}": v for i, v in enumerate(critic.weights)}
    return make


REAL = tf.constant(np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2))


def test_a_helper_reading_its_arguments_static_shape_runs_in_the_graph():
    """`mix(real, fake)` builds its random mix with `real.shape[0]`. The caller's `real`
    has a shape the call key fixes, so the helper's `real.shape[0]` is a number there too
    (it made the helper host work: its result, made by host code inside the tape, kept
    every call eager). The random draws are eager's (seeded)."""
    check(critic_program(penalty=False), [(REAL,)] * 5)


@pytest.mark.xfail(strict=True, reason="open, not from the helper (with tf.shape(real)[0] "
                   "too): WGAN-GP's critic weights end an ulp from eager's; the gradient "
                   "penalty's second-order gradient is summed in another order")
def test_the_wgan_gp_critic_step_is_exact():
    check(critic_program(penalty=True), [(REAL,)] * 5)


# The TF guide "Custom training: walkthrough": `loss(model, x, y, training)` and
# `grad(model, inputs, targets)` whose tape calls `loss(model, inputs, targets,
# training=True)`. A call with a keyword argument was never judged as a callee: the loss
# ran on the host inside the tape, and every call of grad ran eagerly.
def walkthrough_loss(model, x, y, training):
    y_ = model(x, training=training)
    return keras.losses.sparse_categorical_crossentropy(y, y_, from_logits=True)


def scaled_loss_of(model, x, y, scale=1.0, shift=0.0):
    return tf.reduce_mean(tf.square(model(x) - y)) * scale + shift


@pytest.mark.parametrize("spelling", ["training=True", "scale and shift", "shift only"])
def test_a_helper_called_with_keyword_arguments_runs_in_the_graph(spelling):
    rng = np.random.default_rng(7)
    x = tf.constant(rng.normal(size=(8, 4)).astype(np.float32))
    y = tf.constant(rng.integers(0, 3, size=(8,)).astype(np.int32))

    def make(log):
        keras.utils.set_random_seed(3)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                                  keras.layers.Dense(3)])

        def grad(model, inputs, targets):
            with tf.GradientTape() as tape:
                loss_value = tf.reduce_mean(
                    walkthrough_loss(model, inputs, targets, training=True))
            return loss_value, tape.gradient(loss_value, model.trainable_variables)

        def grad_scaled(model, inputs, targets):
            with tf.GradientTape() as tape:
                loss_value = scaled_loss_of(model, inputs, targets, scale=2.0, shift=0.5)
            return loss_value, tape.gradient(loss_value, model.trainable_variables)

        def grad_shifted(model, inputs, targets):  # `scale` left to its default before a
            with tf.GradientTape() as tape:       # keyword: a host call
                loss_value = scaled_loss_of(model, inputs, targets, shift=0.5)
            return loss_value, tape.gradient(loss_value, model.trainable_variables)
        grad = {"training=True": grad, "scale and shift": grad_scaled,
                "shift only": grad_shifted}[spelling]
        targets = y if spelling == "training=True" else tf.cast(y, tf.float32)[:, None]
        calls = [(model, x * (1.0 + 0.1 * i), targets) for i in range(5)]
        return grad, {f"w{i}": w for i, w in enumerate(model.weights)}, calls
    if spelling == "shift only":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", gpe.GpeWarning)
            check(make, None, graph_calls=0)
    else:
        check(make, None)


def _rnn_program(log):
    """d2l's chapter 8 shape, as the book writes it: a list of variables passed around, a
    cell looping `for X in inputs` over a tensor's rows, gradient clipping reading
    `.numpy()`, a Python accumulator, the tape inside a loop over the batches."""
    rs = np.random.RandomState(0)
    params = [tf.Variable(rs.normal(0, 0.1, s).astype(np.float32))
              for s in [(5, 8), (8, 8), (8,), (8, 5), (5,)]]
    opt = keras.optimizers.SGD(0.1)

    def clip(grads, theta):
        norm = math.sqrt(sum(float(tf.reduce_sum(g ** 2).numpy()) for g in grads))
        return [g * theta / norm for g in grads] if norm > theta else grads

    def train_epoch(params, data):
        total = 0.0
        for X, Y in data:
            state = (tf.zeros((2, 8)),)
            with tf.GradientTape() as tape:
                y_hat, state = _rnn(X, state, params)  # (d2l's rnn, below)
                l = tf.reduce_mean((y_hat - Y) ** 2)
            grads = clip(tape.gradient(l, params), 1.0)
            opt.apply_gradients(zip(grads, params))
            total += float(l)
        log.append(total)
        return total

    return train_epoch, {f"p{i}": p for i, p in enumerate(params)}


def test_a_from_scratch_rnn_epoch_runs_in_the_graph():
    """Ran every call eagerly: `params`, a list of variables, was sent as a value (it is
    captured, each variable's identity in the key); the cell's `for X in inputs` failed to
    trace (a symbolic tensor is not iterable; the TF part unrolls its rows, tfprog/rows.py);
    and each batch `X` crossed with unknown shape (a loop's values keep the dimensions every
    iteration agreed on). Under `gpe run` this shape went from 77 to 10 ms an epoch."""
    rs = np.random.RandomState(1)
    data = [(tf.constant(rs.rand(3, 2, 5).astype(np.float32)),
             tf.constant(rs.rand(6, 5).astype(np.float32))) for _ in range(2)]

    def make(log):
        step, variables = _rnn_program(log)
        return step, variables, [(list(variables.values()), data)] * 6

    # the clipping's norm is read on the host (`.numpy()`): its reductions run there
    check(make, None, graph_calls=5, host_ops_allowed=frozenset({"Sum", "Pow"}))


def _d2l_epoch_program(log):
    """d2l's chapter 3 shape: the step takes the model, the data and the loss as
    arguments; the data is a tf.data pipeline; the model and loss are the user's own
    functions over module-level-style variables, called inside the tape."""
    rs = np.random.RandomState(2)
    W = tf.Variable(rs.normal(0, 0.1, (4, 3)).astype(np.float32))
    b = tf.Variable(np.zeros(3, np.float32))
    data = tf.data.Dataset.from_tensor_slices(
        (rs.rand(10, 2, 2).astype(np.float32), rs.rand(10, 3).astype(np.float32))).batch(4)

    def net(X):
        return tf.nn.softmax(tf.matmul(tf.reshape(X, (-1, W.shape[0])), W) + b)

    def loss(y_hat, y):
        return tf.reduce_sum((y_hat - y) ** 2, axis=1)

    def train_epoch(net, train_iter, loss, lr):
        total, n = 0.0, 0
        for X, y in train_iter:
            with tf.GradientTape() as tape:
                l = loss(net(X), y)
            dW, db = tape.gradient(l, [W, b])
            W.assign_sub(lr * dW)
            b.assign_sub(lr * db)
            total += float(tf.reduce_sum(l))
            n += int(tf.size(l))
        log.append(total / n)
        return total / n

    return train_epoch, {"W": W, "b": b}, [(net, data, loss, 0.1)] * 6


def test_an_epoch_over_a_dataset_calling_the_users_model_and_loss_runs_in_the_graph():
    """`for X, y in train_iter` over a tf.data argument bound X and y as host values, so
    `net(X)` and `loss(...)`, the user's functions, were not judged and the tape's loss was
    host-made: every call eager. A dataset of tensors (or of tuples of them) gives tensors."""
    # the dataset's own iteration runs on the host, as eagerly
    check(_d2l_epoch_program, None, graph_calls=5, host_ops_allowed=frozenset(
        {"AnonymousIteratorV3", "MakeIterator", "IteratorGetNext"}))


def _zip_update_program(log):
    """d2l's `sgd(params, grads, lr, batch_size)`: a loop over zip of a list of variables
    (an argument the TF part captures) and a list of gradients."""
    params = [tf.Variable(np.ones((3, 2), np.float32)), tf.Variable(np.zeros(2, np.float32))]

    def sgd(params, grads, lr, batch_size):
        for param, grad in zip(params, grads):
            param.assign_sub(lr * grad / batch_size)

    grads = [tf.constant(np.full((3, 2), 0.5, np.float32)), tf.constant([1.0, 2.0])]
    return sgd, {"w": params[0], "b": params[1]}, [(params, grads, 0.1, 4)] * 5


def test_a_loop_over_zip_of_a_captured_list_of_variables_is_unrolled_in_the_graph():
    """A list of variables passed as an argument is captured (not sent); `zip(params,
    grads)` over it is still a sequence of fixed length, unrolled in the TF part (else each
    `param` would cross per iteration, which a variable cannot)."""
    check(_zip_update_program, None, graph_calls=4)


class _Loader:
    """A user's data loader (d2l's SeqDataLoader): a plain class whose `__iter__` yields
    (X, y) batches as tensors. `labels_flat` from its `flat_from` pass on: y of rank 1."""

    def __init__(self, batch, flat_from=None):
        rng = np.random.default_rng(0)
        self.X = rng.normal(size=(48, 4)).astype(np.float32)
        self.y = self.X @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)
        self.batch, self.flat_from, self.passes = batch, flat_from, 0

    def __iter__(self):
        self.passes += 1
        flat = self.flat_from is not None and self.passes >= self.flat_from
        for i in range(0, len(self.X), self.batch):
            y = self.y[i:i + self.batch]
            yield tf.constant(self.X[i:i + self.batch]), tf.constant(y[:, 0] if flat else y)


class _Linear:
    """The user's model: a plain class holding a variable."""

    def __init__(self):
        self.w = tf.Variable(tf.zeros([4, 1]))

    def __call__(self, X):
        return tf.matmul(X, self.w)


def _squared(y_hat, y):
    return tf.reduce_mean((y_hat - y) ** 2)


def _loader_epoch_program(flat_from=None):
    def make(log):
        net = _Linear()
        opt = tf.keras.optimizers.SGD(0.05)

        def epoch(loader):
            total = 0.0
            for X, y in loader:
                with tf.GradientTape() as tape:
                    loss = _squared(net(X), y)
                opt.apply_gradients([(tape.gradient(loss, net.w), net.w)])
                total += float(loss)
            return total
        return epoch, {"w": net.w}, [(_Loader(16, flat_from),)] * 6
    return make


def test_an_epoch_over_a_users_loader_runs_in_the_graph():
    """`for X, y in loader` over a user's class: what it yields was unknown when slicing, so
    `net(X)` and `_squared(...)`, the user's, were calls on host values, not judged: the
    tape's loss was host-made, every call eager. The profile calls saw tensors: sliced again
    speculating so (JANUS), the TF part follows the loop, the host sends each batch (sliced
    again at once, from the profile call's runs)."""
    check(_loader_epoch_program(), None, graph_calls=5, profile_calls=1)


def test_a_batch_of_another_rank_from_a_users_loader_is_handed_back():
    """From its fifth pass the loader yields labels of rank 1 (eagerly `X @ w - y`
    broadcasts to a square): the speculation's check at the loop's first batch hands the
    call back to the host, which finishes it eagerly, as eager does (the fifth call, counted
    as sliced; the sixth profiles labels of rank 1)."""
    eagerly = frozenset({"ReadVariableOp", "MatMul", "Sub", "Pow", "Mean", "Reshape", "Tile",
                         "RealDiv", "Mul", "Shape", "BroadcastGradientArgs", "Sum",
                         "Identity", "AssignSubVariableOp", "Cast", "AddV2",
                         "AssignVariableOp"})  # (the handed-back call's, on the host)
    under = check(_loader_epoch_program(flat_from=5), None, graph_calls=4, profile_calls=1,
                  host_ops_allowed=eagerly)
    failures = " ".join(under.target.stats()["guard_failures"])
    assert "mid-call" in failures and "loop X, y" in failures, failures


class _RNNModelScratch:
    """d2l's RNNModelScratch: a plain class that holds its state's and its step's functions
    (not methods) and a list of variables."""

    def __init__(self, vocab_size, num_hiddens, init_state, forward_fn, params):
        self.vocab_size, self.num_hiddens = vocab_size, num_hiddens
        self.init_state, self.forward_fn = init_state, forward_fn
        self.trainable_variables = params

    def __call__(self, X, state):
        X = tf.one_hot(tf.transpose(X), self.vocab_size)
        return self.forward_fn(tf.cast(X, tf.float32), state, self.trainable_variables)

    def begin_state(self, batch_size, *args, **kwargs):
        return self.init_state(batch_size, self.num_hiddens)


def _init_rnn_state(batch_size, num_hiddens):
    return (tf.zeros((batch_size, num_hiddens)), )


def _rnn(inputs, state, params):
    W_xh, W_hh, b_h, W_hq, b_q = params
    H, = state
    outputs = []
    for X in inputs:
        H = tf.tanh(tf.matmul(X, W_xh) + tf.matmul(H, W_hh) + b_h)
        outputs.append(tf.matmul(H, W_hq) + b_q)
    return tf.concat(outputs, axis=0), (H,)


def _grad_clipping(grads, theta):
    """d2l's: the norm read on the host (`.numpy()`), a branch on a tensor."""
    theta = tf.constant(theta, dtype=tf.float32)
    new_grad = [grad for grad in grads]
    norm = tf.math.sqrt(sum((tf.reduce_sum(grad ** 2)).numpy() for grad in new_grad))
    norm = tf.cast(norm, tf.float32)
    if tf.greater(norm, theta):
        for i, grad in enumerate(new_grad):
            new_grad[i] = grad * theta / norm
    return new_grad


class _SeqLoader:
    """d2l's SeqDataLoader: a user's class yielding (X, Y) batches of token ids."""

    def __init__(self, corpus, batch_size, num_steps):
        self.corpus, self.b, self.n = corpus, batch_size, num_steps

    def __iter__(self):
        m = (len(self.corpus) - 1) // self.n
        starts = list(range(0, m * self.n, self.n))
        for i in range(0, m // self.b):
            rows = starts[i * self.b:(i + 1) * self.b]
            yield (tf.constant([self.corpus[j:j + self.n] for j in rows]),
                   tf.constant([self.corpus[j + 1:j + 1 + self.n] for j in rows]))


def _d2l_ch8_program(log):
    rs = np.random.RandomState(3)
    vocab, hidden = 6, 8
    params = [tf.Variable(rs.normal(0, 0.3, s).astype(np.float32))
              for s in [(vocab, hidden), (hidden, hidden), (hidden,), (hidden, vocab),
                        (vocab,)]]
    net = _RNNModelScratch(vocab, hidden, _init_rnn_state, _rnn, params)
    loader = _SeqLoader(list(rs.randint(0, vocab, 41)), 2, 5)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    updater = keras.optimizers.SGD(0.5)

    def train_epoch_ch8(net, train_iter, loss, updater):
        total = 0.0
        for X, Y in train_iter:
            state = net.begin_state(batch_size=X.shape[0], dtype=tf.float32)
            with tf.GradientTape(persistent=True) as g:
                y_hat, state = net(X, state)
                y = tf.reshape(tf.transpose(Y), (-1))
                l = loss(y, y_hat)
            params = net.trainable_variables
            grads = g.gradient(l, params)
            grads = _grad_clipping(grads, 1)
            updater.apply_gradients(zip(grads, params))
            total += float(l)
        log.append(total)
        return total

    return train_epoch_ch8, {f"p{i}": p for i, p in enumerate(params)}, \
        [(net, loader, loss, updater)] * 6


def test_d2l_chapter_8_epoch_runs_in_the_graph():
    """d2l's train_epoch_ch8 with RNNModelScratch, SeqDataLoader and grad_clipping ran every
    op eagerly on the host, in calls counted as sliced (the loop over the loader ran on the
    host): the loader's batches were host values (now speculated tensors), `begin_state`
    takes **kwargs it never reads (`dtype=`), the model calls functions it holds
    (`self.forward_fn`), a method that changes nothing on the object made its numbers
    unguardable, `grads` is bound by the tape, then by the host's clipping (one
    iteration's value: both may bind it), and `tf.reshape(t, (-1))` (a scalar shape eager
    accepts) failed to trace. d2l_gru_scratch: 76 -> 17 ms an epoch (gpe.function)."""
    # the clipping's norm is read on the host: its reductions and the branch's test run
    # there (the nested call's host part)
    check(_d2l_ch8_program, None, graph_calls=5, host_ops_allowed=frozenset(
        {"Sum", "Pow", "Sqrt", "Cast", "Greater", "Const", "AddV2"}))
