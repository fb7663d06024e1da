"""A sliced function's statistics, and its fallback notes (warned about once per cause)."""
from __future__ import annotations

import bisect
import logging
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("gpe")


FIRST_MARK = 16  # the first call whose start a Stats notes (late)


class GpeWarning(UserWarning):
    """gpe runs (part of) a function eagerly; the message says why."""


@dataclass
class Stats:
    calls: int = 0
    graph_calls: int = 0
    eager_calls: int = 0
    profile_calls: int = 0
    refused_calls: int = 0  # eager calls of a signature refused for good (the fast path)
    unpaid_calls: int = 0   # eager calls before the function paid off its build (payoff.py)
    timed_calls: int = 0    # eager calls timed against sliced ones (adaptive.py)
    chosen_calls: int = 0   # eager calls of a variant found faster eagerly (adaptive.py)
    traced_calls: int = 0   # calls while another function's TF part was traced
    variants: int = 0
    fallbacks: dict[str, int] = field(default_factory=dict)
    guard_failures: dict[str, int] = field(default_factory=dict)  # "expected X, got Y"
    built: list[str] = field(default_factory=list)  # the assumptions of each variant
    warned: set[str] = field(default_factory=set)   # fallback reasons warned about
    # (call number, graph_calls before it, perf_counter) at calls FIRST_MARK, then every
    # eighth of a doubling (16, 18, 20, ... 32, 36, ...): the share of the later calls
    # that ran sliced (late), with no work on the calls in between (the call path only
    # compares `calls` with `mark`)
    marks: list[tuple[int, int, float]] = field(default_factory=list)
    mark: int = FIRST_MARK

    def checkpoint(self) -> None:
        """The call numbered `calls` (== mark) begins: note it, and set the next mark."""
        self.marks.append((self.calls, self.graph_calls, time.perf_counter()))
        step = max(1, (1 << (self.calls.bit_length() - 1)) // 8)
        self.mark = self.calls + step

    def late(self) -> tuple[int, int, float | None]:
        """(calls, of them sliced, ms a call up to now) from the first mark in the second
        half on ((calls, 0, None) before the first mark: too few calls to tell)."""
        i = bisect.bisect_left(self.marks, (self.calls // 2 + 1,))
        if i >= len(self.marks):
            return self.calls, 0, None
        n, graph, started = self.marks[i]
        count = self.calls - n + 1
        return count, self.graph_calls - graph, (time.perf_counter() - started) / count * 1e3

    def as_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "graph_calls": self.graph_calls,
                "eager_calls": self.eager_calls, "profile_calls": self.profile_calls,
                "refused_calls": self.refused_calls, "unpaid_calls": self.unpaid_calls,
                "timed_calls": self.timed_calls, "chosen_calls": self.chosen_calls,
                "traced_calls": self.traced_calls,
                "variants": self.variants, "fallbacks": dict(self.fallbacks),
                "guard_failures": dict(self.guard_failures),
                "variants_built": list(self.built),
                "late": self.late()}

    def guard_failed(self, reason: str) -> None:
        self.guard_failures[reason] = self.guard_failures.get(reason, 0) + 1

    def fallback(self, qualname: str, reason: str, warn: bool, stacklevel: int = 5) -> None:
        """Count a fallback; warn once per reason (`warn`), else log it."""
        self.fallbacks[reason] = self.fallbacks.get(reason, 0) + 1
        if not warn:
            log.info("%s runs eagerly: %s", qualname, reason)
        elif reason not in self.warned:
            self.warned.add(reason)
            warnings.warn(f"gpe: {qualname} runs eagerly: {reason}", GpeWarning,
                          stacklevel=stacklevel)
