"""Differential tests: crossings no profile call reached (issue 29, item 8). A function whose
profile calls never get to a place where the host sends the TF part a value it computed (a
branch never taken, a tensor loop that never iterates, an early return every time) is
built speculating that no call gets there (JANUS); a call that does is finished eagerly
from there, and the function is built again knowing what it sent. Before, such a function
profiled every call (16, then ran eagerly for good) and never ran sliced.
"""
import pathlib

import pytest
import tensorflow as tf

from harness import check

SMALL, BIG = tf.constant(1.0), tf.constant(200.0)


def _reached(stats: dict, statement: str, names: str) -> None:
    """The one guard failure: the crossing at `statement` (its line in this file)."""
    lines = pathlib.Path(__file__).read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if text.strip() == statement)
    assert stats["fallbacks"] == {}, stats
    assert stats["guard_failures"] == {
        f"mid-call: line {line} ({names}): no profile call had reached it (built speculating "
        "that no call does)": 1}, stats


@pytest.mark.timeout(120)
def test_a_branch_never_taken_while_profiling():
    """The same input every call: the branch is never taken; the function runs sliced after
    its 2 profile calls. A call that takes it prints, logs, writes the variable and raises
    as eager does; the one after it profiles again, and the calls after run sliced, the
    branch taken or not."""
    def make(log):
        v = tf.Variable([1.0, 2.0, 3.0])

        def step(x):
            v.assign_add(tf.ones(3))
            y = x * 2.0
            if x > 100:
                print("big", float(x))
                scale = float(x) / 4.0  # host work the TF part needs
                s = tf.reduce_sum(v) * scale
                log.append(("big", float(s)))
                v.assign(v * 0.5)
                if s > 10000:
                    raise ValueError(f"too big: {float(s)}")
                y = y + s
            return y + 1.0
        return step, {"v": v}
    calls = [(SMALL,)] * 4 + [(BIG,)] + [(SMALL,)] * 3 + [(BIG,)] * 2 + [(tf.constant(900.0),)]
    # calls 0-1 profile (built speculating), 2-3 sliced, 4 takes the branch (sliced up to
    # there, then eagerly), 5 profiles, 6-10 sliced (the last one raises, as eager does)
    eager = frozenset({"ReadVariableOp", "Sum", "Mul", "AssignVariableOp", "Greater",
                       "AddV2"})
    under = check(make, calls, graph_calls=2 + 1 + 5, profile_calls=2,
                  host_ops_allowed=eager)
    stats = under.target.stats()
    _reached(stats, "s = tf.reduce_sum(v) * scale", "`scale`")
    assert stats["profile_calls"] == 3 and stats["variants"] == 2, stats


@pytest.mark.timeout(120)
def test_a_tensor_loop_that_never_iterated_while_profiling():
    """A `while` on tensors whose count is 0 in the profile calls, with host work in its
    body that the TF part needs: sliced after them; a call that iterates is finished
    eagerly from its first iteration; then it runs sliced, iterating or not."""
    def make(log):
        v = tf.Variable([1.0, 2.0, 3.0])

        def total(n):
            s = tf.constant(0.0)
            i = tf.constant(0)
            k = 0
            while i < n:
                k = k + 1  # a Python counter the TF part reads
                log.append(k)
                s = s + tf.reduce_sum(v) * k
                i += 1
            return s
        return total, {"v": v}
    zero, three = tf.constant(0), tf.constant(3)
    calls = [(zero,)] * 4 + [(three,)] + [(zero,)] * 2 + [(tf.constant(2),), (three,)]
    eager = frozenset({"ReadVariableOp", "Sum", "Mul", "AddV2", "Less"})
    under = check(make, calls, graph_calls=3 + 1 + 3, host_ops_allowed=eager)
    _reached(under.target.stats(), "s = s + tf.reduce_sum(v) * k", "`k`")


@pytest.mark.timeout(120)
def test_an_early_return_on_every_profile_call():
    """The host returns before the later TF work on the profile calls: sliced after them;
    a call that gets past the return runs the rest eagerly; then sliced again."""
    def make(log):
        v = tf.Variable([1.0, 2.0, 3.0])

        def act(x):
            y = x * 2.0
            if float(y) < 100:
                return y
            c = float(y) + 1  # host work the TF part needs
            z = tf.reduce_sum(v) + c
            print("late", float(z))
            v.assign_sub(tf.ones(3))
            return z * 3.0
        return act, {"v": v}
    calls = [(SMALL,)] * 3 + [(BIG,)] + [(SMALL,)] * 2 + [(BIG,)] * 3
    eager = frozenset({"ReadVariableOp", "Sum", "AddV2", "AssignSubVariableOp", "Mul",
                       "Fill"})
    under = check(make, calls, graph_calls=2 + 1 + 4, host_ops_allowed=eager)
    _reached(under.target.stats(), "z = tf.reduce_sum(v) + c", "`c`")
