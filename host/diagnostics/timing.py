"""How much host work overlapped graph work: `with gpe.timing() as t: ...; print(t)`.

Graph busy time is measured in the sink (each part's run, timestamped in the graph); host
busy time is wall time less the time the host spent blocked on the graph. Both were busy
for host_busy + graph_busy - wall. Materialise the results you need inside the block, so
the graph's work for it is done before the block ends.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from ..runtime.session import get_session


@dataclass
class Timing:
    wall_s: float = 0.0
    host_busy_s: float = 0.0
    graph_busy_s: float = 0.0
    graph_calls: int = 0

    @property
    def overlap_s(self) -> float:
        return max(0.0, min(self.host_busy_s + self.graph_busy_s - self.wall_s,
                            self.host_busy_s, self.graph_busy_s))

    @property
    def overlap_fraction(self) -> float:
        """The share of graph time during which the host was working too."""
        return self.overlap_s / self.graph_busy_s if self.graph_busy_s else 0.0

    def __str__(self) -> str:
        return (f"wall {self.wall_s * 1e3:.1f} ms: host busy {self.host_busy_s * 1e3:.1f} ms, "
                f"graph busy {self.graph_busy_s * 1e3:.1f} ms over {self.graph_calls} calls, "
                f"both busy {self.overlap_s * 1e3:.1f} ms "
                f"({self.overlap_fraction:.0%} of graph time overlapped by host work)")


class timing:
    """`with gpe.timing() as t:` measures the block; `print(t)` reports it.

    Creating it turns on the sink's timing, which rebuilds the sink once (the graph then
    spends a while instantiating it); create it before a program's warm-up to keep that
    out of the measurement, and enter it afterwards."""

    def __init__(self):
        self.session = get_session()
        self.timer = self.session.measure_graph_time()
        self.result = Timing()

    def __enter__(self) -> Timing:
        self._busy0, self._calls0 = self.timer.numpy()
        self._wait0, self._start = self.session.host_wait_s, time.perf_counter()
        return self.result

    def __exit__(self, *exc) -> None:
        result = self.result
        result.wall_s = time.perf_counter() - self._start
        busy, calls = self.timer.numpy()
        result.graph_busy_s, result.graph_calls = busy - self._busy0, int(calls - self._calls0)
        result.host_busy_s = result.wall_s - (self.session.host_wait_s - self._wait0)
