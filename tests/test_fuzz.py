"""Differential fuzzing: generated programs (tests/fuzz/generate.py) run eagerly and under
gpe must be observably identical (tests/fuzz/differential.py compares results, exceptions,
variables, the side-effect log and printed output), and must not hang.

The programs run in a child process (one for many seeds, replaced after a hang), so a hang
is a failure here, not a stuck test run. `GPE_FUZZ_SEEDS=a:b` runs other seeds; long runs:
`python -m tests.fuzz.run --seeds 0:1000`.
"""
import concurrent.futures
import os
import time

import pytest

import background
from fuzz.differential import FINDINGS, Worker, call_args, run_seeds
from fuzz.run import parse_seeds

SEEDS = parse_seeds(os.environ.get("GPE_FUZZ_SEEDS", "0:20"))


def _generated():
    """The seeds in one worker (in the background it has the second core to itself)."""
    return run_seeds(SEEDS, timeout=90, env=background.env())


@pytest.mark.timeout(900)
def test_generated_programs_match_eager():
    """Every seed (a seed with a finding becomes a minimal regression test in
    tests/test_fuzz_findings.py, strict xfail until fixed: no seed is left out here)."""
    results = background.result(f"{__name__}.test_generated_programs_match_eager", _generated)
    assert [r.seed for r in results] == SEEDS
    found = [r for r in results if r.status in FINDINGS]
    broken = [r for r in results if r.status == "broken"]
    assert not broken, f"the generator wrote programs that do not run: {broken[:3]}"
    sliced = sum(r.graph_calls > 0 for r in results)
    assert sliced >= len(results) * 0.6, f"only {sliced} of {len(results)} programs sliced"
    assert not found, "\n".join(f"seed {r.seed} [{r.mode}] {r.status}: {r.detail[:500]}"
                                for r in found)


# a program that never ends eagerly either: the generator wrote it (its loop's body undoes
# the loop's progress, as seeds 1274 and 1854 did before the generator froze loop counters
# and bounds), so it is "broken", never a gpe hang
NEVER_ENDS = """\
import tensorflow as tf

LOG = []
V_s = tf.Variable(0.0)


def main(x, n, flag, scale):
    V_s.assign(0.0)
    while V_s < 3.0:
        V_s.assign_add(1.0)
        V_s.assign(V_s - 2.0)
    return x
"""


@pytest.mark.timeout(300)
def test_a_program_that_never_ends_eagerly_is_broken_not_a_gpe_hang():
    worker = Worker()
    try:
        start = time.perf_counter()
        result = worker.request({"source": NEVER_ENDS, "args": [([0.5, 1.0, 1.5], 1, False, 0.5)]},
                                timeout=60, eager_timeout=3)
        waited = time.perf_counter() - start
    finally:
        worker.stop()
    assert result.status == "broken", result
    assert "did not end eagerly" in result.detail
    assert waited < 60, f"waited {waited:.0f} s: the gpe time limit, not the eager one"


# planted findings: each program differs from eager only when it runs under gpe (the
# harness loads it as a module named gpe_fuzz_gpe_N), in one way each; one worker process
# runs them all in a row, as a long run does, and must report each with its seed, replace
# itself after the hang and the crash, and go on giving the right answer
PLANTED = """\
import concurrent.futures
import os
import time
import tensorflow as tf

LOG = []
V_s = tf.Variable(0.5)
under_gpe = "_gpe_" in __name__  # lower case: not compared


def main(x, n, flag, scale):
    t = tf.reduce_sum(x * 2.0) + V_s
    V_s.assign_add(tf.reduce_max(x))
    LOG.append(n)
    if under_gpe and len(LOG) == 5:  # the last call
        {plant}
    return t
"""
HANG_S = 6  # the planted hang's time limit under gpe (the others': 20 s): any limit finds it
PLANTS = {
    "same": ("pass", "same", ""),
    "diff": ("V_s.assign_add(1.0)", "diff", "variable V_s"),
    "gpe_error": ("raise KeyError('planted')", "gpe_error", "KeyError"),
    "hang": ("time.sleep(3600)", "hang", f"no answer in {HANG_S} s under gpe"),
    "crash": ("os._exit(7)", "gpe_error", "crash: the worker died under gpe (exit status 7)"),
}
ARGS = [([0.5, 1.0, 1.5], 1, False, 0.5)] * 2 + [([0.25, -1.0, 1.5], 2, True, 0.5)] * 3


ORDER = ["same", 0, "diff", "gpe_error", 1, "hang", 2, "crash", 3]


def _planted():
    """The planted programs and seeds in one worker, in ORDER, and seed 1 alone in a fresh
    one: (results, each request's worker pid, seed 1 alone)."""
    worker = Worker(recycle=100, env=background.env())
    pids, results = [], {}
    # seed 1 alone in a fresh worker, for the comparison at the end: side by side with the
    # worker under test (another process either way)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        alone_run = pool.submit(run_seeds, [1], timeout=90, recycle=1, env=background.env())
        try:
            # a generated seed before, between and after the planted ones: the worker's state
            # after each finding does not change the next program's result
            for number, item in enumerate(ORDER):
                if isinstance(item, int):
                    results[item] = worker.request({"seed": item}, timeout=90)
                else:
                    source = PLANTED.replace("{plant}", PLANTS[item][0])
                    results[item] = worker.request({"source": source, "args": ARGS,
                                                    "seed": 900 + number},
                                                   timeout=HANG_S if item == "hang" else 20,
                                                   eager_timeout=10)
                pids.append(worker.proc.pid if worker.proc else None)
        finally:
            worker.stop()
        (alone,) = alone_run.result()
    return results, pids, alone


def background_jobs():
    """The seeds and the planted run, started after collection (tests/background.py)."""
    return {"test_generated_programs_match_eager": _generated,
            "test_planted_findings_are_caught_by_one_worker_in_a_row": _planted}


@pytest.mark.timeout(600)
def test_planted_findings_are_caught_by_one_worker_in_a_row():
    results, pids, alone = background.result(
        f"{__name__}.test_planted_findings_are_caught_by_one_worker_in_a_row", _planted)
    order = ORDER
    for name, (_, status, detail) in PLANTS.items():
        result = results[name]
        assert result.status == status, (name, result)
        assert detail in result.detail, (name, result.detail[:800])
        assert result.seed == 900 + order.index(name), result
    assert results["same"].graph_calls >= 2, results["same"]  # sliced, not eager fallback
    # the hang's worker was killed and a new one served seed 2; the crash's likewise seed 3
    assert pids[order.index("hang")] is None and pids[order.index("crash")] is None, pids
    assert len({p for p in pids if p}) == 3, pids
    for seed in range(4):
        assert results[seed].status == "same", results[seed]
    # seed 1 ran in the worker that had run three planted programs (a diff and an error
    # among them): what it did there is what it does in a fresh process
    assert (results[1].status, results[1].graph_calls, results[1].helper_graph_calls,
            results[1].calls) == (alone.status, alone.graph_calls, alone.helper_graph_calls,
                                  alone.calls)


# TensorFlow's eager cache of Python scalars keys them by value (-0.0 == 0.0): after a
# program converted -0.0, `x * 0.0` gives -0.0s in that process, eagerly too. Seed 21070
# (`z = 0.0`, a TF `if` not taken, `x * z`) "differed" in the signs of its zeros when it ran
# after seed 21008 (`x * float(t.numpy())` with t = -0.0) in one worker: the eager run's and
# the gpe run's conversions met the cached -0.0 at different points. Each run now starts
# from an empty cache.
NEGATIVE_ZERO = """\
import tensorflow as tf

LOG = []


def main(x, n, flag, scale):
    s = tf.cast(n, tf.float32) * scale
    return tf.reduce_max(x) * float(s.numpy())
"""


# seed 21070's program as the generator made it then (the generator's issue-29 features
# changed what that seed draws)
SEED_21070 = """\
import tensorflow as tf

LOG = []
V_v = tf.Variable(tf.zeros([3]))


def main(x, n, flag, scale):
    f1 = scale * 0.5 + 1.0
    for k2 in range(min(0, 3)):
        l3 = [tf.sin(tf.reduce_sum(x)) * 1.5 + tf.cast(q, tf.float32) for q in range(2)]
    z4 = 0.0
    if tf.constant(1.5) > 1.0:
        z4 = (tf.tanh(tf.reduce_sum(x)) if int(tf.size(x)) > 0 else tf.reduce_sum(x) * scale)
    print("z", z4)
    return tf.reduce_sum(V_v), x, scale * 0.5 + 1.0 > -0.5
"""


@pytest.mark.timeout(300)
def test_an_earlier_programs_negative_zero_does_not_leak_into_the_next():
    worker = Worker()
    try:
        before = worker.request({"source": NEGATIVE_ZERO, "args": [([0.5, 1.0, 1.5], 0, False,
                                                                     -0.5)] * 3}, timeout=90)
        after = worker.request({"source": SEED_21070, "args": call_args(21070)}, timeout=90)
    finally:
        worker.stop()
    assert before.status == "same", before
    assert after.status == "same", after.detail[:500]
    assert after.graph_calls >= 2, after
