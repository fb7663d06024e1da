"""Steady-state calls of training steps under `gpe run` (issue 12): what kept them eager
when `gpe run` wraps every function of the script (payoff, adaptive timing, wrapped
callees), each with a test that runs the program eagerly and under gpe and compares."""
from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
import tensorflow as tf

from gpe.run import auto
from harness import check, differential
from test_training_programs import EAGER, PROGRAMS, drive, examples_drive, slow

RNG = np.random.RandomState(0)
X = tf.constant(RNG.normal(size=(8, 4)).astype(np.float32))
Y = tf.constant(RNG.normal(size=(8, 1)).astype(np.float32))


class Rates:
    def __init__(self):
        self.dropout = 0.25
        self.lr = 0.1


@pytest.mark.timeout(300)
def test_a_user_class_whose_call_gpe_run_wrapped_is_tf_work_in_the_tape():
    """examples/lr_schedule_object: `model(x, rate)` inside the tape, where `gpe run` has
    wrapped the user class's `__call__`: the call is the callee's TF work (as with the
    plain method), not a host call whose result cannot cross into the tape."""
    class Model:
        def __init__(self):
            self.w = tf.Variable(np.random.RandomState(1).normal(size=(4, 1)).astype(np.float32))
            self.noise = tf.random.Generator.from_seed(1)

        def __call__(self, x, rate):
            h = tf.matmul(x, self.w)
            if rate > 0:
                h = h * tf.cast(self.noise.uniform(tf.shape(h)) >= rate, tf.float32)
            return h

    Model.__call__ = auto(Model.__call__)  # as `gpe run` decorates a class's methods

    def make(log):
        model, rates = Model(), Rates()

        def train_step(model, rates, x, y):
            with tf.GradientTape() as tape:
                pred = model(x, rates.dropout)
                loss = tf.reduce_mean(tf.square(pred - y))
            model.w.assign_sub(rates.lr * tape.gradient(loss, model.w))
            log.append(rates.lr)
            return loss
        return train_step, {"w": model.w}, [(model, rates, X, Y)] * 5
    run = check(make, None)
    assert run.target.stats()["graph_calls"] == 4


@pytest.mark.timeout(300)
def test_a_step_counter_argument_is_sent_after_three_calls():
    """`train_step(x, step)` with the step number an int: each value was folded into a
    variant of its own until the fifth, so 8 calls ran eagerly (5 values profiled, then 3
    profile calls of the variant that sends it). A new value at each of the first three
    calls now makes it sent, and the third call profiles that variant: 5 eager calls."""
    def make(log):
        w = tf.Variable(tf.ones([4, 1]))

        def train_step(x, step):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(x @ w - Y[:4])) * (1.0 + 0.1 * step)
            w.assign_sub(0.01 * tape.gradient(loss, w))
            log.append(step)
            return loss
        return train_step, {"w": w}, [(X[:4], i) for i in range(10)]
    run = check(make, None, graph_calls=5, profile_calls=3, adaptive=False)
    assert run.target.stats()["profile_calls"] == 5


def test_an_int_flag_taking_turns_stays_folded():
    """Two values in turn (a phase flag) repeat within three calls: still folded, a
    variant per value."""
    def make(log):
        w = tf.Variable(tf.ones([4, 1]))

        def train_step(x, phase):
            scale = 2.0 if phase == 0 else 0.5   # a host branch on the folded flag
            w.assign_sub(0.01 * scale * tf.reduce_mean(x @ w) * tf.ones([4, 1]))
            return tf.reduce_sum(w)
        return train_step, {"w": w}, [(X[:4], i % 2) for i in range(8)]
    run = check(make, None, graph_calls=6)
    assert run.target.stats()["variants"] == 2


def test_the_later_calls_are_counted_from_marks_at_no_cost_per_call():
    """The report's "last N calls: S sliced" comes from the calls' numbers and sliced
    counts noted at marks (16, 18, ... 32, 36, ...: an eighth of a doubling apart), not
    on every call: the call path compares `calls` with `mark` and does nothing else
    (tests/test_call_path.py counts its Python calls)."""
    from gpe.host.diagnostics.stats import FIRST_MARK, Stats
    stats = Stats()
    for call in range(1, 10_001):
        stats.calls += 1
        if stats.calls == stats.mark:
            stats.checkpoint()
        if call % 4 or call > 5000:  # the first half: 3 calls in 4 sliced
            stats.graph_calls += 1
    assert stats.marks[0][0] == FIRST_MARK and len(stats.marks) < 80
    calls, sliced, ms = stats.late()
    assert 5000 - 5000 // 8 <= calls <= 5000 and sliced == calls and ms is not None
    short = Stats(calls=FIRST_MARK - 1)
    assert short.late() == (FIRST_MARK - 1, 0, None)  # too few calls to tell


def test_the_report_lists_functions_that_waited_on_payoff_apart(monkeypatch):
    """A function never built because its eager time stayed under a build's expected cost
    was listed among "functions with TF work" (dqn's NumPy environment, 0 sliced): it is
    now listed apart, with its eager time, and its calls are not called sliced or eager
    for a reason the report does not give."""
    from gpe import run
    monkeypatch.setenv("GPE_PAYOFF", "1000")  # seconds: never paid off here

    def env_step(state):
        return state * 0.5 + 1.0
    wrapped = auto(env_step)
    for _ in range(3):
        wrapped(np.ones(3))
    report = run.report()
    head, _, waiting = report.partition("waiting to pay off a build")
    assert "env_step" not in head and "expected 1000000 ms" in waiting, report
    assert "    test_the_report_lists_functions_that_waited_on_payoff_apart.<locals>." \
           "env_step: 3 calls, " in waiting, report


# --- the example programs under `gpe run` (slow: `python -m pytest -m slow`) --------------

RUN_STEPS = 80  # the second half is past the payoff wait, the profile calls and the
# adaptive timing (at 60, lenet_cnn's test_step, 15 calls, would be half eager: payoff)
# dqn's act_step (one small forward pass, then NumPy on its `.numpy()`: a round trip per
# call) is timed against eager by the adaptive choice: 3x faster sliced at a load of 4
# (settled by the probe), 8x slower at a load of 11 (822 us sliced, 104 us eagerly: the
# graph's threads wait for a core), where it then runs eagerly, as chosen. Its share
# follows the machine's load: where it is under 90%, the report must say that the adaptive
# choice ran those calls eagerly, and the program's other steps must still reach 90%.
LOAD_DEPENDENT = {"dqn": "act_step"}
# the report's lines of an adaptive verdict of eager (gpe/run.py, host/speculation/adaptive.py)
ADAPTIVE_CHOICE = re.compile(r"eager x\d+: (the adaptive choice ran it eagerly \(faster so\)|"
                             r"eager is faster: |sliced is not clearly faster than eager: )")


@slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("program", PROGRAMS)
def test_example_program_under_gpe_run_is_sliced_in_steady_state(program):
    """examples/_drive.py runs the program eagerly and unmodified under `gpe run --report`:
    same results, and >= 90% of its step functions' calls in the second half sliced (the
    report's counts: a step that waited to pay off its build throughout counts none)."""
    row = drive(program, ["eager", "gpe-run"], RUN_STEPS)["gpe-run"]
    assert row.get("error") is None, row.get("error")
    assert row["match"] == "identical" and row["stdout"] == "identical", row
    if row["second_half"] >= 0.9 or program in EAGER:  # its last calls (or eager by design)
        return
    # under 90%: only a load-dependent step's adaptive choice may have kept calls eager
    step = LOAD_DEPENDENT.get(program)
    lines = row["report"]
    assert step is not None, (row["sliced"], lines)
    others = late = 0
    for name, (_, _, sliced, calls) in examples_drive().run_steps(lines).items():
        if name.rsplit(".", 1)[-1] == step:  # its block: its line and the indented ones
            at = next(i for i, line in enumerate(lines) if line.startswith(f"  {name}: "))
            block = [lines[at]] + list(itertools.takewhile(
                lambda line: line.startswith("    "), lines[at + 1:]))
            assert any(ADAPTIVE_CHOICE.search(line) for line in block), (name, block)
            late += 1
        else:
            assert sliced >= 0.9 * calls, (name, row["sliced"], lines)
            others += 1
    assert late == 1 and others >= 1, (row["sliced"], lines)


# a sliced call inside another call's arguments (d2l's evaluate_accuracy) ------------------
W_EVAL = tf.Variable(tf.ones([4, 2]) * 0.1)


class Accumulator:
    def __init__(self):
        self.data = [0.0, 0.0]

    def add(self, *args):
        self.data = [a + float(b) for a, b in zip(self.data, args)]


def eval_net(X):
    return tf.matmul(X, W_EVAL)


def eval_accuracy(y_hat, y):
    y_hat = tf.argmax(y_hat, axis=1)
    LOG_EVAL.append("accuracy")
    return float(tf.reduce_sum(tf.cast(tf.cast(y_hat, y.dtype) == y, y.dtype)))


def evaluate_accuracy(data_iter):
    metric = Accumulator()
    for X, y in data_iter:
        metric.add(eval_accuracy(eval_net(X), y), tf.size(y))
    return metric.data[0] / metric.data[1]


LOG_EVAL: list = []


@pytest.mark.timeout(300)
def test_a_sliced_call_inside_another_calls_arguments_runs_nested():
    """`metric.add(accuracy(net(X), y), size(y))` under `gpe run` (d2l's evaluate_accuracy,
    every function wrapped): `accuracy` was called while evaluate_accuracy's sliced call
    was running, so it ran eagerly, after a wait for the caller's TF part, every time
    (d2l_softmax_scratch under `gpe run`: 2x eager's time). Moved out into statements of
    their own, in Python's order, the calls run nested: accuracy's TF part inside the
    caller's."""
    data = tf.data.Dataset.from_tensor_slices(
        (tf.reshape(tf.range(32, dtype=tf.float32), (8, 4)) / 10.0,
         tf.constant([0, 1] * 4, tf.int64))).batch(4)

    def program(wrap, log):
        global LOG_EVAL, eval_accuracy, eval_net
        LOG_EVAL, plain = log, (eval_accuracy, eval_net)
        eval_accuracy, eval_net = wrap(eval_accuracy), wrap(eval_net)
        try:
            main = wrap(evaluate_accuracy)
            return [main(data) for _ in range(5)], {"w": W_EVAL}
        finally:
            eval_accuracy, eval_net = plain
    made = differential(program)
    accuracy, main = made[0], made[2]
    assert main.stats()["graph_calls"] == 4, main.stats()
    assert accuracy.stats()["graph_calls"] >= 8 and not accuracy.stats()["fallbacks"], \
        accuracy.stats()
