"""A function `gpe run` wraps is built only once its calls have paid for it
(host/speculation/payoff.py): counts of calls taken each way, with the expected build cost fixed
through GPE_PAYOFF (conftest.py sets 0, build at once, for the other tests)."""
from __future__ import annotations

import time

import pytest
import tensorflow as tf

from gpe.host.speculation import payoff
from gpe.host.call.function import SlicedFunction

X = tf.ones([4, 8])


def step(x):
    return tf.reduce_sum(tf.tanh(x) * 2.0)


def test_the_rule_counts_eager_time_after_the_first_call(monkeypatch):
    monkeypatch.setenv("GPE_PAYOFF", "0.05")
    p = payoff.Payoff(waiting=True)
    assert not p.eager_call(10.0)   # the first call (one-time costs) does not count
    assert not p.eager_call(0.02) and not p.eager_call(0.02)
    assert p.eager_call(0.02) and not p.waiting  # 0.06 s >= 0.05 s: build it


def test_the_measured_cost_is_the_mean_of_the_builds(monkeypatch):
    monkeypatch.delenv("GPE_PAYOFF", raising=False)
    costs = payoff.BuildCosts()
    assert costs.expected_s() == payoff.DEFAULT_BUILD_S
    costs.add(0.3, built=False)  # slicing
    costs.add(0.1, built=True)   # building
    costs.add(0.2, built=True)
    assert costs.expected_s() == pytest.approx(0.3)
    monkeypatch.setenv("GPE_PAYOFF", "0")
    assert not payoff.enabled()


def test_a_lighter_function_is_expected_to_cost_less_to_build(monkeypatch):
    """examples/lenet_cnn under `gpe run`: `test_step` (forward only, every 4th step) took
    9 ms a call against the training step's 29 ms, and waited for the training step's
    whole build cost (0.38 s): 20 calls of 20 eager. Its expected cost is now the training
    step's build over its eager call, times its own eager call (between the mean cost of
    slicing and the mean cost of a build)."""
    monkeypatch.delenv("GPE_PAYOFF", raising=False)
    costs = payoff.BuildCosts()
    costs.add(0.08, built=False, slicing=True)   # slicing train_step
    costs.add(0.30, True, 0.029, 0.08)           # building it: 0.38 s, 29 ms a call eagerly
    costs.add(0.5, built=False)                  # starting its graph: not a slicing
    assert costs.expected_s() == pytest.approx(0.88)            # no call time: the mean
    assert costs.expected_s(0.009) == pytest.approx(0.38 / 0.029 * 0.009)  # 0.118 s
    assert costs.expected_s(0.0001) == pytest.approx(0.08)      # not below slicing's cost
    assert costs.expected_s(1.0) == pytest.approx(0.88)         # nor above a build's


@pytest.mark.timeout(300)
def test_a_function_called_less_than_its_build_costs_is_never_sliced(monkeypatch):
    monkeypatch.setenv("GPE_PAYOFF", "1000")  # seconds: never paid off here
    sliced = SlicedFunction(step, auto=True, payoff=True)

    def fail(*args, **kwargs):
        raise AssertionError("sliced before it paid off")
    monkeypatch.setattr(sliced.builder, "plan", fail)
    for _ in range(8):
        assert float(sliced(X)) == float(step(X))
    stats = sliced.stats()
    assert stats["unpaid_calls"] == 8 and stats["eager_calls"] == 8
    assert stats["graph_calls"] == 0 and stats["profile_calls"] == 0 and not stats["fallbacks"]


@pytest.mark.timeout(300)
def test_a_function_that_has_paid_off_is_profiled_built_and_sliced(monkeypatch):
    monkeypatch.setenv("GPE_PAYOFF", "1e-9")  # paid off by its second call
    sliced = SlicedFunction(step, auto=True, payoff=True, adaptive=False)
    results = [float(sliced(X)) for _ in range(8)]
    assert results == [float(step(X))] * 8
    stats = sliced.stats()
    assert stats["unpaid_calls"] == 2       # the first (not counted) and the second
    assert stats["profile_calls"] == 3      # then profiled as usual
    assert stats["graph_calls"] == 3 and stats["variants"] == 1


def test_gpe_function_builds_at_once_whatever_the_setting(monkeypatch):
    monkeypatch.setenv("GPE_PAYOFF", "1000")
    sliced = SlicedFunction(step)  # as gpe.function makes it
    assert not sliced.payoff.waiting


def test_a_long_build_prints_one_progress_line(monkeypatch, capsys):
    monkeypatch.delenv("GPE_PROGRESS", raising=False)
    payoff.progress("slicing and building", "train_step", "train.py:3", 0.5)
    payoff.progress("slicing and building", "train_step", "train.py:3", 2.5)
    assert capsys.readouterr().err == \
        "gpe: slicing and building train_step (train.py:3) took 2.5 s\n"
    monkeypatch.setenv("GPE_PROGRESS", "0")
    payoff.progress("slicing and building", "train_step", "train.py:3", 2.5)
    assert capsys.readouterr().err == ""


def test_a_build_still_running_after_the_limit_says_what_it_builds(monkeypatch, capsys):
    import time
    monkeypatch.delenv("GPE_PROGRESS", raising=False)
    monkeypatch.setattr(payoff, "PROGRESS_S", 0.05)
    with payoff.Building("building", "train_step", "train.py:3"):
        pass  # quick: nothing shown
    time.sleep(0.2)
    assert capsys.readouterr().err == ""
    with payoff.Building("building", "train_step", "train.py:3"):
        time.sleep(0.5)  # shown while it runs, before it ends
        assert capsys.readouterr().err == "gpe: building train_step (train.py:3) ...\n"
    monkeypatch.setenv("GPE_PROGRESS", "0")
    with payoff.Building("building", "train_step", "train.py:3"):
        time.sleep(0.2)
    assert capsys.readouterr().err == ""


@pytest.mark.timeout(300)
def test_a_long_build_of_a_function_shows_a_line_while_it_runs(monkeypatch, capsys):
    monkeypatch.delenv("GPE_PROGRESS", raising=False)
    monkeypatch.setattr(payoff, "PROGRESS_S", 0.0)  # every build is long here
    sliced = SlicedFunction(step, profile_calls=1, adaptive=False)
    assert [float(sliced(X)) for _ in range(3)] == [float(step(X))] * 3
    assert sliced.stats()["graph_calls"] == 2
    err = capsys.readouterr().err
    assert f"gpe: building step ({sliced.where}) ...\n" in err
    assert f"gpe: slicing and building step ({sliced.where}) took " in err


# the budget of a function that never ran sliced (issue 29, items 6 and 7) ----------------
def test_the_budget_allows_the_first_attempt_then_three_times_it_or_a_tenth_of_the_calls():
    budget = payoff.Budget()
    budget.spend(5.0)  # however long the first attempt takes, it is made
    assert not budget.exhausted()
    budget.attempt_ended()
    budget.spend(9.0)  # 14 s in all: within 3 x 5 s
    assert not budget.exhausted()
    budget.spend(2.0)  # 16 s
    assert budget.exhausted()
    budget.calls_s = 200.0  # the calls took 200 s eagerly: a tenth of them is 20 s
    assert not budget.exhausted()
    budget.counting = False  # a call ran sliced: nothing bounded any more
    budget.calls_s = 0.0
    assert not budget.exhausted()


def mode_step(x, mode):
    return tf.reduce_sum(tf.tanh(x) * 2.0), mode


def test_a_function_whose_builds_keep_failing_stops_trying_once_its_budget_is_spent(monkeypatch):
    """Each new signature (a string argument changing every third call) is profiled and
    built, and the build fails after 50 ms: it is not tried again and again (before, up to
    the churn bound's 8 signatures), and it says so."""
    from gpe.host.variants import builder
    from gpe.tfprog.part import PartError
    builds = []

    def failing(*args, **kwargs):
        builds.append(1)
        time.sleep(0.05)
        raise PartError("injected: the trace failed")
    monkeypatch.setattr(builder, "assemble", failing)
    sliced = SlicedFunction(mode_step)
    for i in range(30):
        got, mode = sliced(X, f"m{i // 3}")
        want, _ = mode_step(X, f"m{i // 3}")
        assert float(got) == float(want) and mode == f"m{i // 3}"
    stats = sliced.stats()
    reasons = " ".join(stats["fallbacks"])
    assert "with no call run sliced" in reasons and "new argument signatures" not in reasons
    assert 2 <= len(builds) <= 6, builds
    assert stats["graph_calls"] == 0 and stats["eager_calls"] == 30


def tape_read_on_host(x, seen=[]):
    for i in range(3):  # the TF part unrolls the loop; the host reads its `i` after it
        y = tf.reduce_sum(x * float(i))
    seen.append(i)
    return y


def test_a_refused_plan_is_not_sliced_again_for_another_shape(monkeypatch):
    """The slicer's refusal holds for every call sharing its plan key (the plans are shared
    so): a refused function called with ten shapes is sliced once."""
    from gpe.host.variants import builder
    slicings = []
    real = builder.slice_function

    def counted(*args, **kwargs):
        slicings.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(builder, "slice_function", counted)
    sliced = SlicedFunction(tape_read_on_host)
    for n in range(1, 11):
        x = tf.ones([n])
        assert float(sliced(x)) == float(tape_read_on_host(x))
    stats = sliced.stats()
    assert "unsupported-order" in " ".join(stats["fallbacks"]), stats["fallbacks"]
    assert len(slicings) == 1 and stats["graph_calls"] == 0
