"""The runtime around sliced calls: refusals, errors from the graph, shutdown, pipelining."""
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import tensorflow as tf

import background
import gpe
from harness import check, run
from gpe.host.runtime.opcount import eager_ops, user_ops

X = tf.constant([1.0, 2.0, 3.0])


def test_unsupported_statement_runs_eagerly_with_one_warning():
    def make(log):
        def forgetful(x):
            s = tf.reduce_sum(x)
            t = [s]
            del t[0]
            log.append(float(s))
            return s * 2.0
        return forgetful, {}
    with pytest.warns(gpe.GpeWarning, match="not sliced yet"):
        under = check(make, [(X,), (X * 0,), (X,)], graph_calls=0,
                      host_ops_allowed=frozenset({"Sum", "Mul", "Const"}))
    stats = under.target.stats()
    assert stats["eager_calls"] == 3 and len(stats["fallbacks"]) == 1


def test_error_inside_graph_raises_eager_type_and_session_recovers():
    def pick(x, i):
        return tf.gather(x, i) * 2.0
    sliced = gpe.function(pick, profile_calls=1)
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
    sliced = gpe.function(step, profile_calls=1, adaptive=False)  # this test is about the sliced path
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
    sliced = gpe.function(step, profile_calls=1, adaptive=False)
    for _ in range(300):
        sliced(X)
    assert np.array_equal(sliced(X).numpy(), (X * 2.0).numpy())


def run_script(source: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run `source` as a script file (gpe needs the functions' source), in a folder of its
    own, with the collection-time environment (in the background: tests/background.py)."""
    with background.folder() as folder:
        path = os.path.join(folder, "script.py")
        with open(path, "w") as f:
            f.write(textwrap.dedent(source))
        return subprocess.run([sys.executable, path], capture_output=True, text=True,
                              timeout=timeout, env=background.env(),
                              cwd=folder)


EXIT_SCRIPT = textwrap.dedent("""
        import tensorflow as tf, gpe
        v = tf.Variable(0.0)
        def step(x):
            v.assign_add(x)
            return v.read_value()
        s = gpe.function(step, profile_calls=1)
        for i in range(5):
            r = s(tf.constant(1.0))
        print(float(r), s.stats()["graph_calls"])
        r = s(tf.constant(1.0))  # still in flight at exit
    """)


def test_interpreter_exit_does_not_hang():
    done = background.result(f"{__name__}.test_interpreter_exit_does_not_hang",
                             lambda: run_script(EXIT_SCRIPT, timeout=120))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "5.0 4"


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
    eager = run(make, calls, sliced=False)
    under = run(make, calls, sliced=True)
    assert eager.log == under.log == ["after gather"] * 3
    assert np.array_equal(eager.variables["v"], under.variables["v"])
    assert eager.results[2] == under.results[2]  # same type, same op error text
    assert under.results[2][:2] == ("raised", "InvalidArgumentError")
    assert "indices = 7 is not in [0, 3) [Op:GatherV2]" in under.results[2][2]
    assert under.target.stats()["graph_calls"] == 3
    # the note names the user's line
    line = make.__code__.co_firstlineno + 4
    sliced = under.target
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        float(sliced(X, tf.constant(9)))
    assert any(f"test_runtime.py:{line}" in note for note in info.value.__notes__)


def heavy(x):
    """Slow graph work: a chain of large matmuls (about a second on two cores)."""
    a = tf.matmul(x, x) / 1000.0
    b = tf.matmul(a, a) / 1000.0
    c = tf.matmul(b, b) / 1000.0
    d = tf.matmul(c, c) / 1000.0
    return tf.reduce_sum(d)


def test_a_stuck_wait_raises_naming_channel_and_function_then_session_recovers():
    from gpe.host.runtime.session import get_session
    from gpe.host.runtime.watchdog import GpeTimeoutError
    sliced = gpe.function(heavy, profile_calls=1)
    small = tf.ones([4, 4])
    big = tf.ones([2000, 2000])
    sliced(small)
    session = get_session()
    old, session.wait_timeout = session.wait_timeout, 0.05
    try:
        big_sliced = gpe.function(heavy, profile_calls=1)
        big_sliced(big)  # profile call, eager
        with pytest.raises(GpeTimeoutError, match=r"channel .*heavy.*test_runtime.py"):
            for _ in range(3):
                float(big_sliced(big))
    finally:
        session.wait_timeout = old
    # the next call works, and gives eager's bits (gpe's graphs keep eager's arithmetic)
    assert float(sliced(small)) == float(heavy(small))


CTRL_C_SCRIPT = textwrap.dedent("""
        import os, signal, threading, time, tensorflow as tf, gpe
        def heavy(x):
            a = tf.matmul(x, x) / 1000.0
            b = tf.matmul(a, a) / 1000.0
            c = tf.matmul(b, b) / 1000.0
            d = tf.matmul(c, c) / 1000.0
            e = tf.matmul(d, d) / 1000.0
            f = tf.matmul(e, e) / 1000.0
            return tf.reduce_sum(f)
        s = gpe.function(heavy, profile_calls=1)
        s(tf.ones([4, 4])); s(tf.ones([4, 4]))
        big = tf.ones([1500, 1500])  # one call ~1-2 s under load: it ends within close()'s wait
        s(big)  # profile call (eager)
        s(big)  # the TF part is built; this call and the next run in the graph
        pending = [s(big) for _ in range(8)]  # several seconds of graph work
        threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        start = time.monotonic()
        try:
            float(pending[-1])
            print("finished after", time.monotonic() - start, s.stats())
        except KeyboardInterrupt:
            print("interrupted after", round(time.monotonic() - start, 1))
    """)


def background_jobs():
    """The scripts the tests above and below run, started after collection."""
    return {"test_interpreter_exit_does_not_hang": lambda: run_script(EXIT_SCRIPT, timeout=120),
            "test_ctrl_c_during_a_wait_raises_keyboard_interrupt_at_once":
                lambda: run_script(CTRL_C_SCRIPT)}


def test_ctrl_c_during_a_wait_raises_keyboard_interrupt_at_once():
    done = background.result(
        f"{__name__}.test_ctrl_c_during_a_wait_raises_keyboard_interrupt_at_once",
        lambda: run_script(CTRL_C_SCRIPT))
    assert done.returncode == 0, done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("interrupted after"), done.stdout
    assert float(last.split()[-1]) < 3.0


@pytest.mark.filterwarnings("ignore:.*another sliced call was running:gpe.GpeWarning")
def test_calls_from_several_threads_never_interleave():
    import threading

    def scale(x, k):
        y = x * k
        return tf.reduce_sum(y) + k
    sliced = gpe.function(scale, profile_calls=1, adaptive=False)  # about interleaving, not speed
    sliced(X, 1.0)
    errors = []

    def worker(k):
        for i in range(40):
            value = float(sliced(X, float(k * 100 + i)))
            if value != float(scale(X, float(k * 100 + i))):
                errors.append((k, i, value))
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    stats = sliced.stats()
    assert stats["calls"] == 161 and stats["graph_calls"] + stats["eager_calls"] == 161
    assert stats["graph_calls"] > 0


@pytest.mark.filterwarnings("ignore:.*another sliced call was running:gpe.GpeWarning")
def test_sliced_function_called_inside_another_runs_correctly():
    def make(log):
        v = tf.Variable(1.0)
        inner = gpe.function(lambda_free_inner, profile_calls=1)

        def outer(x):
            v.assign_add(tf.reduce_sum(x))
            r = inner(v.read_value())
            log.append(float(r))
            v.assign(v * 0.5)
            return v.read_value()
        return outer, {"v": v}
    check(make, [(X,)] * 4, host_ops_allowed=frozenset({"Mul", "AddV2", "Const"}))


def lambda_free_inner(t):
    return t * 2.0 + 1.0


GLOBAL_SCALE = 2.0


def test_entry_value_that_no_longer_fits_runs_that_call_eagerly():
    global GLOBAL_SCALE

    def scaled(x):
        return x * GLOBAL_SCALE
    sliced = gpe.function(scaled, profile_calls=1)
    GLOBAL_SCALE = 2.0
    assert np.array_equal(sliced(X).numpy(), (X * 2.0).numpy())
    assert np.array_equal(sliced(X).numpy(), (X * 2.0).numpy())
    GLOBAL_SCALE = np.float32(3.0)  # the global changed type: its channel was built for float
    with pytest.warns(gpe.GpeWarning, match="expected float float64"):
        assert np.array_equal(sliced(X).numpy(), (X * np.float32(3.0)).numpy())
    GLOBAL_SCALE = 4.0
    assert np.array_equal(sliced(X).numpy(), (X * 4.0).numpy())
    stats = sliced.stats()
    assert stats["graph_calls"] == 2 and stats["eager_calls"] == 2


def test_a_function_faster_eagerly_becomes_plain_and_a_heavy_one_stays_sliced():
    def tiny(x):
        return x + 1.0

    def heavy_step(x):  # many small ops: eagerly each pays its dispatch, in a graph ~none
        for _ in range(20):
            x = tf.tanh(x * 0.9 + 0.1) - tf.sigmoid(x) * 0.01
        return tf.reduce_sum(x)

    # the two differ ~10x each way, so the verdicts hold on a loaded machine (the logic
    # itself, with its hysteresis, is tested on a fake clock in test_adaptive.py)
    small, medium = tf.constant(1.0), tf.ones([8, 8]) / 8
    sliced_tiny, sliced_heavy = gpe.function(tiny, profile_calls=1), gpe.function(heavy_step, profile_calls=1)
    for _ in range(100):  # 1 profile call, then the adaptive timing's 90 calls (adaptive.py)
        assert float(sliced_tiny(small)) == 2.0
        assert float(sliced_heavy(medium)) == float(heavy_step(medium))
    assert sliced_tiny.plain, sliced_tiny.stats()  # gpe's crossing costs more than x + 1
    assert any("eager is faster" in r for r in sliced_tiny.stats()["fallbacks"])
    heavy_stats = sliced_heavy.stats()
    assert not sliced_heavy.plain and not heavy_stats["fallbacks"], heavy_stats["fallbacks"]


def test_a_sink_of_a_failed_generation_does_not_fail_the_next_one():
    """A timed-out sink may still be running when the next call starts a new generation;
    when it then ends with an error (its queues are gone), the new generation stays
    healthy (it used to be failed by it: the next call raised NotFoundError)."""
    from gpe.host.runtime.session import get_session
    sliced = gpe.function(heavy, profile_calls=1)
    small = tf.ones([4, 4])
    sliced(small)
    float(sliced(small))
    session = get_session()
    stale = session.generation
    session.fail(RuntimeError("planted"))
    session.ensure_healthy()
    assert float(sliced(small)) == float(heavy(small))  # a new generation runs it

    ran = []

    def sink():
        ran.append(True)
        raise tf.errors.NotFoundError(None, None, "queue does not exist")
    # (sink, the thread of the sink before it, its instantiation done, pins, generation)
    ended = threading.Thread(target=session._run, args=(sink, None, None, [], stale))
    ended.start()  # on a thread of its own, as a sink runs (_run marks its thread a sink's)
    ended.join(60)
    assert ran, "the stale sink did not run"  # (a call of _run that no longer fits raised)
    assert not ended.is_alive() and not session.failed
    assert float(sliced(small)) == float(heavy(small))


def test_the_adaptive_timer_survives_a_nested_call_finishing_its_measurement():
    """While gpe times a variant's eager calls, a recursive call of the same function is
    timed too and may finish the measurement first; the outer call then crashed with
    "'NoneType' object has no attribute 'append'" (a tree network under gpe run)."""
    from gpe.host.speculation.adaptive import BLOCK_CALLS, WARM_CALLS, AdaptiveTimer
    now = [0.0]
    timer = AdaptiveTimer(clock=lambda: now[0])
    for _ in range(WARM_CALLS):
        timer.sliced_call(now[0], lambda: None)
    verdicts = []
    while not timer.settled:  # one block each way here (a clear case: adaptive.CLEAR)
        for _ in range(BLOCK_CALLS):
            start = now[0]
            now[0] += 1e-3
            timer.sliced_call(start, lambda: None)
        assert timer.timing_eager
        outer = now[0]
        for _ in range(BLOCK_CALLS):  # inner calls of one outer call
            start = now[0]
            now[0] += 1e-6
            verdicts.append(timer.eager_call(start))
    assert verdicts[-1] is not None and timer.eager_faster  # eager was faster
    assert timer.eager_call(outer) is None  # the outer call ends after the verdict


@pytest.mark.timeout(120)
def test_two_threads_fencing_at_once_each_read_only_missing_acknowledgements():
    """Two threads reading `float(v)` after sliced calls fence at once: each waits only for
    acknowledgements not read yet (both once read the same missing ones, and the second
    waited for acknowledgements that never came)."""
    import threading
    v = tf.Variable(0.0)

    def step(x):
        v.assign_add(tf.reduce_sum(x))
        return x * 2.0
    sliced = gpe.function(step, profile_calls=1, adaptive=False)
    for _ in range(3):
        sliced(X)
    results, session = [], sliced.variants[next(iter(sliced.variants))].session
    for _ in range(20):
        sliced(X)
        threads = [threading.Thread(target=lambda: results.append(float(v)), daemon=True)
                   for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads)
    assert session.acknowledged == session.sent and len(results) == 40


def test_a_call_while_a_tf_function_traces_sends_nothing():
    """A sliced function called inside tf.function: AutoGraph converts the user's function
    (its tensor `if` becomes a cond), not gpe's code, and the session counts no call."""
    def f(x):
        if tf.reduce_sum(x) > 0:
            return x * 2.0
        return x
    sliced = gpe.function(f, profile_calls=1, adaptive=False)
    for _ in range(3):
        sliced(X)
    session = sliced.variants[next(iter(sliced.variants))].session
    session.fence()
    sent = session.sent
    outer = tf.function(lambda x: sliced(x) + 1.0)
    assert outer(X).numpy().tolist() == [3.0, 5.0, 7.0]
    assert outer(-X).numpy().tolist() == [0.0, -1.0, -2.0]
    assert session.sent == sent


def test_the_session_says_when_a_new_sink_was_starting():
    """The adaptive timer drops a block during which a sink was starting (adaptive.py):
    from a sink's start until the host has read the acknowledgement of the first call
    sent after it (TensorFlow instantiated it by then)."""
    import time
    from gpe.host.runtime.session import get_session

    def doubled(x):
        return tf.reduce_sum(x * 2.0)

    session = get_session()
    session.fence()
    before = time.perf_counter()
    sliced = gpe.function(doubled, profile_calls=1)
    small = tf.ones([3])
    assert float(sliced(small)) == 6.0  # the profile call
    result = sliced(small)  # registers the part: a new sink starts
    assert session.sink_started_since(before)
    assert float(result) == 6.0 and sliced.stats()["graph_calls"] == 1
    session.fence()  # reads the first call's acknowledgement: the sink is ready
    after = time.perf_counter()
    assert session.sink_started >= before and session.sink_ready <= after
    assert not session.sink_started_since(after)
