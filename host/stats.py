"""A sliced function's statistics, and its fallback notes (warned about once per cause)."""
from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("gpe")


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
    # graph_calls when each call began (index: the call's number - 1), for the share of
    # the later calls that ran sliced (second_half)
    history: list[int] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)  # when each call began (perf_counter)

    def began(self) -> None:
        """A call was counted (calls += 1): note graph_calls at its start. A call counted
        again (calls -= 1, then dispatched anew) replaces its entry."""
        del self.history[self.calls - 1:]
        del self.starts[self.calls - 1:]
        self.history.append(self.graph_calls)
        self.starts.append(time.perf_counter())

    def interval_ms(self) -> float | None:
        """From the start of the second half's first call to now, per call of the second
        half: a training step's time per step once the program has ended (the loop's host
        work and the wait for the graph's work in flight included); None under 4 calls."""
        late = self.starts[len(self.starts) // 2:]
        if len(late) < 2:
            return None
        return (time.perf_counter() - late[0]) / len(late) * 1e3

    def second_half(self) -> tuple[int, int]:
        """(sliced, calls) over the second half of the calls so far."""
        half = self.calls // 2
        if half >= len(self.history):
            return 0, self.calls - half
        return self.graph_calls - self.history[half], self.calls - half

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
