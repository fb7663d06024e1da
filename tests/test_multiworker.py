"""MultiWorkerMirroredStrategy on 2 local workers (examples/multiworker.py): one process
per worker with its TF_CONFIG; the workers agree, gpe equals eager; a worker killed
mid-training makes the other end with an error in bounded time, and a restart from the
last checkpoint ends at the weights of an uninterrupted run. Where no worker is killed,
each worker process trains the modes in turn (--in-turn: one TensorFlow start per worker,
about 4 s of CPU each, not one per mode; gpe-run's workers are processes of their own).

Each launch depends on nothing the tests do: it runs in the background
(tests/background.py), and its test asserts on it."""
import json
import os
import subprocess
import sys
import types

import pytest

import background

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "examples", "multiworker.py")
DISTRIBUTED = os.path.join(os.path.dirname(EXAMPLE), "distributed.py")


def _launch(*args):
    with background.folder() as cwd:
        return subprocess.run([sys.executable, EXAMPLE, "--workers", "2", *args], cwd=cwd,
                              capture_output=True, text=True, timeout=280,
                              env=background.env(TF_CPP_MIN_LOG_LEVEL="3"))


def _subclassed(wrap):
    """examples/distributed.py --strategy multiworker: (its run, the JSON it wrote)."""
    with background.folder() as cwd:
        out = os.path.join(cwd, "result.json")
        proc = subprocess.run([sys.executable, DISTRIBUTED, "--strategy", "multiworker",
                               "--program", "subclassed", "--mode", "eager,gpe", "--wrap", wrap,
                               "--steps", "14", "--timeout", "300", "--json", out],
                              cwd=cwd, capture_output=True, text=True, timeout=380,
                              env=background.env(TF_CPP_MIN_LOG_LEVEL="3"))
        return proc, (open(out).read() if os.path.exists(out) else None)


LAUNCHES = {
    "test_two_workers_agree_and_gpe_equals_eager":
        lambda: _launch("--mode", "both", "--steps", "8", "--in-turn"),
    "test_two_workers_with_the_replica_step_sliced_equal_eager":
        lambda: _launch("--mode", "eager,gpe,gpe-run", "--steps", "8", "--wrap", "replica",
                        "--in-turn"),
    "test_two_workers_with_a_host_work_replica_step_slice_and_equal_eager":
        lambda: _launch("--mode", "both", "--steps", "8", "--wrap", "replica", "--host-work",
                        "--in-turn"),
    "test_killed_worker_ends_the_other_with_an_error_and_restart_resumes":
        lambda: _launch("--mode", "gpe", "--steps", "8", "--every", "3", "--die-at", "4",
                        "--timeout", "15"),
    # both wraps of the parametrized test, one after the other (one job: one test name)
    "test_subclassed_model_on_two_workers_equals_eager_side_by_side":
        lambda: {wrap: _subclassed(wrap) for wrap in ("dist", "replica")},
}


def background_jobs():
    """The launches the tests below assert on, started after collection."""
    return LAUNCHES


def _result(test):
    return background.result(f"{__name__}.{test}", LAUNCHES[test])


@pytest.mark.timeout(300)
def test_two_workers_agree_and_gpe_equals_eager():
    proc = _result("test_two_workers_agree_and_gpe_equals_eager")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    out = proc.stdout
    assert "eager: workers agree: True" in out and "gpe: workers agree: True" in out
    assert "gpe equals eager (losses and final weights): True" in out
    assert out.count("'graph_calls': 5, 'eager_calls': 3") == 2, out  # both workers sliced


@pytest.mark.timeout(300)
def test_two_workers_with_the_replica_step_sliced_equal_eager():
    """gpe.function on the per-replica step only, called by plain strategy.run: one
    replicated sliced call per step on each worker (host/distribution/replicated.py). The
    same script unmodified under `gpe run --report` on each worker (`gpe-run`): its step,
    defined inside the worker's function (which gpe run does not wrap), given to
    strategy.run, is sliced as gpe.function slices it, on both workers: the calls after the
    first call and the 3 profile calls, counted by the report (a worker of several makes no
    choice by time: host/speculation/payoff.lockstep)."""
    proc = _result("test_two_workers_with_the_replica_step_sliced_equal_eager")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    out = proc.stdout
    assert "eager: workers agree: True" in out and "gpe: workers agree: True" in out
    assert "gpe equals eager (losses and final weights): True" in out
    lines = {line.split(":")[0]: line for line in out.splitlines() if "workers agree" in line}
    assert lines["gpe"].count("'graph_calls': 5, 'eager_calls': 3") == 2, out  # both sliced
    assert "gpe-run: workers agree: True" in out, out + proc.stderr[-3000:]
    assert "gpe-run equals eager (losses and final weights): True" in out
    assert lines["gpe-run"].count(  # its first call plain, 3 profile calls, then sliced
        "{'calls': 8, 'graph_calls': 4, 'eager_calls': 4}") == 2, out


def test_a_worker_of_several_makes_no_choice_by_time(monkeypatch):
    """Where TF_CONFIG names several workers, nothing decides eager or sliced by time (a
    step run eagerly on one worker and sliced on another takes other collective keys:
    both wait forever): `gpe run` builds after one plain call and the profile calls,
    whatever GPE_PAYOFF says (0 here: conftest), no variant is timed against eager, no
    build budget runs out."""
    from gpe.host.speculation import payoff
    from gpe.host.variants.variant import Variant
    assert not payoff.lockstep()
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["a:1", "b:2"]},
                                                "task": {"type": "worker", "index": 0}}))
    assert payoff.lockstep() and payoff.enabled()
    waiting = payoff.Payoff(True)
    assert waiting.eager_call(1e-6) and not waiting.waiting  # paid by its first call
    budget = payoff.Budget()
    budget.first_s, budget.spent_s = 0.001, 10.0
    assert not budget.exhausted()
    import gpe
    import programs
    f = gpe.function(programs.dropout_like)
    for _ in range(5):
        f(tf_ones(), 0.5)
    variants = list(f.variants.values())
    assert variants and all(isinstance(v, Variant) and v.timer.steady for v in variants)
    assert f.stats()["graph_calls"] == 2 and f.stats()["timed_calls"] == 0, f.stats()
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["a:1"]},
                                                "task": {"type": "worker", "index": 0}}))
    assert not payoff.lockstep()
    # a strategy given its cluster by a resolver (no TF_CONFIG): from its first step on
    monkeypatch.setattr(payoff, "_seen", [False])
    from gpe.host.distribution import replicated
    strategy = types.SimpleNamespace(extended=types.SimpleNamespace(_num_workers=2))
    monkeypatch.setattr(replicated, "_original", lambda *args: None)  # (TF's: not called)
    replicated._call_for_each_replica(strategy, lambda: None)
    assert payoff.lockstep()


def tf_ones():
    import tensorflow as tf
    return tf.ones([4, 3])


@pytest.mark.timeout(300)
def test_two_workers_with_a_host_work_replica_step_slice_and_equal_eager():
    """A per-replica step with host work (a printed step counter, the loss read back with
    .numpy() into a Python list), gpe.function on it, plain strategy.run on each of 2
    workers: the workers agree, gpe's losses, weights, printed output and host list equal
    eager's on every worker, and every call after the 3 profile calls runs sliced (the
    host part in the worker's replica thread, the TF part with the collective all-reduce
    in the graph: host/distribution/replica_step.py)."""
    proc = _result("test_two_workers_with_a_host_work_replica_step_slice_and_equal_eager")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    out = proc.stdout
    assert "eager: workers agree: True" in out and "gpe: workers agree: True" in out
    assert "gpe equals eager (losses and final weights): True" in out
    assert "host work equals eager's on every worker (printed output, the losses read " \
        "back): True" in out
    assert out.count("'graph_calls': 5, 'eager_calls': 3, 'fallbacks': {}") == 2, out


@pytest.mark.timeout(300)
def test_killed_worker_ends_the_other_with_an_error_and_restart_resumes():
    proc = _result("test_killed_worker_ends_the_other_with_an_error_and_restart_resumes")
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    out = proc.stdout
    killed = next(line for line in out.splitlines() if "killed at step 4" in line)
    assert "exit 1:" in killed and "exit 3:" in killed  # an error, not a hang (killed)
    assert "did not end in time" not in out
    assert "restarted run ends at the uninterrupted run's weights: True" in out


_SUBCLASSED: dict = {}


def _subclassed_runs():
    """Both wraps' runs, taken from the background once (the first parameter's test)."""
    if not _SUBCLASSED:
        _SUBCLASSED.update(
            _result("test_subclassed_model_on_two_workers_equals_eager_side_by_side"))
    return _SUBCLASSED


@pytest.mark.timeout(760)  # its job runs both wraps (each killed past 380 s)
@pytest.mark.parametrize("wrap", ["dist", "replica"])
def test_subclassed_model_on_two_workers_equals_eager_side_by_side(wrap):
    """examples/distributed.py --strategy multiworker: a subclassed keras.Model with its
    custom step (SGD with momentum, a Keras loss), eager and gpe taking turns in each of
    2 workers (launched with TF_CONFIG each; killed past the timeout): the workers agree,
    gpe's losses and weights equal eager's, every call after the profile calls sliced."""
    proc, written = _subclassed_runs()[wrap]
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    modes = json.loads(written)["modes"]
    eager, sliced = modes["eager"], modes["gpe"]
    assert "error" not in eager and "error" not in sliced, (eager, sliced)
    assert eager["agree"] and sliced["agree"] and eager["workers"] == 2
    assert eager["losses"] == sliced["losses"] and eager["weights"] == sliced["weights"]
    assert len(set(eager["losses"])) == len(eager["losses"]) == 14
    stats = sliced["stats"]
    assert stats["graph_calls"] == 14 - stats["profile_calls"] >= 11, stats
