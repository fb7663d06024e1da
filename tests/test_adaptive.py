"""The adaptive eager-or-sliced choice (host/speculation/adaptive.py), driven by a fake clock: the
verdict follows the medians, has hysteresis, is the same under noise run after run, and
its message is true."""
from __future__ import annotations

import random

from gpe.host.speculation.adaptive import (BLOCK_CALLS, BLOCKS, CLEAR, MAX_DROPPED, MAX_ROUNDS,
                                           MIN_WARM_CALLS, PROBE_CALLS, SECOND_CLEAR,
                                           WARM_CALLS, AdaptiveTimer)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def drive(sliced_cost, eager_cost, graph_cost=lambda: 0.0, limit=10_000, profiled=()):
    """Run calls as SlicedFunction does until the timer settles: a sliced call costs the
    host sliced_cost() and leaves graph_cost() for the fence to wait out. Returns (timer,
    verdict message or None, calls made each way). `profiled`: the profile calls' times."""
    clock, pending = Clock(), [0.0]
    timer = AdaptiveTimer(clock=clock)
    timer.profiled = list(profiled)

    def fence():
        clock.now += pending[0]
        pending[0] = 0.0

    verdict, counts = None, {"sliced": 0, "eager": 0}
    for _ in range(limit):
        if timer.settled:
            break
        start = clock.now
        if timer.timing_eager:
            clock.now += eager_cost()
            counts["eager"] += 1
            verdict = timer.eager_call(start)
        else:
            clock.now += sliced_cost()
            pending[0] += graph_cost()
            counts["sliced"] += 1
            verdict = timer.sliced_call(start, fence) or verdict
    assert timer.settled
    return timer, verdict, counts


def test_a_clear_case_is_settled_after_one_block_and_a_probe():
    """A step 10x faster in the graph ran 40 calls eagerly (5 blocks of 8) before its
    verdict: in a training program of 80 steps, at eager's cost, half of the steady calls.
    A ratio of at most CLEAR settled after the first block each way (8 eager calls); now
    after the first PROBE_CALLS of the eager block (issue 12: under `gpe run` those eager
    calls were most of a short run's unsliced steady calls)."""
    timer, verdict, counts = drive(lambda: 100e-6, lambda: 1000e-6)
    assert verdict is None and not timer.eager_faster
    assert counts["eager"] == PROBE_CALLS
    assert counts["sliced"] == WARM_CALLS + BLOCK_CALLS
    assert round(timer.sliced_s * 1e6) == 100 and round(timer.eager_s * 1e6) == 1000


def test_plain_eager_calls_before_the_build_settle_a_clear_case_with_no_eager_call():
    """`gpe run` times the function's plain eager calls while it waits to pay off its build
    (payoff.py): with PROBE_CALLS of them, a sliced block at most CLEAR of their median
    settles at once (sliced at most PRIOR_CLEAR of it); a prior that does not make it clear
    is measured as before (here the probe, eager being 10x sliced)."""
    for prior, eager_calls in (([1000e-6] * 5, 0), ([1000e-6] * 2, PROBE_CALLS),
                               ([170e-6] * 5, 0), ([150e-6] * 5, PROBE_CALLS)):
        clock, timer = Clock(), AdaptiveTimer(clock=Clock(), prior=prior)
        timer.clock = clock
        counts = {"eager": 0}
        while not timer.settled:
            start = clock.now
            if timer.timing_eager:
                clock.now += 1000e-6
                counts["eager"] += 1
                timer.eager_call(start)
            else:
                clock.now += 100e-6
                timer.sliced_call(start, lambda: None)
        assert not timer.eager_faster and counts["eager"] == eager_calls, (prior, counts)


def test_a_probe_never_settles_on_eager():
    """Running eagerly for good takes the whole first eager block, as before."""
    timer, verdict, counts = drive(lambda: 1000e-6, lambda: 100e-6)
    assert timer.eager_faster and counts["eager"] == BLOCK_CALLS


def test_sliced_faster_but_not_clearly_so_takes_the_whole_round():
    timer, verdict, counts = drive(lambda: 700e-6, lambda: 1000e-6)  # 0.7 > SECOND_CLEAR
    assert 0.7 > SECOND_CLEAR > CLEAR and verdict is None and not timer.eager_faster
    assert counts["eager"] == BLOCKS * BLOCK_CALLS
    assert counts["sliced"] == WARM_CALLS + BLOCKS * BLOCK_CALLS


def test_twice_as_fast_sliced_settles_after_one_block_each_way():
    """Sliced at half of eager's time (examples/numpy_mid_step: 1.9 against 4 ms a step)
    took the whole round of 5 blocks each way: an 80-step run spent 32 calls timing eager
    and ran at 0.90x eager; then two blocks each way (SECOND_CLEAR), which still left a
    60-step corpus program (tfcore_logistic) timing eager calls at its 40th call. One block
    each way at most SECOND_CLEAR of eager settles it; slower than eager by 1/SECOND_CLEAR
    or more still takes two blocks each way to run eagerly."""
    timer, verdict, counts = drive(lambda: 500e-6, lambda: 1000e-6)
    assert CLEAR < 0.5 <= SECOND_CLEAR and verdict is None and not timer.eager_faster
    assert counts["eager"] == BLOCK_CALLS
    assert counts["sliced"] == WARM_CALLS + BLOCK_CALLS
    timer, verdict, counts = drive(lambda: 200e-6, lambda: 100e-6)
    assert timer.eager_faster and counts["eager"] == 2 * BLOCK_CALLS
    assert verdict == (f"eager is faster: 200 us a call sliced, 100 us eagerly (medians over "
                       f"{2 * BLOCK_CALLS} calls each way)")


def test_the_graph_time_waited_for_counts_against_sliced():
    """Host time alone looks fast; the fence's wait for the graph makes it slower."""
    timer, verdict, _ = drive(lambda: 50e-6, lambda: 500e-6, graph_cost=lambda: 800e-6)
    assert timer.eager_faster
    assert verdict.startswith("eager is faster: 850 us a call sliced, 500 us eagerly")


def test_clearly_slower_sliced_runs_eagerly_and_says_so_truly():
    timer, verdict, counts = drive(lambda: 400e-6, lambda: 100e-6)  # past 1/CLEAR: at once
    assert timer.eager_faster and timer.sliced_s > timer.eager_s
    assert verdict == (f"eager is faster: 400 us a call sliced, 100 us eagerly (medians over "
                       f"{BLOCK_CALLS} calls each way)")
    assert counts["eager"] == BLOCK_CALLS
    timer, verdict, counts = drive(lambda: 150e-6, lambda: 100e-6)  # slower, not clearly
    assert timer.eager_faster and verdict == (
        f"eager is faster: 150 us a call sliced, 100 us eagerly (medians over "
        f"{BLOCKS * BLOCK_CALLS} calls each way)")
    assert counts["eager"] == BLOCKS * BLOCK_CALLS  # no second round: outside the band


def test_a_slightly_faster_sliced_is_measured_again_and_never_called_slower():
    """The issue's "eager is faster (3143us) than sliced (2956us)": sliced was faster, by
    less than the margin. Now such a ratio is measured MAX_ROUNDS rounds; at 0.97 it then
    runs eagerly, with a message that says what was measured (at 0.94, as there, it stays
    sliced: see the next test)."""
    timer, verdict, counts = drive(lambda: 3050e-6, lambda: 3143e-6)
    assert counts["eager"] == MAX_ROUNDS * BLOCKS * BLOCK_CALLS
    assert timer.eager_faster
    assert verdict.startswith("sliced is not clearly faster than eager: 3050 us a call sliced, "
                              "3143 us eagerly")
    assert "eager is faster" not in verdict


def test_inside_the_band_below_the_tie_break_stays_sliced():
    timer, verdict, counts = drive(lambda: 2956e-6, lambda: 3143e-6)
    assert counts["eager"] == MAX_ROUNDS * BLOCKS * BLOCK_CALLS
    assert verdict is None and not timer.eager_faster


def test_the_same_verdict_run_after_run_under_noise():
    """Single calls jitter by up to +-40% and one call in ten stalls 5x (a collection, the
    OS); the medians of blocks decide the same way for every seed."""
    def noisy(rng, mean):
        def cost():
            value = mean * rng.uniform(0.6, 1.4)
            return value * 5 if rng.random() < 0.1 else value
        return cost

    for sliced_mean, eager_mean, eager_wins in ((600e-6, 1000e-6, False),
                                                (1000e-6, 700e-6, True)):
        verdicts = set()
        for seed in range(30):
            rng = random.Random(seed)
            timer, _, _ = drive(noisy(rng, sliced_mean), noisy(rng, eager_mean))
            verdicts.add(timer.eager_faster)
        assert verdicts == {eager_wins}, (sliced_mean, eager_mean, verdicts)


def test_a_disabled_timer_is_settled_and_sliced():
    timer = AdaptiveTimer(enabled=False)
    assert timer.settled and not timer.timing_eager and not timer.eager_faster


def test_a_sibling_variant_takes_the_verdict_of_the_first_to_settle():
    """tfdata_last_batch: batches of 32, 32, 32, 4. The variant for the last batch (same
    plan, other shapes) got one call in four and timed itself on its own: its 8 eager calls
    came long after its sibling's verdict (at eager's cost, 100x a sliced call). Now the
    first of the two to settle gives the other its verdict."""
    clock = Clock()
    first = AdaptiveTimer(clock=clock)
    second = AdaptiveTimer(clock=clock, sibling=first)
    eager_calls = {"first": 0, "second": 0}
    for call in range(200):
        name, timer = ("second", second) if call % 4 == 3 else ("first", first)
        start = clock.now
        if timer.timing_eager:
            clock.now += 1000e-6
            eager_calls[name] += 1
            timer.eager_call(start)
        else:
            clock.now += 10e-6
            timer.sliced_call(start, lambda: None)
        if first.settled and second.settled:
            break
    assert first.settled and second.settled and not second.eager_faster
    assert eager_calls == {"first": PROBE_CALLS, "second": 0}
    assert (second.sliced_s, second.eager_s) == (first.sliced_s, first.eager_s)


def test_a_settled_sibling_gives_its_eager_verdict_and_message():
    clock = Clock()
    first, verdict, _ = drive(lambda: 400e-6, lambda: 100e-6)
    second = AdaptiveTimer(clock=clock, sibling=first)
    assert not second.timing_eager and second.settled and second.eager_faster
    assert second.verdict == first.verdict and second.verdict == verdict


def test_a_block_during_which_a_sink_started_is_not_counted():
    """lenet_cnn under load: another function's part registered while the training step's
    first sliced block was timed, and TensorFlow instantiating the new sink took the CPU: a
    block of 2 ms calls measured 39 ms, the ratio to eager (60 ms) was no longer clear, and
    the step measured rounds of eager blocks (62/100 calls sliced instead of 86/100). A block
    the session says a sink disturbed is dropped and timed again."""
    def run(disturbed):
        clock = Clock()
        kwargs = {} if disturbed is None else {"disturbed": disturbed}
        timer = AdaptiveTimer(clock=clock, **kwargs)
        sink_start = (WARM_CALLS + 1) * 2e-3  # while the first timed block runs
        eager_calls = 0
        while not timer.settled:
            start = clock.now
            if timer.timing_eager:
                clock.now += 60e-3
                eager_calls += 1
                timer.eager_call(start)
            else:  # the sink's instantiation slows the calls of the 0.2 s after its start
                slowed = sink_start <= clock.now < sink_start + 0.2
                clock.now += 39e-3 if slowed else 2e-3
                timer.sliced_call(start, lambda: None)
        return timer, eager_calls

    session_says = lambda since: (WARM_CALLS + 1) * 2e-3 + 0.2 > since  # noqa: E731
    timer, eager_calls = run(session_says)
    assert not timer.eager_faster and eager_calls == PROBE_CALLS
    assert round(timer.sliced_s * 1e3) == 2
    # not told of the sink, the slow block counted: more than a probe of eager calls
    timer, eager_calls = run(None)
    assert not timer.eager_faster and eager_calls > PROBE_CALLS


def test_a_program_that_keeps_starting_sinks_is_still_timed():
    """Dropping disturbed blocks is bounded: with a sink started before every block (a
    script building one function after another), the timer still settles."""
    clock = Clock()
    timer = AdaptiveTimer(clock=clock, disturbed=lambda since: True)
    calls = 0
    while not timer.settled and calls < 1000:
        start = clock.now
        if timer.timing_eager:
            clock.now += 1000e-6
            timer.eager_call(start)
        else:
            clock.now += 100e-6
            timer.sliced_call(start, lambda: None)
        calls += 1
    assert timer.settled and not timer.eager_faster
    assert calls <= WARM_CALLS + (MAX_DROPPED + 1) * BLOCK_CALLS + PROBE_CALLS


def test_a_long_call_is_timed_in_fewer_calls():
    """An epoch of 100 ms, 50 ms sliced: timed after 5 warm calls (0.25 s at their median)
    in blocks of 3 (the least; 0.1 s is 2 of them), settled after one block each way, 3
    calls eagerly; with a 10-call warm-up and blocks of 8 a 60-epoch run was still timing
    at its 50th epoch."""
    timer, verdict, counts = drive(lambda: 50e-3, lambda: 100e-3)
    assert verdict is None and timer.steady and timer.block_calls == 3
    assert counts == {"sliced": 5 + 3, "eager": 3}
    timer, verdict, counts = drive(lambda: 0.5e-3, lambda: 1e-3)  # a short step: as before
    assert timer.block_calls == BLOCK_CALLS
    assert counts == {"sliced": WARM_CALLS + BLOCK_CALLS, "eager": BLOCK_CALLS}


def test_sliced_calls_far_slower_than_the_profile_calls_settle_at_once():
    """A plan whose TF part is a few ops, each a round trip for the host (a hand-written
    Adam's apply_gradients: 8.5 ms a call sliced, 0.8 ms eagerly): sliced calls at least
    1/CLEAR of the profile calls' median settle on eager after MIN_WARM_CALLS warm calls,
    with no eager block (they ran 10 warm and 8 timed sliced calls before). Profile calls
    are slower than eager ones: never evidence that sliced is faster."""
    timer, verdict, counts = drive(lambda: 8.5e-3, lambda: 0.8e-3, profiled=[1.0e-3] * 3)
    assert timer.eager_faster and counts == {"sliced": MIN_WARM_CALLS, "eager": 0}
    assert verdict.startswith("eager is faster: 8500 us a call sliced, 1000 us eagerly")
    # sliced faster than the profile calls (and than eager): timed as before
    timer, verdict, counts = drive(lambda: 0.2e-3, lambda: 1e-3, profiled=[1.5e-3] * 3)
    assert verdict is None and timer.steady and counts["sliced"] > WARM_CALLS


def test_no_early_verdict_while_a_sink_starts():
    """Sliced calls during which the session started a sink (other functions' parts
    registering: 50-300 ms of CPU) are no evidence: `gpe run` on TF core's MLP settled its
    train_step on eager at 66 ms against 19 ms so. Timed as usual then."""
    clock = Clock()
    timer = AdaptiveTimer(clock=clock, disturbed=lambda since: True)
    timer.profiled = [1.0e-3] * 3
    for _ in range(MIN_WARM_CALLS + 1):
        start = clock.now
        clock.now += 8.5e-3
        assert timer.sliced_call(start, lambda: None) is None
    assert not timer.settled


def test_the_callers_waits_for_a_sliced_update_count_against_sliced():
    """d2l's `sgd(params, grads, ...)`: the sliced call returns in 100 us, and the step's
    eager code after it then waits 400 us (a fence) for the update before reading the
    variables; eagerly the update takes 300 us and nothing waits. Timed by the calls alone
    sliced looked 3x faster and ran on at 1.1x eager's step time (the corpus's d2l_opt_sgd
    1.42x); counted with the waits it runs eagerly."""
    clock, fenced = Clock(), [0.0]
    timer = AdaptiveTimer(clock=clock, fenced=lambda: fenced[0])
    sliced_before = False
    for _ in range(2000):
        if timer.settled:
            break
        if sliced_before:  # the caller's eager code, fenced on the update
            clock.now += 400e-6
            fenced[0] += 400e-6
        start = clock.now
        if timer.timing_eager:
            clock.now += 300e-6
            timer.eager_call(start)
            sliced_before = False
        else:
            clock.now += 100e-6
            timer.sliced_call(start, lambda: None)
            sliced_before = True
    assert timer.settled and timer.eager_faster, (timer.sliced, timer.eager)
    assert timer.verdict.startswith("eager is faster: 500 us a call sliced, 300 us eagerly")
