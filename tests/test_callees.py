"""Calls to user functions: a callee whose body is all TF work is sliced too and runs as its
own FunctionDef called from the caller's TF part; any other callee runs on the host."""
import io

import numpy as np
import pytest
import tensorflow as tf

from harness import check
import gpe
from gpe.host.runtime.opcount import eager_ops, graph_ops, user_ops

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


def _nested_program(sliced: bool):
    v = tf.Variable(tf.zeros([3]))
    log = []

    def noisy(t, scale):
        log.append(("noisy", scale))         # host work: not a pure-TF callee
        return t * t * scale + 1.0

    def step(x, scale):
        y = inner(x, scale)                    # the callee's TF part runs in step's
        v.assign_add(tf.reduce_sum(y, axis=0))
        log.append("step")
        return y * 2.0

    inner = gpe.function(noisy, profile_calls=1, adaptive=False) if sliced else noisy
    outer = gpe.function(step, profile_calls=1, adaptive=False) if sliced else step
    return outer, inner, v, log


def test_a_sliced_callee_with_host_work_runs_its_tf_part_inside_the_callers():
    calls = [(X, 0.5), (X, 0.5), (X * 2, 0.5), (X, 0.25), (X, 2.0), (X, 0.5)]
    eager_fn, _, eager_v, eager_log = _nested_program(False)
    expected = [eager_fn(*c).numpy() for c in calls]
    outer, inner, v, log = _nested_program(True)
    host_ops = {}
    got = []
    for i, c in enumerate(calls):
        with eager_ops() as counts:
            got.append(outer(*c))
        if i >= 1:
            for op, n in user_ops(counts).items():
                host_ops[op] = host_ops.get(op, 0) + n
    for a, b in zip(expected, got):
        assert np.array_equal(a, np.asarray(b))
    assert np.array_equal(eager_v.numpy(), v.numpy()) and eager_log == log
    assert outer.stats()["graph_calls"] == len(calls) - 1
    assert inner.stats()["graph_calls"] == len(calls) - 1, inner.stats()
    # the callee's TF work ran in the graph too; its result comes back through the host
    # (a host value to the caller), so `y * 2.0` runs there, once per sliced call
    assert host_ops == {"Mul": len(calls) - 1}, host_ops
    assert "sliced too: its TF part runs inside this one's" in gpe.explain(
        outer, file=io.StringIO())



def _helper_with_host_work(t, log):
    log.append("helper")
    return t * t + 1.0


def test_a_plain_helper_with_host_work_is_sliced_and_run_nested():
    """An undecorated function of the user's module called from a sliced function: gpe
    wraps it (as `gpe run` would) and runs its TF part inside the caller's."""
    def make(log):
        v = tf.Variable(tf.zeros([3]))

        def step(x):
            y = _helper_with_host_work(x, log)
            v.assign_add(tf.reduce_sum(y, axis=0))
            return v.read_value()
        return step, {"v": v}
    under = check(make, [(X,)] * 6, graph_calls=3, profile_calls=3)
    assert "sliced too: its TF part runs inside this one's" in gpe.explain(
        under.target, file=io.StringIO())


def test_a_callee_that_returns_nothing_gives_none_back():
    """`s = bump(n, 1)` where bump only writes a variable: the TF part's call returns
    None, which crossed to the host as a value and failed ("None values not supported"):
    every call ran eagerly. None crosses as a placeholder and comes back None."""
    counter = tf.Variable(0)

    def bump(a, k):
        counter.assign_add(a + k)

    def make(log):
        counter.assign(0)

        def main(x, n):
            s = bump(n, 1)
            s2 = bump(n, k=2)
            return s, s2, counter + 0, x * 2.0
        return main, {"v": counter}
    check(make, [(tf.constant([0.5, -1.0]), 1)] * 5)


# a helper's own globals: module-level containers of variables and a module-level object
PARAMS: dict = {}
LAYERS: list = []


class _Holder:
    pass


HOLDER = _Holder()


def _reset_globals():
    PARAMS["w"] = tf.Variable(2.0)
    LAYERS[:] = [tf.Variable(3.0)]
    HOLDER.w = tf.Variable(1.0)


def forward_over_globals(x):
    return x * PARAMS["w"] + LAYERS[0] * HOLDER.w


def step_calling_forward(x):
    return forward_over_globals(x) + 1.0


def test_what_a_callee_reads_from_its_own_globals_is_guarded():
    """The caller's TF part calls the callee's FunctionDef, traced with the callee's
    globals as they were: a dict entry, a list element or an object's variable replaced
    later must not leave sliced calls on the old one (they did: 6.0 for ever)."""
    def run(fn):
        _reset_globals()
        out = []
        for i in range(12):
            if i == 4:
                PARAMS["w"] = tf.Variable(5.0)
            if i == 6:
                LAYERS[0] = tf.Variable(10.0)
            if i == 8:
                HOLDER.w = tf.Variable(7.0)
            if i == 10:
                PARAMS["w"].assign(4.0)  # the same variable, written: no new variant
            out.append(float(fn(tf.constant(1.0))))
        return out
    sliced = gpe.function(step_calling_forward, profile_calls=1)
    assert run(sliced) == run(step_calling_forward) == \
        [6.0] * 4 + [9.0] * 2 + [16.0] * 2 + [76.0] * 2 + [75.0] * 2
    assert sliced.stats()["graph_calls"] >= 6, sliced.stats()


@pytest.mark.timeout(120)
def test_a_callee_called_alone_then_nested_takes_each_calls_values():
    """A sliced function with host work called on its own, then nested in another's call,
    while the graph is busy and the host runs ahead (neither waits for the graph): each
    call takes its own entry values. A call on its own sends them with its part number
    (relayed by the graph into a queue of its own when it runs the call: tfprog/sink.py);
    a nested call sends them to the callee's entry queue while the call before may not
    have been relayed yet, so the two must not share a queue."""
    big = tf.ones([300, 300]) * 1e-3

    def slow(m):
        for _ in range(8):
            m = tf.linalg.matmul(m, m) + 1e-3
        return tf.reduce_sum(m)

    def run(sliced: bool):
        log = []
        wrap = (lambda f: gpe.function(f, profile_calls=1, adaptive=False)) if sliced else (
            lambda f: f)

        def noisy(t):
            log.append("noisy")  # host work: its TF part runs inside its caller's
            return t * 3.0 + 1.0

        inner = wrap(noisy)

        def step(x):
            y = inner(x)  # the callee's TF part runs in step's
            log.append("step")
            return y * 2.0
        outer, heavy = wrap(step), wrap(slow)
        got = []
        for i in range(12):
            heavy(big)
            got.append(inner(X + float(i)))  # on its own
            got.append(outer(X * 10.0 + float(i)))  # nested in outer's call
        return [np.asarray(g) for g in got], log, inner
    expected, eager_log, _ = run(False)
    got, log, inner = run(True)
    for i, (a, b) in enumerate(zip(expected, got)):
        assert np.array_equal(a, b), (i, a, b)
    assert eager_log == log
    assert inner.stats()["graph_calls"] >= 18, inner.stats()
