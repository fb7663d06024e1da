"""A process that uses gpe forks while another of its threads runs TensorFlow: the child
must get to its exec (or on with its work), never hang.

gpe registers an at-fork hook (host/runtime/session.py, `_after_fork_in_child`) that started
the session's next generation in the child: it made a TF queue and a cancellation manager
there and dropped the old sinks' queues (freed: TF ops). A lock another thread of the
parent held at the fork (TensorFlow instantiating a function) is held for ever in the
child, which hung in the hook; `subprocess.run(..., preexec_fn=...)`
(CPython runs the at-fork hooks in such a child before the preexec_fn) then never returns
in the parent, whatever its timeout: Popen waits for the child's exec without one. The
suite's own background jobs hung so (test_regressions' scripts were started with a
preexec_fn from the background thread: tests/conftest.py now restores SIGINT instead).

The script below forks 300 times (`subprocess.run(["true"], preexec_fn=...)`) while a
thread makes and calls tf.functions (it hung after 1 to 90 forks in 9 runs); a watchdog in
it kills its process group (the stuck child too) once no fork has returned for 5 s. The
hook now makes and frees no TF object (the child runs its calls eagerly anyway)."""
import os
import subprocess
import sys
import textwrap

import pytest

import background

SCRIPT = """
    import os, subprocess, threading, time
    import tensorflow as tf
    import gpe

    @gpe.function
    def step(x):
        return tf.reduce_sum(x * 2.0)

    for _ in range(5):
        float(step(tf.ones([3])))  # gpe's session exists

    stalled = threading.Event()

    def busy():  # TensorFlow instantiating functions in another thread
        i = 0
        while True:
            if stalled.is_set():  # (a fork stuck: nothing to do but cost CPU)
                time.sleep(0.1)
                continue
            i += 1
            tf.function(lambda x, i=i: x * float(i) + 1.0)(tf.ones([2]))

    threading.Thread(target=busy, daemon=True).start()
    done = [0]

    def watchdog():  # (no fork back for 1 s: `busy` pauses; for 5 s: a hang)
        last, since = -1, time.monotonic()
        while True:
            time.sleep(0.25)
            if done[0] != last:
                last, since = done[0], time.monotonic()
                stalled.clear()
            elif time.monotonic() - since > 5:
                print("HANG after", done[0], "forks", flush=True)
                os.killpg(0, 9)
            elif time.monotonic() - since > 1:
                stalled.set()

    threading.Thread(target=watchdog, daemon=True).start()
    for n in range(300):
        subprocess.run(["true"], preexec_fn=lambda: None)
        done[0] += 1
    print("FORKS", done[0], flush=True)
    os._exit(0)
"""


def _forks():
    with background.folder() as folder:
        path = os.path.join(folder, "forks.py")
        with open(path, "w") as f:
            f.write(textwrap.dedent(SCRIPT))
        return subprocess.run([sys.executable, "-W", "ignore", path], cwd=folder,
                               capture_output=True, text=True, timeout=120,
                               start_new_session=True,  # its own group: what it kills
                               env=background.env(TF_CPP_MIN_LOG_LEVEL="3"))


def background_jobs():
    return {"test_a_fork_while_another_thread_runs_tensorflow_does_not_hang": _forks}


@pytest.mark.timeout(180)
def test_a_fork_while_another_thread_runs_tensorflow_does_not_hang():
    done = background.result(
        f"{__name__}.test_a_fork_while_another_thread_runs_tensorflow_does_not_hang", _forks)
    assert "FORKS 300" in done.stdout and done.returncode == 0, \
        done.stdout[-2000:] + done.stderr[-2000:]
