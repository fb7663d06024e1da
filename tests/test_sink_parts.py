"""The sink with many parts: each call runs its own part (the parts' queue and variable
handles are packed into one vector, tfprog/sink.py), a part that captured a plain tensor
too, and a function dropped while its call is in flight does not fail the sink."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import gpe
from gpe.host.runtime.session import get_session

X = tf.ones([3, 4])
OFFSET = tf.constant(np.arange(4, dtype=np.float32))  # captured as a plain tensor


def make(i: int):
    v = tf.Variable(float(i))

    def part(x):
        v.assign_add(1.0)
        return tf.reduce_sum(x * v) + float(i)
    part.__name__ = part.__qualname__ = f"part{i}"
    return part, v


def with_constant(x):
    return tf.reduce_sum(x + OFFSET)


@pytest.mark.timeout(600)
def test_each_call_runs_its_own_part_among_many():
    made = [make(i) for i in range(7)]
    sliced = [gpe.function(f, profile_calls=1, adaptive=False) for f, _ in made]
    constant = gpe.function(with_constant, profile_calls=1, adaptive=False)
    expected_v = [float(i) for i in range(7)]
    for round_ in range(3):
        for i, (s, (_, v)) in enumerate(zip(sliced, made)):
            expected_v[i] += 1.0
            assert float(s(X)) == 12.0 * expected_v[i] + i, (round_, i)
        assert float(constant(X)) == float(with_constant(X))
    for (_, v), e in zip(made, expected_v):
        assert float(v.numpy()) == e
    assert all(s.stats()["graph_calls"] == 2 for s in sliced)
    assert constant.stats()["graph_calls"] == 2


@pytest.mark.timeout(600)
def test_functions_dropped_after_their_first_sliced_call_do_not_fail_the_sink(tmp_path):
    """Functions of a generated script (tests/bench_many_functions.py: some call the one
    before them) sliced one after another, each dropped after its first sliced call: the
    queues of a dropped one were destroyed while the sink still had its call to run, and
    the sink failed with NotFoundError (...QueueInterface does not exist)."""
    import importlib.util

    from bench_many_functions import script
    from gpe.host.call.function import SlicedFunction
    path = tmp_path / "many.py"
    path.write_text(script(12, 1))
    spec = importlib.util.spec_from_file_location("gpe_test_many", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x, w = tf.ones([4, 8]) * 0.1, tf.ones([8, 8]) * 0.05
    for i in range(12):
        sliced = SlicedFunction(getattr(module, f"f{i}"), profile_calls=1, adaptive=False)
        sliced(x, w)  # profiled
        sliced(x, w)  # sliced: its results are not read, the graph may not have run it
        assert sliced.stats()["graph_calls"] == 1, (i, sliced.stats())
        del sliced
    last = SlicedFunction(module.f11, profile_calls=1, adaptive=False)
    expected = float(module.f11(x, w)[1])
    assert [float(last(x, w)[1]) for _ in range(2)] == [expected] * 2
    get_session().fence()
    assert not get_session().failed


@pytest.mark.timeout(120)
def test_a_call_is_one_enqueue_and_a_call_to_another_part_two():
    """A call is one enqueue (its part number and entry values together) into its part's
    dispatch queue, where the sink waits after the call before it to the same part; a
    call to another part first tells the sink to go on to it (tfprog/sink.py). Calls
    alternating between two parts, and several to each, run in the order sent."""
    from harness import python_calls
    log = tf.Variable(tf.zeros([0]), shape=[None])

    def first(x):
        log.assign(tf.concat([log, x], 0))

    def second(x):
        log.assign(tf.concat([log, -x], 0))
    a, b = (gpe.function(f, profile_calls=1, adaptive=False) for f in (first, second))
    one = tf.constant([1.0])
    a(one), b(one), a(one), b(one)  # profiled, then sliced (each part's sink is built)
    sent = []
    for f, n in ((a, 2.0), (a, 3.0), (b, 4.0), (b, 5.0), (a, 6.0), (b, 7.0)):
        calls = python_calls(f, tf.constant([n]))
        sent.append(calls.get("interrupt.py:enqueue"))  # (gpe's every enqueue)
    assert sent == [2, 1, 2, 1, 2, 2], sent  # a's first: b's part was the last one
    assert log.numpy().tolist() == [1.0, -1.0, 1.0, -1.0, 2.0, 3.0, -4.0, -5.0, 6.0, -7.0]
    assert a.stats()["graph_calls"] == 4 and b.stats()["graph_calls"] == 4
