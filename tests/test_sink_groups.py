"""Parts are kept in groups, one sink per group (host/runtime/sinks.py): adding a part rebuilds only
its group's sink, so it costs the same however many parts there are (counted: the parts
and the functions each new sink reaches, which TensorFlow copies and looks into when it
instantiates the sink), and calls alternating between groups keep eager's order."""
from __future__ import annotations

import threading

import pytest
import tensorflow as tf

import gpe
from gpe.host.runtime import session as session_module, sinks
from gpe.tfprog import sink as sink_module

X = tf.ones([4, 8]) * 0.1
W = tf.ones([8, 8]) * 0.05


def make(i: int):
    def grouped(x, w):
        a = tf.matmul(x, w)
        return tf.reduce_sum(tf.tanh(tf.nn.relu(a) * (1.0 + i)))
    grouped.__name__ = grouped.__qualname__ = f"grouped{i}"
    return grouped


def group_of(sliced) -> int:
    variant = next(iter(sliced.cache.built.values()))
    return sinks.locate(variant.registration().index)[0]


@pytest.mark.timeout(900)
def test_adding_the_kth_part_costs_what_adding_the_second_did(monkeypatch):
    built = []  # per new sink: (its parts, the functions it reaches)
    ours = []   # of those, the sinks made of this test's parts only (earlier tests' parts
    original = session_module.build_sink  # may share a group with the first of them)

    def counting(control, parts, timer, acks):
        made = original(control, parts, timer, acks)
        names = getattr(made, "names", None)
        built.append((len(parts), len(sink_module.reachable(names[-1])) if names else None))
        if all("gpe_grouped_" in f.function_def.signature.name for f, _, _ in parts):
            ours.append(built[-1])
        return made
    monkeypatch.setattr(session_module, "build_sink", counting)
    size = sinks.GROUP_SIZE
    functions = [gpe.function(make(i), profile_calls=1, adaptive=False)
                 for i in range(2 * size + 3)]
    for i, sliced in enumerate(functions):
        sliced(X, W)  # profiled
        assert float(sliced(X, W)) == pytest.approx(float(make(i)(X, W)), rel=1e-6)
        assert sliced.stats()["graph_calls"] == 1
    assert len(built) == len(functions)  # one new sink per part, never all of them again
    assert max(parts for parts, _ in built) <= size
    # a new sink reaches its own group's functions only: how many depends on how many
    # parts its group holds (at most GROUP_SIZE), never on the parts in other groups
    by_parts = {}
    for parts, reached in ours:
        assert by_parts.setdefault(parts, reached) == reached, built
    assert by_parts[2] - by_parts[1] == by_parts[size] - by_parts[size - 1], built
    groups = {group_of(s) for s in functions}
    assert len(groups) >= 3, groups


def test_calls_alternating_between_groups_keep_eager_order():
    v = tf.Variable(1.0)

    def double(x):
        v.assign(v * 2.0 + tf.reduce_sum(x))
        return v.read_value()

    def count(x):
        v.assign_add(1.0)
        return tf.reduce_sum(x) * v

    fillers = [gpe.function(make(100 + i), profile_calls=1, adaptive=False)
               for i in range(sinks.GROUP_SIZE)]
    a = gpe.function(double, profile_calls=1, adaptive=False)
    a(X)  # profiled
    a(X)  # built, in some group
    for f in fillers:  # the group fills up: count's part goes to another
        f(X, W), f(X, W)
    b = gpe.function(count, profile_calls=1, adaptive=False)
    b(X)
    b(X)
    assert group_of(a) != group_of(b)
    start = float(v.numpy())
    got = [(a if i % 3 else b)(X) for i in range(12)]  # not read until the end
    got = [float(t) for t in got]
    v.assign(start)
    expected = [float((double if i % 3 else count)(X)) for i in range(12)]
    assert got == expected
    assert a.stats()["graph_calls"] == 1 + 8 and b.stats()["graph_calls"] == 1 + 4


@pytest.mark.timeout(300)
def test_each_new_sink_is_instantiated_on_the_one_instantiating_thread_first(monkeypatch):
    """TensorFlow's oneDNN pass keeps its kernel-registry answers per thread (host/runtime/sinks.py):
    each new sink is instantiated on the session's one instantiating thread, running no
    call there (its control queue is left to it), before its own thread runs the calls."""
    seen = []  # (what, sink, thread name), in order
    prepare, run = sink_module.Sink.prepare, sink_module.Sink.__call__

    def recorded_prepare(self, stop):
        seen.append(("prepare", self.names[-1], threading.current_thread().name))
        return prepare(self, stop)

    def recorded_run(self):
        seen.append(("run", self.names[-1], threading.current_thread().name))
        return run(self)
    monkeypatch.setattr(sink_module.Sink, "prepare", recorded_prepare)
    monkeypatch.setattr(sink_module.Sink, "__call__", recorded_run)
    functions = [gpe.function(make(100 + i), profile_calls=1, adaptive=False)
                 for i in range(3)]
    for i, sliced in enumerate(functions):
        sliced(X, W)  # profiled
        for _ in range(2):  # the second call is sent to a sink that has run one already
            assert float(sliced(X, W)) == pytest.approx(float(make(100 + i)(X, W)), rel=1e-6)
        assert sliced.stats()["graph_calls"] == 2
    runs = [(name, thread) for what, name, thread in seen if what == "run"]
    prepared = [name for what, name, thread in seen if what == "prepare"]
    assert len(runs) >= 3 and len(prepared) == len(set(prepared))
    assert {thread for what, _, thread in seen if what == "prepare"} == {"gpe-instantiator"}
    for name, thread in runs:
        assert thread != "gpe-instantiator"
        assert seen.index(("prepare", name, "gpe-instantiator")) < \
            seen.index(("run", name, thread)), seen


class _Recorded:
    """A stand-in for a sink, recording where it was prepared."""

    def __init__(self):
        self.prepared_on = None

    @staticmethod
    def stop_for_prepare(stop):
        stop.enqueue(tf.constant(-1, tf.int32))

    def prepare(self, stop):
        assert int(stop.dequeue()) == -1  # the STOP the calling thread gave it
        self.prepared_on = threading.current_thread().name


@pytest.mark.timeout(60)
def test_an_instantiating_thread_whose_setup_fails_still_answers_every_job(monkeypatch):
    """Setting the instantiating thread's call options failed outside the job's `try`:
    the thread died and the sink thread waited for it for ever (its call hung)."""
    failures = [RuntimeError("the thread's options could not be set")]

    def failing_once():
        if failures:
            raise failures.pop()
    monkeypatch.setattr(sinks, "use_exact_arithmetic_on_this_thread", failing_once)
    instantiator = sinks.Instantiator()
    first, second = _Recorded(), _Recorded()
    assert instantiator.prepare(first).wait(30)  # its job failed, and was answered
    assert first.prepared_on is None
    assert instantiator.prepare(second).wait(30)
    assert second.prepared_on == "gpe-instantiator"


@pytest.mark.timeout(300)
def test_a_sink_thread_whose_setup_fails_fails_the_call_and_the_next_one_runs(monkeypatch):
    """The sink thread's setup raising killed the thread before its `try`: the call sent
    to it waited for ever. Now the call fails with that error, and the next call (a fresh
    generation of the session) runs sliced."""
    failures = [RuntimeError("the sink thread's options could not be set")]

    def failing_once():
        if failures:
            raise failures.pop()
    monkeypatch.setattr(session_module, "use_exact_arithmetic_on_this_thread", failing_once)
    sliced = gpe.function(make(300), profile_calls=1, adaptive=False)
    expected = float(make(300)(X, W))
    sliced(X, W)  # the profile call, eager
    with pytest.raises(Exception, match="options could not be set"):
        float(sliced(X, W))  # sent to the new sink, whose thread failed
    assert not failures
    assert float(sliced(X, W)) == pytest.approx(expected, rel=1e-6)
    assert float(sliced(X, W)) == pytest.approx(expected, rel=1e-6)
    assert sliced.stats()["graph_calls"] >= 2
