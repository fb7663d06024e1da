"""No memory growth over 10,000 sliced calls (tracemalloc for Python, RSS for everything)."""
import gc
import os
import subprocess
import sys
import tracemalloc

import tensorflow as tf

import gpe


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


NOT_BACKGROUND = [tracemalloc.Filter(False, f"*{os.sep}{name}") for name in (
    "subprocess.py", "selectors.py", "threading.py", "queue.py", "background.py")] + [
    tracemalloc.Filter(False, tracemalloc.__file__)]


def test_no_growth_over_10000_calls():
    v = tf.Variable(0.0)
    log = []

    def step(x):
        v.assign_add(tf.reduce_sum(x))
        log.append(1)
        return v.read_value() * 2.0

    sliced = gpe.function(step, adaptive=False)  # this test is about the sliced path
    x = tf.ones([8])
    for i in range(1000):  # warm up: every cache, queue and pool reaches its size
        r = sliced(x)
    float(r)
    del log[:]
    gc.collect()
    tracemalloc.start()
    before, before_rss = tracemalloc.take_snapshot(), rss_bytes()
    for i in range(10_000):
        r = sliced(x)
        if i % 1000 == 0:
            float(r)
            del log[:]
    float(r)
    del log[:]
    gc.collect()
    after, after_rss = tracemalloc.take_snapshot(), rss_bytes()
    tracemalloc.stop()
    # what the suite's background thread allocates meanwhile (a child process's output,
    # tests/background.py) is not the calls': +66 KB in a loaded CI run, +27 KB alone
    grown = sum(stat.size_diff for stat in after.filter_traces(NOT_BACKGROUND).compare_to(
        before.filter_traces(NOT_BACKGROUND), "filename"))
    print(f"10,000 calls: Python heap {grown:+d} B, RSS {after_rss - before_rss:+d} B")
    assert sliced.stats()["graph_calls"] == 11_000 - sliced.stats()["profile_calls"]
    assert grown < 64 * 1024
    assert after_rss - before_rss < 16 * 1024 * 1024


def test_a_dropped_function_leaves_the_sink():
    """Each new variant restarts the sink; parts whose function is gone are left out then
    (before, every part ever built stayed, and each restart and call got slower)."""
    from gpe.host.runtime.session import get_session
    x = tf.ones([4])

    def make(i):
        v = tf.Variable(float(i))

        def f(x):
            return tf.reduce_sum(x) * v
        return gpe.function(f, profile_calls=1, adaptive=False)

    counts = []
    for i in range(4):
        sliced = make(i)
        for _ in range(3):
            assert float(sliced(x)) == 4.0 * i
        counts.append(len(get_session().parts))
        del sliced
    assert counts[1:] == counts[:1] * 3, counts


FREEZE = """
import gc
import tensorflow as tf
from gpe.host.runtime.session import get_session
full = []
gc.callbacks.append(lambda phase, info: full.append(info["generation"])
                    if phase == "start" and info["generation"] == 2 else None)
get_session()
print(len(full), gc.get_freeze_count() > 1000)
"""


def test_the_session_freezes_the_heap_without_a_full_collection():
    """gpe's first session moves the objects alive (TensorFlow's) out of the collector's
    reach without a full collection first: that collection was itself a ~140 ms stall,
    most of gpe.load's way to its first call (counted, not timed)."""
    env = {k: v for k, v in os.environ.items() if k != "GPE_GC_FREEZE"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", FREEZE], cwd=root, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == ["0", "True"]
