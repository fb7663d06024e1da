"""Calls to user functions: a callee whose body is all TF work is sliced too and runs as its
own FunctionDef called from the caller's TF part; any other callee runs on the host."""
import numpy as np
import tensorflow as tf

from harness import check
from host.opcount import graph_ops

X = tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3) / 10)
Y = tf.constant(np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2))


def dense(x, w, b):
    return tf.nn.relu(tf.matmul(x, w) + b)


def mse(pred, y):
    d = pred - y
    return tf.reduce_mean(d * d)


def decay(v, rate=0.5):
    v.assign(v * rate)
    return v.read_value()


def noisy_square(t, log):
    log.append("host side effect")
    return t * t


def fact(n):
    return 1 if n <= 1 else n * fact(n - 1)


def test_pure_tf_callees_run_as_their_own_function_defs():
    def make(log):
        w = tf.Variable(tf.ones([3, 2]) * 0.3)
        b = tf.Variable(tf.zeros([2]))

        def step(x, y):
            with tf.GradientTape() as tape:
                loss = mse(dense(x, w, b), y)
            gw, gb = tape.gradient(loss, [w, b])
            w.assign_sub(0.1 * gw)
            b.assign_sub(0.1 * gb)
            log.append(float(loss))
            return loss
        return step, {"w": w, "b": b}
    under = check(make, [(X, Y)] * 5)
    part = next(iter(under.target.variants.values())).part
    ops = graph_ops(part)
    assert ops["PartitionedCall"] + ops["StatefulPartitionedCall"] >= 2  # the two callees
    assert "MatMul" in ops and "Relu" in ops


def test_callee_that_writes_a_variable_keeps_order():
    def make(log):
        v = tf.Variable(4.0)

        def step(x):
            s = tf.reduce_sum(x)
            log.append(float(s))
            r = decay(v)          # an effect after host work: waits for the host
            return r + s
        return step, {"v": v}
    check(make, [(X,)] * 4)


def test_callee_with_host_work_runs_on_the_host():
    def make(log):
        def step(x):
            y = tf.reduce_sum(x, axis=0)
            z = noisy_square(y, log)
            return z + fact(4)
        return step, {}
    check(make, [(X,)] * 3, host_ops_allowed=frozenset({"Mul", "AddV2", "Const"}))
