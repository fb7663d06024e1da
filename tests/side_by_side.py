"""Independent child processes run side by side.

Most of a test that starts child processes (a script eagerly and under gpe, a worker per
seed range) is the children's work, each starting with TensorFlow's import (about 3 s of
one core); pytest only waits. Started side by side, the test waits for the longest child
instead of their sum. What each child does and what the test asserts are the same."""
from __future__ import annotations

import concurrent.futures
import subprocess
from typing import Any, Callable


def side_by_side(*calls: Callable[[], Any]) -> list:
    """Call each function (no arguments) in a thread of its own, all at once; return their
    results in order. An exception from one is raised once all have ended."""
    with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
    return [f.result() for f in futures]


def run_all(*commands: list, **options) -> list[subprocess.CompletedProcess]:
    """subprocess.run(command, **options) for each command, side by side."""
    return side_by_side(*(lambda c=c: subprocess.run(c, **options) for c in commands))
