"""Child processes some tests assert on, run in the background once the session has
collected its tests.

Most of the suite's time is child processes (a script run eagerly and under gpe, a bundle's
extraction, workers of a cluster, fuzz seeds) while pytest waits. A module lists the children
that depend on nothing its tests do in `background_jobs()` ({key: function of no arguments},
the key the name of the fixture or test that takes the result); after collection, conftest
queues the jobs of the tests selected, in the order of the tests. One thread runs them from
the end of the queue (the job whose test comes last first), so that they run on the other
core while pytest works from the front. A test takes its job's result with
`result(f"{__name__}.{key}", fn)`: it waits for a job already started, and runs one not yet
started itself (a module run alone waits for nothing). The two meet once, where at most one
test waits; the children are the same either way, and so is what the tests assert on them.

The environment the children get is this process's at collection (`ENV`), not the one a
test running at that moment may have changed (monkeypatch.setenv); a job that needs a folder
makes its own (`folder()`), since pytest's tmp_path belongs to the test that asks for it.
"""
from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable

ENV: dict = {}
_jobs: dict = {}   # key: its Future (pending, running or done)
_queue: list = []  # (fn, Future, key) not yet taken: the thread takes the last
_wake = threading.Condition()
_thread: threading.Thread | None = None
_closing = False
_T0 = time.perf_counter()


def snapshot_environment() -> None:
    ENV.clear()
    ENV.update(os.environ)


def start(key: str, fn: Callable[[], Any]) -> None:
    global _thread
    with _wake:
        if key in _jobs or _closing:
            return
        _jobs[key] = job = concurrent.futures.Future()
        _queue.append((fn, job, key))
        if _thread is None:
            _thread = threading.Thread(target=_work, name="gpe-tests-background", daemon=True)
            _thread.start()
        _wake.notify()


def _work() -> None:
    while True:
        with _wake:
            while not _queue and not _closing:
                _wake.wait()
            if _closing:
                return
            fn, job, key = _queue.pop()  # the job whose test comes last
        if not job.set_running_or_notify_cancel():  # its test took it: ran it itself
            continue
        started = time.perf_counter()
        try:
            job.set_result(fn())
        except BaseException as exc:  # noqa: BLE001  raised where the test takes it
            job.set_exception(exc)
        _log("ran", key, started)


@atexit.register
def _close() -> None:
    """Jobs not started are dropped; one running is waited for (its children end)."""
    global _closing
    with _wake:
        _closing = True
        _wake.notify()
    if _thread is not None:
        _thread.join()


def result(key: str, fn: Callable[[], Any]) -> Any:
    """The job's result (its exception raised here): waited for if it was started, else
    run now, in this thread."""
    job = _jobs.pop(key, None)
    started = time.perf_counter()
    try:
        if job is None or job.cancel():  # never started (or still queued): run it here
            return fn()
        return job.result()
    finally:
        _log("ran here" if job is None or job.cancelled() else "waited for", key, started)


def _log(what: str, key: str, started: float) -> None:
    """GPE_TEST_JOBS_LOG=FILE: each job's time, in the background or in its test, and each
    test's wait for one (where the suite's time goes)."""
    path = os.environ.get("GPE_TEST_JOBS_LOG")
    if path:
        now = time.perf_counter()
        with open(path, "a") as f:
            f.write(f"{now - _T0:8.1f} {what:<10} {now - started:7.2f} s {key}\n")


@contextlib.contextmanager
def folder():
    """A folder of its own for a job's files, removed after."""
    path = tempfile.mkdtemp(prefix="gpe-tests-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def env(**extra) -> dict:
    return dict(ENV or os.environ, **extra)


def run_in_folder(files: dict, *commands: list, timeout: float = 240,
                  environment: dict | None = None) -> list[subprocess.CompletedProcess]:
    """Each command run side by side in one folder of their own holding `files` ({name:
    text}, made first; removed after), with the collection-time environment and TF's C++
    log quiet unless `environment` is given: their runs, in order."""
    from side_by_side import side_by_side
    with folder() as path:
        for name, text in files.items():
            with open(os.path.join(path, name), "w") as f:
                f.write(text)
        return side_by_side(*(lambda c=c: subprocess.run(
            c, cwd=path, capture_output=True, text=True, timeout=timeout,
            env=environment or env(TF_CPP_MIN_LOG_LEVEL="3")) for c in commands))


def run_script(source: str, timeout: float, **extra_env) -> subprocess.CompletedProcess:
    """`python child.py` with `source` as child.py, in a folder of its own (removed after),
    with the collection-time environment and TF's C++ log quiet."""
    with folder() as path:
        with open(os.path.join(path, "child.py"), "w") as f:
            f.write(source)
        return subprocess.run([sys.executable, "child.py"], cwd=path, capture_output=True,
                              text=True, timeout=timeout,
                              env=env(TF_CPP_MIN_LOG_LEVEL="3", **extra_env))
