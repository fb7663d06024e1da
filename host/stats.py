"""A sliced function's statistics, and its fallback notes (warned about once per cause)."""
from __future__ import annotations

import bisect
import logging
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("gpe")


HISTORY_KEPT = 1024  # call entries a Stats keeps (second_half)


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
    # (call number, graph_calls, perf_counter) when every `stride`th call began, for the
    # share of the later calls that ran sliced (second_half); at most HISTORY_KEPT kept
    history: list[tuple[int, int, float]] = field(default_factory=list)
    stride: int = 1

    def began(self) -> None:
        """A call was counted (calls += 1). A call counted again (calls -= 1, then
        dispatched anew) replaces its entry."""
        n, history = self.calls - 1, self.history
        while history and history[-1][0] >= n:
            history.pop()
        if n % self.stride == 0:
            history.append((n, self.graph_calls, time.perf_counter()))
            if len(history) > HISTORY_KEPT:  # every other one: twice the stride
                self.history, self.stride = history[::2], self.stride * 2

    def _late(self) -> tuple[int, int, float] | None:
        """The entry of the first call of the second half (within a stride)."""
        i = bisect.bisect_left(self.history, (self.calls // 2,))
        return self.history[i] if i < len(self.history) else None

    def second_half(self) -> tuple[int, int]:
        """(sliced, calls) over the second half of the calls so far."""
        late = self._late()
        if late is None:
            return 0, self.calls - self.calls // 2
        return self.graph_calls - late[1], self.calls - late[0]

    def interval_ms(self) -> float | None:
        """From the start of the second half's first call to now, per call of the second
        half: a training step's time per step once the program has ended (the loop's host
        work and the wait for the graph's work in flight included); None under 4 calls."""
        late = self._late()
        if late is None or self.calls - late[0] < 2:
            return None
        return (time.perf_counter() - late[2]) / (self.calls - late[0]) * 1e3

    def as_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "graph_calls": self.graph_calls,
                "eager_calls": self.eager_calls, "profile_calls": self.profile_calls,
                "refused_calls": self.refused_calls, "unpaid_calls": self.unpaid_calls,
                "timed_calls": self.timed_calls, "chosen_calls": self.chosen_calls,
                "traced_calls": self.traced_calls,
                "variants": self.variants, "fallbacks": dict(self.fallbacks),
                "guard_failures": dict(self.guard_failures),
                "variants_built": list(self.built),
                "second_half": self.second_half()}

    def guard_failed(self, reason: str) -> None:
        self.guard_failures[reason] = self.guard_failures.get(reason, 0) + 1

    def fallback(self, qualname: str, reason: str, warn: bool) -> None:
        """Count a fallback; warn once per reason (`warn`), else log it."""
        self.fallbacks[reason] = self.fallbacks.get(reason, 0) + 1
        if not warn:
            log.info("%s runs eagerly: %s", qualname, reason)
        elif reason not in self.warned:
            self.warned.add(reason)
            warnings.warn(f"gpe: {qualname} runs eagerly: {reason}", GpeWarning,
                          stacklevel=5)
