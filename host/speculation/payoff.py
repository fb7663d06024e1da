"""When a function is worth slicing, and a progress line for long builds.

Slicing, profiling and building a function costs tens to hundreds of milliseconds; a
function called a few times never earns that back. A function wrapped by `gpe run` runs
plainly (timed) until the time its calls have taken eagerly reaches the expected cost of
building it: the mean cost of the builds made so far in this process (DEFAULT_BUILD_S
before the first), scaled down for a function whose eager calls are cheaper than those of
the functions built (BuildCosts). This is the ski-rental rule: whatever the number of calls turns out to
be, the time spent is at most about twice that of the better choice made in hindsight (a
script of many functions each called a few times stays near eager's time; a training step
is built after its first few dozen milliseconds).

In a worker of several (`lockstep`) nothing is chosen by time (the adaptive timer and the
build budget are off too): the workers' steps meet in collective ops whose keys each
process numbers by its own eager calls and builds, so a step run eagerly on one worker and
sliced on another waits for its peer forever. There a function pays off after its first
call, whatever GPE_PAYOFF says (it could differ between workers): a function called once
(`main()`) runs plainly, a step is profiled from its second call on, on every worker.

GPE_PAYOFF=0 turns the rule off (build after the profile calls, as `gpe.function` always
does); GPE_PAYOFF=S (seconds) fixes the expected cost instead of measuring it. A build
still running after PROGRESS_S prints a line on stderr saying what it builds, and one with
the time it took when it ends (GPE_PROGRESS=0: none).
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time

DEFAULT_BUILD_S = 0.1
TIMES_KEPT = 8  # eager call times kept: the adaptive timer's eager figure (adaptive.py)
PROGRESS_S = 1.0


class BuildCosts:
    """What building functions has cost in this process.

    A function's build costs more the more ops it traces, as its eager calls do: where
    functions built before had plain eager calls timed (`gpe run`), a function's expected
    cost is their mean ratio of build to eager call times its own eager call time, kept
    between the mean cost of slicing (which every function pays) and the mean cost of a
    build. A step run every few training steps (an evaluation step, forward only) then
    pays off after about as many calls as the training step did, not after as much eager
    time as the training step's build took."""

    def __init__(self):
        self._lock = threading.Lock()
        self.total_s = 0.0
        self.builds = 0
        self.slicing_s = 0.0
        self.slicings = 0
        self.ratios: list[float] = []  # a build's cost over its function's eager call

    def add(self, seconds: float, built: bool, eager_call_s: float | None = None,
            sliced_s: float = 0.0, slicing: bool = False) -> None:
        """`seconds` spent slicing, building or registering; `built`: one more function's
        variant was built with it (`sliced_s`: slicing it, before; `eager_call_s`: the
        median of the function's plain eager calls, if timed; `slicing`: `seconds` sliced
        a function)."""
        with self._lock:
            self.total_s += seconds
            self.builds += int(built)
            if slicing:
                self.slicing_s += seconds
                self.slicings += 1
            if built and eager_call_s:
                self.ratios.append((seconds + sliced_s) / eager_call_s)

    def expected_s(self, eager_call_s: float | None = None) -> float:
        """The expected cost of building a function whose eager calls take `eager_call_s`
        (None: not known, the mean cost of a build)."""
        fixed = setting()
        if fixed is not None:
            return fixed
        with self._lock:
            if not self.builds:
                return DEFAULT_BUILD_S
            mean = self.total_s / self.builds
            if not self.ratios or not eager_call_s or not self.slicings:
                return mean
            scaled = eager_call_s * sum(self.ratios) / len(self.ratios)
            return min(mean, max(self.slicing_s / self.slicings, scaled))


def setting() -> float | None:
    """GPE_PAYOFF as seconds (None: measured)."""
    value = os.environ.get("GPE_PAYOFF", "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def enabled() -> bool:
    """Whether functions `gpe run` wraps wait until they pay off (GPE_PAYOFF=0: no; a
    worker of several: yes, for one call)."""
    return lockstep() or setting() != 0.0


COSTS = BuildCosts()
_LOCKSTEP: dict[str, bool] = {}  # TF_CONFIG's text -> lockstep()
_seen = [False]  # a strategy of several workers ran a step (seen_workers)


def lockstep() -> bool:
    """Whether this process is one worker of several in lockstep (TF_CONFIG names more
    than one chief or worker task, or a strategy of several workers ran a step:
    MultiWorkerMirroredStrategy's workers, whose steps meet in collective ops). Their
    choices between eager and sliced must not depend on time."""
    if _seen[0]:
        return True
    text = os.environ.get("TF_CONFIG", "")
    found = _LOCKSTEP.get(text)
    if found is None:
        try:
            cluster = json.loads(text).get("cluster", {}) if text else {}
            tasks = sum(len(cluster.get(kind) or ()) for kind in ("chief", "worker"))
        except (ValueError, AttributeError, TypeError):
            tasks = 0
        found = _LOCKSTEP[text] = tasks > 1
    return found


def seen_workers() -> None:
    """A strategy of several workers ran a step (one given its cluster by a resolver, not
    TF_CONFIG): every worker sees it at the same point of the program; lockstep from then."""
    _seen[0] = True


class Payoff:
    """One function's eager time while it waits to pay off its build."""

    __slots__ = ("eager_s", "calls", "waiting", "times")

    def __init__(self, waiting: bool):
        self.eager_s = 0.0
        self.calls = 0
        self.waiting = waiting
        self.times: list[float] = []  # the counted calls' seconds, the last TIMES_KEPT

    def eager_call(self, seconds: float) -> bool:
        """An eager call took `seconds`; True once the function has paid off (build it).
        The first call does not count: it carries one-time costs (TF's first runs of its
        kernels, imports), and a function called once gains nothing from a build. In a
        worker of several, a function has paid off after its first call (`lockstep`)."""
        self.calls += 1
        if self.calls > 1:
            self.eager_s += seconds
            self.times = self.times[-(TIMES_KEPT - 1):] + [seconds]
        if self.eager_s >= COSTS.expected_s(self.call_s()) or lockstep():
            self.waiting = False
        return not self.waiting

    def call_s(self) -> float | None:
        """The median of the timed eager calls (None before one was counted)."""
        return statistics.median(self.times) if self.times else None


class Budget:
    """What gpe may spend slicing and building a function none of whose calls has run
    sliced yet (each new signature refused after its profile calls and a build, a build
    that keeps failing). Its first attempt (slicing, profiling and building for the first
    key, retries included, until a variant is built or the key is refused) is always made;
    after it gpe may spend FIRST_TIMES what that attempt cost, or RATIO of the time the
    function's calls have taken, whichever is more. Once that is spent the function runs
    eagerly for good (`exhausted`; its caller says so in the report)."""

    __slots__ = ("spent_s", "first_s", "calls_s", "counting")

    FIRST_TIMES = 3.0  # the first attempt and twice its cost in later ones
    RATIO = 0.1        # then a tenth of the calls' own time

    def __init__(self):
        self.spent_s = 0.0  # slicing and building, all attempts
        self.first_s: float | None = None  # the first attempt's cost, once it ended
        self.calls_s = 0.0  # the function's calls (eager, profiled), while counting
        self.counting = True  # until a call runs sliced: nothing is bounded after it

    def spend(self, seconds: float) -> None:
        self.spent_s += seconds

    def timed(self, fn, args, kwargs):
        """`fn(*args, **kwargs)`, its time added to the calls'."""
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.calls_s += time.perf_counter() - started

    def attempt_ended(self) -> None:
        """A variant was built or a key refused: the first such ends the first attempt."""
        if self.first_s is None:
            self.first_s = self.spent_s

    def exhausted(self) -> bool:
        return (self.counting and self.first_s is not None and not lockstep()
                and self.spent_s > max(self.FIRST_TIMES * self.first_s,
                                       self.RATIO * self.calls_s))

    def describe(self, calls: int) -> str:
        return (f"slicing and building it took {self.spent_s * 1e3:.0f} ms with no call "
                f"run sliced, more than its {calls} calls allow ({self.calls_s * 1e3:.0f} "
                "ms eagerly): it runs eagerly from now on")


def _shown() -> bool:
    return os.environ.get("GPE_PROGRESS", "1") != "0"


def progress(what: str, qualname: str, where: str, seconds: float) -> None:
    """One line on stderr for a long build (over PROGRESS_S)."""
    if seconds > PROGRESS_S and _shown():
        sys.stderr.write(f"gpe: {what} {qualname} ({where}) took {seconds:.1f} s\n")
        sys.stderr.flush()


class Building:
    """Around a build: once it has run for PROGRESS_S, one line on stderr says what is being
    built (`gpe: building f (file:line) ...`), so a long build is seen while it runs; the
    line with the time it took (`progress`) follows at its end. A timer thread writes it:
    the build itself is not interrupted."""

    __slots__ = ("text", "timer")

    def __init__(self, what: str, qualname: str, where: str):
        self.text = f"gpe: {what} {qualname} ({where}) ...\n"
        self.timer = None

    def __enter__(self):
        if _shown():
            self.timer = threading.Timer(PROGRESS_S, self._write)
            self.timer.daemon = True
            self.timer.start()
        return self

    def _write(self) -> None:
        sys.stderr.write(self.text)
        sys.stderr.flush()

    def __exit__(self, *exc):
        if self.timer is not None:
            self.timer.cancel()
