"""A training function called once or twice (d2l's `train(lambd)` in weight decay, a
script's `main()`): it never gets past its profile calls, so every step ran eagerly. The
body of its training loop now runs, after a few passes of the loop in a profile call, as
a function of its own that gpe slices (slicer/outline.py). Lambdas (`net = lambda X:
...`) are callees as defs are. Everything observable matches eager; most of the loop's
TF work runs in the graph."""
import io
import contextlib

import numpy as np
import pytest
import tensorflow as tf

import gpe
from gpe.host.runtime.opcount import eager_ops
from harness import check, same

RNG = np.random.default_rng(0)
DATA = [(tf.constant(RNG.normal(size=(4, 5)), tf.float32),
         tf.constant(RNG.normal(size=(4, 1)), tf.float32)) for _ in range(4)]


def train(lambd, data, epochs):
    """d2l's weight decay from scratch, in small (its `train`, with its lambdas)."""
    w = tf.Variable(tf.ones((5, 1)))
    b = tf.Variable(tf.zeros(1))
    net, loss = lambda X: tf.matmul(X, w) + b, lambda y_hat, y: (y_hat - y) ** 2 / 2
    lr, n = 0.03, 0
    for epoch in range(epochs):
        for X, y in data:
            with tf.GradientTape() as tape:
                l = tf.reduce_mean(loss(net(X), y)) + lambd * tf.reduce_sum(w ** 2)
            grads = tape.gradient(l, [w, b])
            for param, grad in zip([w, b], grads):
                param.assign_sub(lr * grad)
            n += 1
        print("epoch", epoch, float(l))
    return w, b, n


def train_with_break(data, epochs):
    """A `break` before the pass binds `l`, which is read after the loop: returned there,
    `l` may be unbound. Not outlined (it runs as written)."""
    w = tf.Variable(tf.ones((5, 1)))
    for epoch in range(epochs):
        for X, y in data:
            if float(tf.reduce_sum(X)) > 100.0:
                break
            with tf.GradientTape() as tape:
                l = tf.reduce_mean(tf.square(tf.matmul(X, w) - y))
            w.assign_sub(0.01 * tape.gradient(l, w))
    return w, l


def train_until(data, max_steps):
    """`continue` and `break` of the loop (a step count reached): each a `return` of the
    outlined body telling the loop whether to end."""
    w = tf.Variable(tf.ones((5, 1)))
    losses = []
    for epoch in range(3):
        for step, (X, y) in enumerate(data):
            with tf.GradientTape() as tape:
                l = tf.reduce_mean(tf.square(tf.matmul(X, w) - y))
            w.assign_sub(0.01 * tape.gradient(l, w))
            losses.append(float(l))
            if step == 1:
                continue
            if len(losses) >= max_steps:
                break
    return w, losses, l


def train_with_a_callback(data, epochs):
    """The body reads `seen`, which a nested function rebinds (nonlocal) during the pass:
    a body run as a function of its own would read a copy. Not outlined."""
    w = tf.Variable(tf.ones((5, 1)))
    seen, counts = 0, []

    def note():
        nonlocal seen
        seen += 1
    for epoch in range(epochs):
        for X, y in data:
            with tf.GradientTape() as tape:
                l = tf.reduce_mean(tf.square(tf.matmul(X, w) - y))
            w.assign_sub(0.01 * tape.gradient(l, w))
            note()
            counts.append(seen)
    return w, counts


def observed(fn, *args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), eager_ops() as ops:
        result = fn(*args)
    return [v.numpy() if hasattr(v, "numpy") else v for v in result] if isinstance(
        result, tuple) else result.numpy(), out.getvalue(), ops


@pytest.mark.timeout(300)
def test_a_training_function_called_once_runs_its_steps_in_the_graph():
    eager = observed(train, 0.1, DATA, 5)
    sliced = gpe.function(train, adaptive=False)
    under = observed(sliced, 0.1, DATA, 5)
    assert same(eager[0], under[0]) and eager[1] == under[1], (eager[:2], under[:2])
    assert sliced.stats()["calls"] == 1 and sliced.stats()["graph_calls"] == 0
    (body,) = sliced.builder.outlined.bodies.values()
    stats = body.stats()
    # 20 passes: 3 as written, then the body's own 3 profile calls, then sliced
    assert stats["calls"] == 17 and stats["graph_calls"] >= 12, stats
    # the forward and backward MatMul of each pass: eagerly only in passes not sliced
    assert eager[2]["MatMul"] == 40 and under[2]["MatMul"] == 2 * (20 - stats["graph_calls"])


@pytest.mark.timeout(300)
def test_a_second_call_takes_the_sliced_body_after_its_first_passes():
    eager = [observed(train, lambd, DATA, 4)[:2] for lambd in (0.0, 3.0)]
    sliced = gpe.function(train, adaptive=False)
    under = [observed(sliced, lambd, DATA, 4)[:2] for lambd in (0.0, 3.0)]
    for a, b in zip(eager, under):
        assert same(a[0], b[0]) and a[1] == b[1], (a, b)
    (body,) = sliced.builder.outlined.bodies.values()
    assert body.stats()["graph_calls"] >= 16, body.stats()  # (lambd is another key)


@pytest.mark.timeout(300)
def test_a_loop_with_break_and_continue_ends_as_written():
    eager = observed(train_until, DATA * 2, 14)
    sliced = gpe.function(train_until, adaptive=False)
    under = observed(sliced, DATA * 2, 14)
    assert same(eager[0], under[0]) and len(under[0][1]) == 15, (eager[0], under[0])
    (body,) = sliced.builder.outlined.bodies.values()
    # 15 passes: 3 written, then 12 of the body (3 + 2 profile calls: `step` is folded first)
    assert body.stats()["calls"] == 12 and body.stats()["graph_calls"] == 7, body.stats()


@pytest.mark.timeout(300)
def test_a_break_before_what_the_loop_returns_is_bound_is_not_outlined():
    eager = observed(train_with_break, DATA, 3)
    sliced = gpe.function(train_with_break, adaptive=False)
    under = observed(sliced, DATA, 3)
    assert same(eager[0], under[0])
    assert sliced.builder.outlined.bodies == {}


@pytest.mark.timeout(300)
def test_a_body_reading_a_name_another_scope_changes_is_not_outlined():
    eager = observed(train_with_a_callback, DATA, 3)
    sliced = gpe.function(train_with_a_callback, adaptive=False)
    under = observed(sliced, DATA, 3)
    assert same(eager[0], under[0]) and under[0][1] == list(range(1, 13))
    assert sliced.builder.outlined.bodies == {}


@pytest.mark.timeout(300)
def test_a_lambda_called_in_the_tape_runs_in_the_graph():
    """`net = lambda X: ...` passed to the step: judged and traced as a def is (before, a
    host call: the tape's loss was made by host code, every call eager)."""
    def make(log):
        w = tf.Variable(tf.ones((5, 1)))
        net = lambda X: tf.matmul(X, w)  # noqa: E731 (the shape under test)

        def step(model, X, y):
            with tf.GradientTape() as tape:
                l = tf.reduce_mean(tf.square(model(X) - y))
            w.assign_sub(0.01 * tape.gradient(l, w))
            return l
        return step, {"w": w}, [(net, X, y) for X, y in DATA]
    under = check(make, None)
    assert "MatMul" not in under.host_ops


EDITED = '''import linecache
import tensorflow as tf

EDIT = None


def train(data, w):
    out = []
    for i, x in enumerate(data):
        with tf.GradientTape() as tape:
            l = tf.reduce_sum(w * x)
        w.assign_sub(0.1 * tape.gradient(l, w))
        out.append(float(l))
        if i == 1:
            EDIT()
    return out
'''


@pytest.mark.timeout(300)
def test_a_file_edited_while_its_loop_runs_keeps_running_as_imported(tmp_path):
    """The body is made from the file when a profile call first takes it: the file is
    checked again then (here it was edited in the loop's second pass: 0.1 became 0.5),
    and the loop goes on as Python runs it, never as the new text says."""
    import importlib.util
    import linecache
    path = tmp_path / "edited_train.py"

    def results(wrap):
        path.write_text(EDITED)
        linecache.checkcache(str(path))
        spec = importlib.util.spec_from_file_location("edited_train", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)

        def edit():
            path.write_text(EDITED.replace("0.1 *", "0.5 *"))
            linecache.checkcache(str(path))
        module.EDIT = edit
        train = wrap(module.train)
        w = tf.Variable([1.0, 2.0])
        return train([tf.constant([0.5, 1.0])] * 8, w), w.numpy(), train
    eager, under = results(lambda f: f), results(lambda f: gpe.function(f, adaptive=False))
    assert eager[0] == under[0] and same(eager[1], under[1]), (eager, under)
    assert under[2].builder.outlined.bodies == {9: None}  # (the loop on line 9: none made)


class Regressor(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = tf.keras.layers.Dense(8, activation="relu")
        self.out = tf.keras.layers.Dense(1)

    def call(self, X):
        return self.out(self.hidden(X))


def train_model(net, data, epochs):
    """A model built by its first call, inside the training function (d2l's train_ch8,
    train_seq2seq: `net` made just before)."""
    opt = tf.keras.optimizers.SGD(0.01)
    for epoch in range(epochs):
        for X, y in data:
            with tf.GradientTape() as tape:
                l = tf.reduce_mean((net(X) - y) ** 2)
            grads = tape.gradient(l, net.trainable_variables)
            opt.apply_gradients(zip(grads, net.trainable_variables))
        print("epoch", epoch, float(l))
    return tuple(tf.identity(v) for v in net.trainable_variables)


@pytest.mark.timeout(300)
def test_a_model_built_inside_the_training_function_runs_its_steps_in_the_graph():
    """The function could not be sliced before its model was built ("Regressor is not
    built yet"), so its one call ran eagerly as written, no loop outlined; it is
    profiled with the plan it has, its layers on the host, and the loop's body is
    sliced once the first pass has built them."""
    def run(fn):
        tf.keras.utils.set_random_seed(4)
        return observed(fn, Regressor(), DATA, 5)
    eager = run(train_model)
    sliced = gpe.function(train_model, adaptive=False)
    under = run(sliced)
    assert same(eager[0], under[0]) and eager[1] == under[1], (eager[:2], under[:2])
    (body,) = sliced.builder.outlined.bodies.values()
    stats = body.stats()  # 20 passes: 3 as written, the body's 3 profile calls, sliced
    assert stats["calls"] == 17 and stats["graph_calls"] >= 12, stats
    # five MatMuls a pass (two forward, three backward): eagerly only in passes not sliced
    assert eager[2]["MatMul"] == 100 and under[2]["MatMul"] == 5 * (20 - stats["graph_calls"])
