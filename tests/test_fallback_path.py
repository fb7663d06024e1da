"""Where gpe falls back, calls take the short way to the user's function: a signature
refused for good goes straight to it (counted in `refused_calls`), without slicing,
profiling or building again. Counts, not times (tests/bench_fallback.py times them)."""
from __future__ import annotations

import warnings

import pytest
import tensorflow as tf

import gpe
from harness import check, python_calls

X = tf.ones([4, 8])
Y = tf.ones([4, 8]) * 0.5


@pytest.mark.timeout(300)
def test_a_refused_signature_goes_straight_to_the_function(monkeypatch):
    """A tensor made by host code inside a TF `with` block cannot cross into it: the key is
    refused when its variant is built; every later call with it takes the fast path."""
    def make(log):
        w = tf.Variable(tf.ones([8, 8]) * 0.1)

        def scale():
            log.append("scale")
            return w[0, 0] * 1.5

        def step(x, y):
            with tf.GradientTape() as tape:
                s = scale()
                loss = tf.reduce_sum(tf.matmul(x, w) * y) * s
            w.assign_sub(0.01 * tape.gradient(loss, w))
            return loss
        return step, {"w": w}

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpe.GpeWarning)
        under = check(make, [(X, Y)] * 10, graph_calls=0,
                      host_ops_allowed=frozenset({"ReadVariableOp", "Mul", "MatMul", "Sum",
                                                  "OnesLike", "AssignSubVariableOp", "Identity",
                                                  "StridedSlice", "Tile", "Reshape", "AddN",
                                                  "BroadcastTo", "Shape", "Const",
                                                  "BroadcastGradientArgs", "AddV2"}))
    sliced = under.target
    stats = sliced.stats()
    assert any("cannot cross into it" in r for r in stats["fallbacks"]), stats
    profiled = stats["profile_calls"]
    assert stats["refused_calls"] == 10 - profiled, stats  # every call after the refusal

    # and nothing is sliced, profiled or built for it again
    def fail(*args, **kwargs):
        raise AssertionError("sliced again")
    monkeypatch.setattr(sliced.builder, "plan", fail)
    monkeypatch.setattr(sliced.builder, "profile", fail)
    for _ in range(5):
        sliced(X, Y)
    after = sliced.stats()
    assert after["refused_calls"] == stats["refused_calls"] + 5
    assert after["profile_calls"] == profiled and after["graph_calls"] == 0


@pytest.mark.timeout(300)
def test_the_fallback_path_runs_few_python_calls():
    """A refused signature's call pays gpe's lookup before the user's function: the call
    key and the checks around it. Counted, not timed: TF's replica-context check (a
    distribute_lib call chain that catches an IndexError outside any strategy, 10 Python
    calls) is one look at the thread's strategy stack, and a tensor's dtype name comes
    from its enum (not two properties): 44 calls before, 34 now."""
    w = tf.Variable(tf.ones([8, 8]) * 0.1)

    def scale():  # host work (.numpy()) making a tensor used inside the tape: refused
        return tf.constant(float(w[0, 0].numpy()) * 1.5)

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.matmul(x, w) * y) * scale()
        return tape.gradient(loss, w)

    def nothing(*args):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpe.GpeWarning)
        sliced = gpe.function(step, profile_calls=1)
        for _ in range(3):
            sliced(X, Y)
    assert sliced.stats()["refused_calls"] >= 1, sliced.stats()
    sliced.fn = nothing  # what gpe's own path costs, without the function's
    sliced(X, Y)
    calls = python_calls(sliced, X, Y)
    assert calls.get("test_fallback_path.py:nothing") == 1
    assert not any(name.startswith("distribute_lib.py") for name in calls), calls
    assert "ops.py:dtype" not in calls, calls
    assert sum(calls.values()) <= 34, calls


def test_an_error_of_a_call_run_eagerly_has_eager_context():
    """Where gpe runs a call eagerly after catching one of its own exceptions (a statement
    the slicer refuses, arguments the signature does not take), the user's error had gpe's
    exception as its context ("During handling of the above exception, another exception
    occurred" in its traceback); eager's has none."""
    def refused(x):
        parts = {"a": 1}
        del parts["a"]
        raise ValueError("from the function")

    def two(x, y):
        return x + y
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpe.GpeWarning)
        for fn, args, error in ((refused, (X,), ValueError), (two, (X,), TypeError)):
            sliced = gpe.function(fn)
            for _ in range(2):
                with pytest.raises(error) as raised:
                    sliced(*args)
                assert raised.value.__context__ is None, repr(raised.value.__context__)
