"""The runtime around sliced calls: refusals, errors from the graph, shutdown, pipelining."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import gpe
from harness import check
from host.opcount import eager_ops, user_ops

X = tf.constant([1.0, 2.0, 3.0])


def test_unsupported_statement_runs_eagerly_with_one_warning():
    def make(log):
        def branchy(x):
            s = tf.reduce_sum(x)
            if float(s) > 3:
                log.append("big")
            return s * 2.0
        return branchy, {}
    with pytest.warns(gpe.GpeWarning, match="not sliced yet"):
        under = check(make, [(X,), (X * 0,), (X,)], graph_calls=0,
                      host_ops_allowed=frozenset({"Sum", "Mul", "Const"}))
    stats = under.target.stats()
    assert stats["eager_calls"] == 3 and len(stats["fallbacks"]) == 1


def test_error_inside_graph_raises_eager_type_and_session_recovers():
    def pick(x, i):
        return tf.gather(x, i) * 2.0
    sliced = gpe.function(pick)
    assert float(sliced(X, tf.constant(1))) == 4.0
    assert float(sliced(X, tf.constant(2))) == 6.0
    with pytest.raises(tf.errors.InvalidArgumentError, match="indices"):
        float(sliced(X, tf.constant(7)))
    assert float(sliced(X, tf.constant(0))) == 2.0  # the next call works
    assert sliced.stats()["graph_calls"] == 3


def test_host_runs_ahead_of_graph_until_it_needs_a_value():
    v = tf.Variable(0.0)

    def step(x):
        v.assign_add(tf.reduce_sum(x))
        return v.read_value()
    sliced = gpe.function(step)
    sliced(X)
    with eager_ops() as counts:
        results = [sliced(X) for _ in range(50)]  # no value is needed: nothing waits
        values = [float(r) for r in results]
    assert values == [6.0 * (i + 2) for i in range(50)]
    assert not user_ops(counts)
    assert counts["QueueDequeueV2"] == 50  # one dequeue per value, each when it was needed


def test_many_unread_values_do_not_fill_the_queue():
    def step(x):
        return x * 2.0
    sliced = gpe.function(step)
    for _ in range(300):
        sliced(X)
    assert np.array_equal(sliced(X).numpy(), (X * 2.0).numpy())


def test_interpreter_exit_does_not_hang():
    script = textwrap.dedent("""
        import tensorflow as tf, gpe
        v = tf.Variable(0.0)
        def step(x):
            v.assign_add(x)
            return v.read_value()
        s = gpe.function(step)
        for i in range(5):
            r = s(tf.constant(1.0))
        print(float(r))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "5.0"


def test_graph_error_surfaces_before_later_host_effects_and_names_the_line():
    def make(log):
        v = tf.Variable(1.0)

        def pick(x, i):
            y = tf.gather(x, i) * 2.0
            v.assign_add(1.0)          # must not apply when the gather fails
            log.append("after gather")  # must not run when the gather fails
            return y
        return pick, {"v": v}
    calls = [(X, tf.constant(1)), (X, tf.constant(2)), (X, tf.constant(7)), (X, tf.constant(0))]
    eager = __import__("harness").run(make, calls, sliced=False)
    under = __import__("harness").run(make, calls, sliced=True)
    assert eager.log == under.log == ["after gather"] * 3
    assert np.array_equal(eager.variables["v"], under.variables["v"])
    assert eager.results[2][:2] == under.results[2][:2] == ("raised", "InvalidArgumentError")
    assert "indices = 7 is not in [0, 3)" in under.results[2][2]
    line = make.__code__.co_firstlineno + 4
    assert f"test_runtime.py:{line}" in under.results[2][2], under.results[2][2]
    assert under.target.stats()["graph_calls"] == 3
