"""The adaptive choice between running a variant sliced and running it eagerly.

A tiny function can cost less eagerly than gpe's crossing. `AdaptiveTimer` (one per
variant) times its calls in alternating blocks, sliced then eager, so that both ways see
the same load on the machine. A block's figure is the median of its calls' times (a
sliced block adds the wait, after its last call, for the graph to finish the block, spread
over its calls); each way's figure is the median of its blocks. A stall (a collection, the
OS) in one call or one block does not move a median.

A long call (an epoch) is timed in fewer calls: the warm calls end once their count at
their median time reaches WARM_S (at least MIN_WARM_CALLS), and a block holds as many calls
as make BLOCK_S at that median (at least MIN_BLOCK_CALLS): a 50 ms epoch is timed in blocks
of 3 after 5 warm calls (with 8 and 10 a 60-epoch run was still timing at its 50th call).

A clear case is settled after the first block each way: sliced at most CLEAR of eager's
time stays sliced, sliced at least 1/CLEAR of it runs eagerly (a training step 100x faster
in the graph used to run 40 of its calls eagerly, at eager's cost, before its verdict);
a less clear one after the second (SECOND_CLEAR, on the medians of both blocks: a ratio
the round would only confirm, far outside the band below), or after the first where sliced
is at most SECOND_CLEAR of eager: staying sliced needs only one block of eager calls (a
4 ms step at 0.5x eager timed 16 eager calls over its 30th to 45th, a third of a 60-step
run's steady calls; two blocks each way still settle on eager, the verdict that costs).
The first eager block is cut short after PROBE_CALLS calls when their median already shows
sliced at most CLEAR of it (the other way, final, takes the whole block), and is skipped when the function's plain eager calls before it was built
(`gpe run`'s payoff wait, host/speculation/payoff.py: `prior`, at least PROBE_CALLS of them) show
sliced at most PRIOR_CLEAR of their median: a training step then runs no timed eager call (a
ratio that is not clear that way is measured as before, both ways in turn).
Otherwise a round of BLOCKS blocks each way decides (the first blocks count in it).
The verdict has hysteresis: sliced stays only when clearly faster (at most SLICED_MARGIN of
eager's time), eager is chosen when sliced is no faster; a ratio in between is measured
again (up to MAX_ROUNDS rounds) before the middle of the band decides, so that a borderline
function gets the same verdict run after run rather than a coin toss. The verdict is final.
Its message says what was measured, and is true: it never calls eager faster when the
sliced median was lower.

A block during which the session started a sink (another part registered: TensorFlow
instantiates the new sink with its parts inlined, 50-300 ms of CPU on the sink's thread)
is not counted, either way: under load such a block of a 5 ms step measured 40 ms and
kept a clear case measuring for rounds (`disturbed`, host/runtime/session.py).
"""
from __future__ import annotations

import math
import statistics
import time
from typing import Callable

WARM_CALLS = 10      # sliced calls before the timing starts (the graph's instantiation, the
                     # program settling; as before, no call before the 19th sliced one runs eagerly)
MIN_WARM_CALLS = 3   # ...fewer for a long call: once MIN_WARM_CALLS of them, at their median,
WARM_S = 0.25        # come to WARM_S (a 50 ms epoch: 5 calls)
BLOCK_CALLS = 8      # calls in a block (a sliced block ends with a wait for the graph)
MIN_BLOCK_CALLS = 3  # ...fewer for a long call: as many as make BLOCK_S at the warm calls'
BLOCK_S = 0.1        # median (an epoch of 50 ms: 3; a step of 10 ms or less: BLOCK_CALLS)
BLOCKS = 5           # sliced and eager blocks in a round (odd: a plain median)
MAX_ROUNDS = 3       # rounds measured while the ratio stays inside the band
SLICED_MARGIN = 0.9  # sliced at most this fraction of eager's time: stays sliced
EAGER_MARGIN = 1.0   # sliced at least eager's time: eager; in between, measured again
TIE_BREAK = 0.95     # after MAX_ROUNDS inside the band: sliced below this, else eager
CLEAR = 1 / 3        # after the first block each way: sliced/eager at most this (or at
                     # least its inverse) settles at once
SECOND_CLEAR = 0.6   # after the second block each way: the same, on the medians of both
                     # (2x sliced ran its 80 steps timing both ways: examples/numpy_mid_step)
MAX_DROPPED = 4      # blocks dropped because a sink started (then they count)
EARLY_S = 0.005      # ...and at least this much slower a call than the profile calls
PROBE_CALLS = 3      # calls of the first eager block after which a clear case settles
PRIOR_CLEAR = 0.6    # sliced/eager at most this, eager being the plain calls before the
                     # build (`prior`), settles at once: 1.5x inside SLICED_MARGIN, for a load
                     # that changed since (eager calls timed between sliced blocks measured
                     # 1.5-3x those plain calls: examples/numpy_mid_step)

_WARM, _SLICED, _EAGER, _SETTLED = range(4)


class AdaptiveTimer:
    """`sibling`: the timer of a variant of the same plan (other shapes: a smaller last
    batch); whichever settles first gives the other its verdict, so a variant that gets
    one call in four is not timed on its own long after its sibling was."""

    def __init__(self, enabled: bool = True, clock: Callable[[], float] = time.perf_counter,
                 sibling: "AdaptiveTimer | None" = None, prior: list[float] | None = None,
                 disturbed: Callable[[float], bool] = lambda since: False,
                 fenced: Callable[[], float] = lambda: 0.0):
        self.clock = clock
        # fenced(): seconds eager code outside sliced calls has waited for the graph so far
        # (host/runtime/fence.py): a call's time in a block includes those waits since
        # the call before (the step's eager code reading the variables a sliced update
        # wrote waits for it: the update's cost, not the call's)
        self.fenced, self.fence_mark = fenced, None
        # disturbed(t): a sink started at or after clock time t (or shortly before it)
        self.disturbed = disturbed
        self.block_start, self.dropped = 0.0, 0
        self.sibling = sibling
        # seconds of the function's plain eager calls before this variant (payoff.py)
        self.prior = list(prior or ())[-BLOCK_CALLS:]
        self.phase = _WARM if enabled else _SETTLED
        self.warm = 0
        self.warm_times: list[float] = []  # the warm calls' seconds
        # seconds of the profile calls it was built from (eager, observed: slower than a
        # plain eager call, so only ever evidence that sliced is slower: see sliced_call)
        self.profiled: list[float] = []
        self.block_calls = BLOCK_CALLS  # calls in a block (set when the warm calls end)
        self.block: list[float] = []   # the current block's call times
        self.sliced: list[float] = []  # seconds per call, one entry per block
        self.eager: list[float] = []
        self.rounds = 0
        self.sliced_s = self.eager_s = 0.0  # the medians the verdict was made on
        self.eager_faster = False
        self.verdict: str | None = None
        # settled on running sliced: nothing left to time (the call path tests only this)
        self.steady = self.phase == _SETTLED

    @property
    def settled(self) -> bool:
        return self.phase == _SETTLED

    @property
    def timing_eager(self) -> bool:
        """The next call runs eagerly, timed (eager_call)."""
        if self.sibling is not None and self.sibling.phase == _SETTLED:
            self._adopt()
        return self.phase == _EAGER

    def _adopt(self) -> None:
        """Take the settled sibling's verdict (its medians and message too)."""
        sibling, self.sibling = self.sibling, None
        if self.phase != _SETTLED:
            self.phase, self.eager_faster = _SETTLED, sibling.eager_faster
            self.sliced_s, self.eager_s = sibling.sliced_s, sibling.eager_s
            self.verdict = sibling.verdict
            self.steady = not self.eager_faster

    def sliced_call(self, start: float, fence: Callable[[], None]) -> str | None:
        """A sliced call that began at `start` (this timer's clock) has returned. `fence`
        waits until the graph has finished every call sent. Returns the verdict's message
        where it settles on running eagerly here (see _slower_than_profiled)."""
        if self.sibling is not None and self.sibling.phase == _SETTLED:
            self._adopt()
        if self.phase == _WARM:
            self.warm += 1
            self.warm_times.append(self.clock() - start)
            if self.warm == 2:
                self.block_start = start  # (the early verdict's calls start here)
            if self._slower_than_profiled():
                return self.verdict
            typical = statistics.median(self.warm_times)
            if self.warm >= WARM_CALLS or (self.warm >= MIN_WARM_CALLS and
                                           typical * self.warm >= WARM_S):
                fence()  # the graph's first runs (instantiation) are done
                self.block_calls = max(MIN_BLOCK_CALLS, min(
                    BLOCK_CALLS, math.ceil(BLOCK_S / typical - 1e-9) if typical > 0 else BLOCK_CALLS))
                self.phase = _SLICED
            return None
        if self.phase != _SLICED:
            return None
        if self._counted(start):
            before = self.clock()
            fence()
            waited = self.clock() - before
            self.sliced.append(statistics.median(self.block) + waited / self.block_calls)
            self.phase = _EAGER
            if len(self.sliced) == 1 and len(self.prior) >= PROBE_CALLS and \
                    self.sliced[0] <= PRIOR_CLEAR * statistics.median(self.prior):
                self.eager.append(statistics.median(self.prior))
                self.rounds = 1
                self._settle(self._ratio(), len(self.prior))
        return None

    def _slower_than_profiled(self) -> bool:
        """After MIN_WARM_CALLS warm calls, settle on eager where the sliced calls (after
        the first, which instantiates the graph) took at least 1/CLEAR of the profile
        calls' median, and EARLY_S more a call: slower than eager with observation, so
        slower than eager (a plan
        whose TF part is a few ops, each a round trip for the host: 8.5 ms a call sliced,
        0.8 ms eagerly, measured for 18 calls before)."""
        if not self.profiled or len(self.warm_times) < MIN_WARM_CALLS or \
                self.disturbed(self.block_start):  # a sink started meanwhile: timed as usual
            return False
        sliced, eager = statistics.median(self.warm_times[1:]), statistics.median(self.profiled)
        if sliced * CLEAR < eager or sliced - eager < EARLY_S:
            return False  # (a graph's first runs of a small function are slow: timed as usual)
        self.sliced, self.eager, self.rounds = [sliced], [eager], 1
        self.block_calls = len(self.warm_times) - 1  # (the message's count of calls)
        self._settle(sliced / eager if eager > 0 else float("inf"), len(self.profiled))
        return True

    def eager_call(self, start: float) -> str | None:
        """An eager call that began at `start` has returned; once a round is complete, the
        verdict: its message when the variant runs eagerly from now on, else None."""
        if self.phase != _EAGER:  # decided by a call nested in this one (recursion)
            return None
        if not self._counted(start):
            if self.eager or len(self.block) != PROBE_CALLS or (
                    self.dropped < MAX_DROPPED and self.disturbed(self.block_start)):
                return None
            ratio = self.sliced[0] / statistics.median(self.block)  # the first block so far
            if ratio > CLEAR:  # running eagerly for good takes a whole block
                return None
            self.eager.append(statistics.median(self.block))
            self.rounds = 1
            return self._settle(ratio, PROBE_CALLS)
        self.eager.append(statistics.median(self.block))
        self.phase = _SLICED
        if len(self.eager) <= 2:
            ratio, clear = self._ratio(), CLEAR if len(self.eager) == 1 else SECOND_CLEAR
            if ratio <= SECOND_CLEAR or ratio >= 1 / clear:
                self.rounds = 1
                return self._settle(ratio)
        if len(self.eager) < BLOCKS * (self.rounds + 1):
            return None
        self.rounds += 1
        return self._decide()

    def _counted(self, start: float) -> bool:
        """Record a call's time in the current block; True when it completes the block
        (self.block then holds the block's times until the next call). A block a sink's
        start disturbed is dropped: the next call starts the block again."""
        if len(self.block) >= self.block_calls:
            self.block = []
        if not self.block:
            self.block_start = start
        fenced = self.fenced()
        waited = fenced - self.fence_mark if self.fence_mark is not None else 0.0
        self.fence_mark = fenced
        self.block.append(self.clock() - start + waited)
        if len(self.block) < self.block_calls:
            return False
        if self.dropped < MAX_DROPPED and self.disturbed(self.block_start):
            self.dropped += 1  # (bounded: a program that keeps building is still timed)
            self.block = []
            return False
        return True

    def _ratio(self) -> float:
        sliced, eager = statistics.median(self.sliced), statistics.median(self.eager)
        return sliced / eager if eager > 0 else float("inf")

    def _decide(self) -> str | None:
        ratio = self._ratio()
        if SLICED_MARGIN < ratio < EAGER_MARGIN and self.rounds < MAX_ROUNDS:
            return None  # inside the band: another round
        return self._settle(ratio)

    def _settle(self, ratio: float, eager_calls: int | None = None) -> str | None:
        """The final verdict on `ratio` (sliced/eager medians): its message when eager.
        `eager_calls`: the eager calls the eager median is over (default: whole blocks)."""
        sliced, eager = statistics.median(self.sliced), statistics.median(self.eager)
        self.sliced_s, self.eager_s, self.phase = sliced, eager, _SETTLED
        self.block = []
        if ratio <= SLICED_MARGIN or (ratio < EAGER_MARGIN and ratio < TIE_BREAK):
            self.steady = True
            return None
        self.eager_faster = True
        self.verdict = message(sliced, eager, len(self.sliced) * self.block_calls,
                               eager_calls or len(self.eager) * self.block_calls)
        return self.verdict


def message(sliced: float, eager: float, calls: int, eager_calls: int | None = None) -> str:
    """Why a variant runs eagerly, from the medians measured (seconds a call)."""
    over = (f"{calls} calls each way" if eager_calls in (None, calls)
            else f"{calls} calls sliced, {eager_calls} eagerly")
    measured = (f"{sliced * 1e6:.0f} us a call sliced, {eager * 1e6:.0f} us eagerly "
                f"(medians over {over})")
    if sliced >= eager:
        return f"eager is faster: {measured}"
    return f"sliced is not clearly faster than eager: {measured}"
