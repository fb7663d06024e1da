"""The adaptive choice between running a variant sliced and running it eagerly.

A tiny function can cost less eagerly than gpe's crossing. `AdaptiveTimer` (one per
variant) times its first sliced calls, then as many eager calls, and says whether the
variant should run eagerly from then on.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

COMPARE_CALLS = 16   # sliced calls timed, then as many eager calls
WARM_CALLS = 2       # sliced calls before the timing starts (the graph's instantiation)
SLICED_MARGIN = 0.9  # a variant stays sliced only if clearly faster than eager (noise)


class AdaptiveTimer:
    def __init__(self, enabled: bool = True):
        self.sliced: list[float] | None = [] if enabled else None  # None: measured
        self.sliced_s = 0.0
        self.eager: list[float] | None = None  # eager call times, while measuring them
        self.eager_faster = False

    @property
    def settled(self) -> bool:
        return self.sliced is None and self.eager is None

    @property
    def timing_eager(self) -> bool:
        return self.eager is not None

    def sliced_call(self, seconds: float, fence: Callable[[], None]) -> None:
        """A sliced call took `seconds` of host time. The timed calls count the host's time
        inside them plus the wait for the graph to finish them (`fence`); work between
        calls overlaps the graph and is not counted. After COMPARE_CALLS of them, the next
        calls run eagerly, timed (eager_call)."""
        timing = self.sliced
        if timing is None:
            return
        timing.append(seconds)
        if len(timing) == WARM_CALLS:  # the graph's first runs (instantiation) are done
            fence()
        if len(timing) < WARM_CALLS + COMPARE_CALLS:
            return
        start = time.perf_counter()
        fence()
        timed = timing[WARM_CALLS:]
        # the slowest call left out: one stall (a collection, the OS) is not the function's
        total = sum(timed) - max(timed) + time.perf_counter() - start
        self.sliced_s = total / (COMPARE_CALLS - 1)
        self.sliced = None
        self.eager = []

    def eager_call(self, seconds: float) -> str | None:
        """An eager call took `seconds`; once enough are timed, the verdict: a message when
        eager is faster (the variant then runs eagerly), else None."""
        if self.eager is None:  # decided by a call nested in this one (recursion)
            return None
        self.eager.append(seconds)
        if len(self.eager) < COMPARE_CALLS:
            return None
        eager_s = statistics.median(self.eager)
        self.eager = None
        if self.sliced_s <= eager_s * SLICED_MARGIN:
            return None
        self.eager_faster = True
        return (f"eager is faster ({eager_s * 1e6:.0f} us a call) than sliced "
                f"({self.sliced_s * 1e6:.0f} us a call)")

