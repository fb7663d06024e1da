"""Waiting for a value the graph is about to send: poll a little before sleeping.

A round trip (`float(f(x))`: the host sends a call and waits for its result) wakes two
threads: the graph's, which the call's enqueue wakes, and the host's, asleep in its
dequeue until the graph's enqueue of the result wakes it. The second wake-up is the
slow one on these machines (a sleeping thread's futex wake and reschedule, tens of
microseconds, more under load), and the result of a small call comes within a few
dozen. So before a dequeue that would block, the host polls the queue's size for up to
`SPIN_S`; the dequeue then finds the value there and nobody sleeps.

Polling burns the host's CPU, which the graph may need (2 cores): the host polls only
while the machine has a core to spare (the 1-minute load average, read once a second,
under the number of cores this process may use: on the shared 2-core machine at a load
of 6, polling made a round trip 4% slower and cost 15% more CPU); and a queue whose
value did not come within the window is not polled for its next 1, 3, 7, ... waits (up
to `MAX_SKIP`), and is polled again once a poll found its value. `GPE_SPIN_US=0` turns
polling off.
"""
from __future__ import annotations

import os
import time

from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import context


def _window() -> float:
    try:
        return max(0.0, float(os.environ.get("GPE_SPIN_US", "150"))) * 1e-6
    except ValueError:
        return 150e-6


SPIN_S = _window()
MAX_SKIP = 63  # waits not polled after repeated misses (then one poll to try again)
_now = time.perf_counter
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
_spare = [0.0, True]  # (when the load was last read, whether a core was spare then)


def spare_core() -> bool:
    """Whether the machine had a core to spare at the last look (once a second)."""
    now = _now()
    if now - _spare[0] > 1.0:
        try:
            _spare[:] = now, os.getloadavg()[0] < (_CORES or 1)
        except OSError:  # no load average here: poll
            _spare[:] = now, True
    return _spare[1]


class Spin:
    """One queue's polling state (see the module docstring)."""

    __slots__ = ("skip", "misses", "polls")

    def __init__(self):
        self.skip = 0    # waits left that do not poll
        self.misses = 0  # polls in a row that ended without a value
        self.polls = 0   # size queries made (tests count them)

    def until_ready(self, handle) -> bool:
        """Poll the queue `handle` until it holds a value or SPIN_S has passed (not at
        all while skipping); whether it holds one."""
        if self.skip:
            self.skip -= 1
            return False
        if not SPIN_S or not spare_core():
            return False
        ctx = context._context  # noqa: SLF001 (made: a session exists)
        deadline = _now() + SPIN_S
        while True:
            self.polls += 1
            if pywrap_tfe.TFE_Py_FastPathExecute(ctx, "QueueSizeV2", None, handle)._numpy():
                self.misses = 0
                return True
            if _now() > deadline:
                break
        self.misses += 1
        self.skip = min((1 << self.misses) - 1, MAX_SKIP)
        return False
