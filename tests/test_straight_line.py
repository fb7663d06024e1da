"""Differential tests: straight-line functions mixing TF work and host Python.

Each program runs eagerly and under gpe on fresh state; results, variables, side effects
and printed output must be equal, every call after the profile call must run sliced, and
no TF op of the user's may run eagerly on the host (its TF work ran in the graph).
"""
import math

import numpy as np
import tensorflow as tf

from harness import Var, check

X = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3) / 10)
CALLS = [(X,)] * 4


def test_linear_regression_step_with_tape_and_host_feedback():
    def make(log):
        w = tf.Variable(tf.ones([3, 1]))

        def step(x, lr):
            with tf.GradientTape() as tape:
                y = tf.matmul(x, w)
                loss = tf.reduce_sum(y * y)
            g = tape.gradient(loss, w)
            l = float(loss)
            log.append(l)
            s = 1.0 / (l + 1.0)
            w.assign_sub(lr * s * g)
            print("loss", loss.numpy(), np.mean(log))
            return loss
        return step, {"w": w}
    check(make, [(X, 0.1)] * 5)


def test_pure_tf_arithmetic_returns_tensor():
    def make(log):
        w = tf.Variable(tf.reshape(tf.range(6, dtype=tf.float32), [3, 2]) / 7)

        def forward(x):
            h = tf.nn.relu(tf.matmul(x, w) - 0.1)
            z = tf.tanh(h) * 2.0 + tf.reduce_mean(h)
            return tf.reduce_sum(z, axis=1)
        return forward, {"w": w}
    under = check(make, CALLS)
    from gpe.host.runtime.opcount import graph_ops
    ops = graph_ops(next(iter(under.target.variants.values())).part)
    assert {"MatMul", "Relu", "Tanh", "Mean", "Sum"} <= set(ops)


def test_counter_variable_read_on_host_with_numpy():
    def make(log):
        v = tf.Variable(0.0)

        def bump(x):
            v.assign_add(tf.reduce_sum(x))
            log.append(v.numpy())
            v.assign_add(1.0)
            return v.read_value()
        return bump, {"v": v}
    check(make, CALLS)


def test_float_of_tensor_into_list_and_numpy_mean():
    def make(log):
        def stats(x):
            m = tf.reduce_mean(x)
            s = tf.math.reduce_std(x)
            log.append(float(m))
            log.append(float(s))
            log.append(np.mean(log))
            return m - s
        return stats, {}
    check(make, [(X,), (X * 2,), (X + 1,)])


def test_host_value_fed_back_into_same_call():
    def make(log):
        v = tf.Variable(tf.ones([3]))

        def rescale(x):
            loss = tf.reduce_sum(tf.square(x)) + tf.reduce_sum(v)
            s = float(loss)
            scale = 1.0 / (s + 1.0)
            v.assign(v * scale + 0.5)
            log.append(round(scale, 6))
            return v * 2.0
        return rescale, {"v": v}
    check(make, CALLS)


def test_numpy_work_on_materialised_value_sent_back():
    def make(log):
        def sort_then_scale(x):
            a = tf.reshape(x, [-1]).numpy()
            b = np.sort(a)[::-1].copy()
            return tf.constant(b) * 2.0 + tf.reduce_max(x)
        return sort_then_scale, {}
    check(make, [(X,), (X - 1,), (X * 3,)])


def test_tuple_results_from_split():
    def make(log):
        def halves(x):
            a, b = tf.split(x, 2, axis=0)
            c = a + b
            return a, b, c * c
        return halves, {}
    check(make, CALLS)


def test_python_float_and_int_arguments():
    def make(log):
        def scaled(x, scale, rows):
            y = tf.reshape(x, [rows, -1]) * scale
            return y + scale
        return scaled, {}
    check(make, [(X, 0.5, 3), (X, 0.25, 3), (X, 2.0, 3), (X, 0.1, 3)])


def test_assign_then_read_in_same_call():
    def make(log):
        v = tf.Variable(tf.zeros([2, 3]))

        def update(x):
            v.assign(x)
            y = v * 2.0
            v.assign_sub(y * 0.25)
            return v.read_value() + y
        return update, {"v": v}
    check(make, CALLS)


def test_host_exception_mid_call_leaves_state_as_eager():
    def make(log):
        v = tf.Variable(3.0)

        def risky(x):
            loss = tf.reduce_sum(x) - v
            log.append("before")
            r = math.sqrt(float(loss))  # raises ValueError once loss < 0
            v.assign_add(1.0)
            log.append(r)
            return v.read_value()
        return risky, {"v": v}
    calls = [(tf.constant([4.0, 1.0]),), (tf.constant([9.0, 1.0]),), (tf.constant([1.0, 0.0]),),
             (tf.constant([9.0, 9.0]),), (tf.constant([0.0, 0.0]),), (tf.constant([20.0, 1.0]),)]
    under = check(make, calls)
    assert sum(isinstance(r, tuple) and r[0] == "raised" for r in under.results) == 2


def test_printing_tensors_and_shapes():
    def make(log):
        def show(x):
            y = tf.matmul(x, x, transpose_b=True)
            print("y =", y)
            print(f"shape {y.shape} sum {float(tf.reduce_sum(y)):.3f}")
            return y
        return show, {}
    check(make, CALLS)


def test_global_python_value_read_by_tf_part_changes_between_calls():
    def make(log):
        v = tf.Variable(1.0)
        set_scale(2.0)

        def step(x):
            v.assign(v * SCALE + tf.reduce_sum(x))
            set_scale(SCALE * 0.5)
            return v.read_value()
        return step, {"v": v}
    check(make, CALLS)


SCALE = 2.0


def set_scale(value):
    global SCALE
    SCALE = value


def test_variable_argument_and_two_gradients():
    def make(log):
        w1 = tf.Variable([[1.0], [2.0], [3.0]])
        w2 = tf.Variable(0.5)

        def train(w, x, lr):
            with tf.GradientTape() as tape:
                pred = tf.matmul(x, w) * w2
                loss = tf.reduce_mean(tf.square(pred - 1.0))
            g1, g2 = tape.gradient(loss, [w, w2])
            w.assign_sub(lr * g1)
            w2.assign_sub(lr * g2)
            return loss
        return train, {"w1": w1, "w2": w2}
    # the variable passed as an argument is bound into the TF part, guarded by identity
    check(make, [(Var("w1"), X, 0.1)] * 4)


def test_keyword_arguments_and_defaults():
    def make(log):
        def affine(x, scale=3.0, *, shift=1.0):
            return x * scale + shift
        return affine, {}
    check(make, [(X,), (X, {"__kwargs__": True, "shift": 2.0}),
                 (X, 0.5, {"__kwargs__": True, "shift": -1.0}), (X,)])


def test_user_function_called_on_host_waits_for_tf_effects():
    def make(log):
        v = tf.Variable(1.0)

        def report(var):
            log.append(("seen", float(var.numpy())))

        def step(x):
            v.assign_add(tf.reduce_sum(x))
            report(v)
            v.assign(v * 0.5)
            return v.read_value()
        return step, {"v": v}
    # report() is not sliced (plain host code): its read of v runs eagerly, after the
    # TF part's earlier write and before its later one
    check(make, CALLS, host_ops_allowed=frozenset({"ReadVariableOp", "Identity"}))


def test_pending_results_feed_eager_code_and_numpy():
    def make(log):
        def loss_of(x):
            return tf.reduce_sum(x * x)
        return loss_of, {}
    import gpe
    sliced = gpe.function(make([])[0], profile_calls=1)
    losses = [sliced(X * i) for i in range(5)]
    eager = [make([])[0](X * i) for i in range(5)]
    assert np.array_equal(tf.reduce_mean(losses).numpy(), tf.reduce_mean(eager).numpy())
    assert np.mean(losses) == np.mean(eager)
    assert float(losses[3] + 1.0) == float(eager[3] + 1.0)
    assert sliced.stats()["graph_calls"] == 4


def test_add_n_and_gradient_sums_keep_eager_order():
    # A graph AddN may reuse a temporary input's buffer and add that input first, which
    # changes the last bit now and then; gpe traces AddN as ordered adds.
    import gpe
    x = tf.constant(np.random.default_rng(7).normal(size=(64,)).astype(np.float32))
    w = tf.Variable(tf.ones([64]) * 0.3)

    def mixed(x):
        with tf.GradientTape() as tape:
            y = x * w
            loss = tf.reduce_sum(y * y) + tf.reduce_sum(tf.sin(y)) + tf.reduce_sum(w * w)
        g = tape.gradient(loss, w)  # w is used three times: its gradients are summed
        return tf.add_n([x * 2.0, x * 3.0, x - 1.0, x / 7.0, g])

    expected = mixed(x).numpy()
    for _ in range(12):
        sliced = gpe.function(mixed, profile_calls=1, adaptive=False)
        for _ in range(4):
            assert np.array_equal(sliced(x).numpy(), expected)


def test_host_value_made_before_a_tape_block_crosses_into_it():
    """A tensor made by host code (an object's method) just before `with tf.GradientTape()`
    and used inside it: the block waits for it (the gate on the `with` was dropped, so the
    TF part failed to trace with a NameError and every call ran eagerly)."""
    def make(log):
        w = tf.Variable(tf.ones([3]))

        class Noise:
            def draw(self):
                log.append("draw")
                return tf.ones([3]) * 2.0
        noise = Noise()

        def step(x):
            z = noise.draw()
            with tf.GradientTape() as tape:
                y = tf.reduce_sum(x[0] * z * w)
            w.assign_sub(0.1 * tape.gradient(y, w))
            return y
        return step, {"w": w}
    check(make, CALLS, host_ops_allowed=frozenset({"Fill", "Mul"}))


def test_tuple_assignment_of_a_python_int_and_a_tensor_keeps_the_int():
    """`n, y = 0, x * 2.0`: n stays a Python int (the statement went whole to the TF part,
    and n came back as an int32 tensor)."""
    def make(log):
        def f(x):
            n, ok, y = 0, False, x * 2.0
            if tf.reduce_sum(x) > 1.0:
                n = n + 5
                ok = True
            return n, ok, y
        return f, {}
    under = check(make, [(X,), (X,), (X * 0.0,), (X,)])
    assert [type(r[0]) for r in under.results] == [int] * 4
