"""What a sliced call costs the host, counted (not timed: the machine is shared): the
Python calls gpe's own path runs per call (tests/bench_fallback.py and `gpe bench
--crossing` time it)."""
from __future__ import annotations

import pytest
import tensorflow as tf

import gpe
from gpe.host.runtime import spin
from harness import python_calls

STATE = tf.Variable(0.0)


def send_only(x):
    STATE.assign(x)


@pytest.mark.timeout(300)
def test_a_sliced_call_that_sends_one_tensor_runs_few_python_calls():
    """The entry value is checked against its channel on its dtype enum and shape tuple:
    no ValueSpec is built for it and no TensorShape iterated, and `hasattr` is not asked
    of an eager tensor (Tensor.__getattr__'s slow miss). 146 calls before, 118, then 72
    (a settled timer is one attribute test, no nested atomic steps, the enqueues without
    their Python wrapper, the entry checked against a per-channel exact list), 70, then
    68 (the watchdog's record of a channel's wait made once per channel), two of them the
    enqueues (the entry values, the part number); then 55: one enqueue carries the part
    number and the entry values together (tfprog/sink.py); then 46: the call key taken by
    position (callkey.CallKeys.of_call), the session claimed without nested calls."""
    sliced = gpe.function(send_only, adaptive=False, profile_calls=1)
    x = tf.constant(1.0)
    for _ in range(4):
        sliced(x)
    assert sliced.stats()["graph_calls"] == 3, sliced.stats()
    calls = python_calls(sliced, x)
    assert calls.get("C:TFE_Py_FastPathExecute") == 1, calls
    for slow in ("tensor.py:__getattr__", "tensor_shape.py:__iter__", "channels.py:spec_of"):
        assert slow not in calls, (slow, calls)
    assert sum(calls.values()) <= 46, calls
    assert STATE.numpy() == 1.0


def plus_one(x):
    return x + 1.0


@pytest.mark.timeout(300)
def test_a_round_trip_runs_few_python_calls(monkeypatch):
    """`float(f(x))`: the call sends x and the part number (one enqueue through TF's fast
    path), and the float waits for the result (one cancellable dequeue, without
    execute_with_cancellation's lookups; counted here without the polls before it, see
    host/runtime/spin.py). 156 calls before, 111, 109, 105 (the watchdog's record of a
    channel's wait made once per channel), then 93 (one enqueue), 84 (the call key taken
    by position)."""
    monkeypatch.setattr(spin, "SPIN_S", 0.0)
    sliced = gpe.function(plus_one, adaptive=False, profile_calls=1)
    x = tf.constant(1.0)
    for _ in range(4):
        assert float(sliced(x)) == 2.0
    assert sliced.stats()["graph_calls"] == 3, sliced.stats()
    calls = python_calls(lambda: float(sliced(x)))
    assert calls.get("C:TFE_Py_FastPathExecute") == 1, calls
    assert calls.get("C:TFE_Py_ExecuteCancelable") == 1, calls
    assert "execute.py:execute_with_cancellation" not in calls, calls
    assert sum(calls.values()) <= 84, calls
    assert sliced.stats()["graph_calls"] == 4, sliced.stats()


@pytest.mark.timeout(60)
def test_the_host_polls_for_a_value_only_while_polling_finds_it(monkeypatch):
    """Before a dequeue that would block, the host polls the queue's size (the graph's
    wake-up of a sleeping host is the slow half of a round trip) while the machine has a
    core to spare; a queue whose value did not come within the window is not polled for
    its next 1, then 3, 7 waits (polled once between them); a poll that finds a value
    there polls once, and the next wait polls again."""
    monkeypatch.setattr(spin, "SPIN_S", 1e-4)
    queue = tf.queue.FIFOQueue(-1, [tf.float32])
    waits = spin.Spin()
    monkeypatch.setattr(spin, "spare_core", lambda: False)  # a loaded machine: no polls
    assert not waits.until_ready(queue.queue_ref) and waits.polls == 0
    monkeypatch.setattr(spin, "spare_core", lambda: True)
    polled = []
    for _ in range(13):  # empty: misses, then skips 1, 3, 7 waits
        before = waits.polls
        assert not waits.until_ready(queue.queue_ref)
        polled.append(waits.polls > before)
    assert polled == [True, False, True] + [False] * 3 + [True] + [False] * 6, polled
    queue.enqueue([1.0])
    before = waits.polls
    assert not waits.until_ready(queue.queue_ref) and waits.polls == before  # the last skip
    assert waits.until_ready(queue.queue_ref) and waits.polls == before + 1
    assert waits.until_ready(queue.queue_ref) and waits.polls == before + 2  # polled again
