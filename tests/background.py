"""Child processes some tests assert on, started in the background once the session has
collected its tests.

Most of the suite runs in the pytest process on one core; a few modules assert on child
processes that depend on nothing the tests do (a script run eagerly and under gpe, fuzz
seeds). A module lists those in `background_jobs()` ({key: function of no arguments}, the
key the name of the fixture or test that takes the result); after collection, conftest
starts the jobs of the tests selected, one at a time in one thread, so that they run on the other core while the tests before them run. A test takes
its job's result with `result(f"{__name__}.{key}", fn)`: it waits for a job already started, and runs
one not yet started itself (a module run alone waits for nothing). The children are the
same either way, and so is what the tests assert on them.

The environment the children get is this process's at collection (`ENV`), not the one a
test running at that moment may have changed (monkeypatch.setenv).
"""
from __future__ import annotations

import atexit
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Callable

ENV: dict = {}
_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gpe-tests-background")
_jobs: dict = {}
atexit.register(_pool.shutdown, cancel_futures=True)


def snapshot_environment() -> None:
    ENV.clear()
    ENV.update(os.environ)


def start(key: str, fn: Callable[[], Any]) -> None:
    if key not in _jobs:
        _jobs[key] = _pool.submit(fn)


def result(key: str, fn: Callable[[], Any]) -> Any:
    """The job's result (its exception raised here): waited for if it was started, else
    run now, in this thread."""
    job = _jobs.pop(key, None)
    if job is None or job.cancel():  # never started (or still queued): run it here
        return fn()
    return job.result()


def env(**extra) -> dict:
    return dict(ENV or os.environ, **extra)


def run_script(source: str, timeout: float, **extra_env) -> subprocess.CompletedProcess:
    """`python child.py` with `source` as child.py, in a folder of its own (removed after),
    with the collection-time environment and TF's C++ log quiet."""
    folder = tempfile.mkdtemp(prefix="gpe-tests-")
    try:
        with open(os.path.join(folder, "child.py"), "w") as f:
            f.write(source)
        return subprocess.run([sys.executable, "child.py"], cwd=folder, capture_output=True,
                              text=True, timeout=timeout,
                              env=env(TF_CPP_MIN_LOG_LEVEL="3", **extra_env))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
