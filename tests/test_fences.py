"""Fences (host/runtime/fence.py): plain code that touches a variable after sliced calls sees the
state eager would have, however it touches it, and a thread working for a running sliced
call never waits for that call.

Each program runs eagerly and under gpe (everything observable compared) with sliced
calls asserted; graph work of tens of milliseconds per call makes each race certain.
"""
import concurrent.futures

import keras
import numpy as np
import tensorflow as tf

from harness import check, differential

BIG = tf.ones([192, 192])
POOL = concurrent.futures.ThreadPoolExecutor(1)


def _heavy(x, rounds=10):
    y = x
    for _ in range(rounds):
        y = tf.matmul(y, x) / 192.0
    return tf.reduce_sum(y[0])


def _total(v):
    return float(v.numpy().sum())


# a thread working for the running call ---------------------------------------------------
# The host part of a sliced call hands work to another thread and waits for it; that thread
# reads a variable (as MirroredStrategy's all-reduce does in a thread pool inside
# `merge_call`, reading `var.handle`). Its fence waited for every call sent, the running one
# included, whose host part waited for the thread: a hang. It waits for the calls sent
# before the running one only.
def test_a_thread_working_for_the_running_call_does_not_wait_for_it():
    def program(wrap, log):
        v = tf.Variable(tf.ones([3]))
        w = tf.Variable(tf.zeros([3]))

        def step(x):
            w.assign_add(x * 2.0)
            n = POOL.submit(_total, v).result(timeout=60)  # a hang fails here
            v.assign(v * 0.5 + x)
            return n
        step = wrap(step)
        return [step(tf.constant([1.0, 2.0, 3.0])) for _ in range(4)], {"v": v, "w": w}
    (step,) = differential(program)
    assert step.stats()["graph_calls"] == 3, step.stats()


# the user's own tf.function after sliced calls --------------------------------------------
# A tf.function reads the variables it captured by their handles, captured when it was
# traced: none of TF's Python variable ops runs when it is called, so nothing waited for
# the sliced calls still queued: it read the state from before them.
def test_a_tf_function_reading_a_variable_after_sliced_calls_sees_their_writes():
    def program(wrap, log):
        v = tf.Variable(tf.zeros([192, 192]))

        @tf.function
        def total():
            return tf.reduce_sum(v)

        def step(x):
            v.assign(v * 0.5 + _heavy(x))
        step = wrap(step)
        out = []
        for _ in range(4):
            step(BIG)
            out.append(total())
        return out, {"v": v}
    (step,) = differential(program)
    assert step.stats()["graph_calls"] == 3, step.stats()


def test_a_tf_function_writing_a_variable_after_sliced_calls_comes_after_them():
    def program(wrap, log):
        v = tf.Variable(tf.zeros([192, 192]))

        @tf.function
        def scale(k):
            v.assign(v * k)

        concrete = scale.get_concrete_function(tf.TensorSpec([], tf.float32))

        def step(x):
            v.assign(v * 0.5 + _heavy(x))
        step = wrap(step)
        for i in range(4):
            step(BIG)
            scale(tf.constant(-1.0))
            step(BIG)
            concrete(tf.constant(3.0))  # a ConcreteFunction's own call
        return [v[0, :2]], {"v": v}
    (step,) = differential(program)
    assert step.stats()["graph_calls"] == 7, step.stats()


# Keras's own tf.functions after sliced steps on the same model ----------------------------
# `predict_on_batch` and `train_on_batch` call Keras's tf.functions within a millisecond;
# `predict` and `fit` spend long enough on the host first to hide the race, mostly.
def test_keras_predict_and_fit_after_sliced_steps_see_their_writes():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 192)).astype(np.float32)
    y = rng.normal(size=(8, 1)).astype(np.float32)

    def program(wrap, log):
        keras.utils.set_random_seed(3)
        model = keras.Sequential([keras.layers.Dense(1, kernel_initializer="ones")])
        model.build((None, 192))
        model.compile(optimizer=keras.optimizers.SGD(1e-4), loss="mse")
        kernel = model.layers[0].kernel

        def step(big):
            kernel.assign(kernel * 0.5 + _heavy(big, 40) / 192.0)
        step = wrap(step)
        out = []
        for _ in range(4):
            step(BIG)
            out.append(model.predict_on_batch(x))
            step(BIG)
            out.append(model.train_on_batch(x, y))
        step(BIG)
        out.append(model.predict(x, verbose=0))
        step(BIG)
        model.fit(x, y, epochs=1, batch_size=8, verbose=0, shuffle=False)
        return out, {f"w{i}": w for i, w in enumerate(model.weights)}
    (step,) = differential(program)
    assert step.stats()["graph_calls"] == 9, step.stats()


def test_a_call_whose_entry_guard_fails_waits_for_the_calls_sent_before_it():
    """Pipelined sliced calls write a variable; then a call whose folded number changed
    (`c`: 0.5, then 0.25) fails its entry guard before sending anything and runs eagerly.
    That eager run read the variable while still holding the session, where reads do not
    wait for earlier calls: it read it before the graph had finished them and the final
    value was 3% off eager's (found by reading the code path of a traceback). It now runs
    once the session is let go, and waits as any eager code does."""
    m = tf.random.stateless_normal([128, 128], seed=[1, 2]) * 0.01

    def make(log):
        v = tf.Variable(tf.zeros([4]))

        def step(x, c):
            h = tf.ones([128, 128])
            for _ in range(10):  # graph work that keeps the graph behind the host
                h = tf.tanh(tf.matmul(h, m))
            v.assign_add(x * c + 0.0 * tf.reduce_sum(h) + tf.reduce_max(v))
            return c
        return step, {"v": v}
    x = tf.constant([1.0, 2.0, 3.0, 4.0])
    under = check(make, [(x, 0.5)] * 30 + [(x, 0.25)] * 10, graph_calls=27 + 6,
                  adaptive=False, profile_calls=3)
    assert under.target.stats()["guard_failures"] == {"`c`: expected 0.5, got 0.25": 1}
