"""What gpe tells the user names the user's code (issue 12, item 9): a fallback reason or a
line of `gpe explain` about a value the slicer moved into a temporary names the
expression (`holder.params()`), the file and the line, never `_gpe_h0`."""
from __future__ import annotations

import io
import os
import warnings

import numpy as np
import tensorflow as tf

import gpe

HERE = os.path.basename(__file__)


class Holder:
    def __init__(self):
        self.w = tf.Variable([1.0, 2.0])
        self.count = 0

    def params(self):
        self.count += 1  # host work: the call stays on the host, its list of variables
        return [self.w]  # cannot cross (a method returning only the list is traced inline)

    def draw(self):
        self.count += 1  # host work: the call stays on the host
        return tf.ones([2]) * self.count


holder = Holder()


def step_with_params(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(holder.w * x)
    grads = tape.gradient(loss, holder.params())
    holder.w.assign_sub(0.1 * grads[0])
    return loss


def step_with_host_tensor(x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(x * holder.draw())
    return tape.gradient(y, x)


def told(sliced) -> list[str]:
    stats = sliced.stats()
    return list(stats["fallbacks"]) + [gpe.explain(sliced, file=io.StringIO())]


def line_of(fn, text: str) -> int:
    import inspect
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def run_both(fn, calls=10):
    x = tf.constant([0.5, 0.25])
    holder.w.assign([1.0, 2.0])
    holder.count = 0
    eager = [fn(x).numpy() for _ in range(calls)]
    holder.w.assign([1.0, 2.0])
    holder.count = 0
    sliced = gpe.function(fn, adaptive=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpe.GpeWarning)
        under = [np.asarray(sliced(x)) for _ in range(calls)]
    np.testing.assert_array_equal(np.array(eager), np.array(under))
    return sliced


def test_a_value_that_cannot_cross_is_named_by_its_expression_file_and_line():
    sliced = run_both(step_with_params)
    messages = told(sliced)
    assert all("_gpe_" not in m for m in messages), messages
    where = f"{HERE}:{line_of(step_with_params, 'holder.params()')}"
    reasons = list(sliced.stats()["fallbacks"])
    assert any("`holder.params()`" in r and where in r for r in reasons), reasons


def test_a_tensor_made_by_host_code_in_a_tape_is_named_by_its_expression():
    sliced = run_both(step_with_host_tensor)
    messages = told(sliced)
    assert all("_gpe_" not in m for m in messages), messages
    where = f"{HERE}:{line_of(step_with_host_tensor, 'holder.draw()')}"
    reasons = list(sliced.stats()["fallbacks"])
    assert any("`holder.draw()`" in r and where in r for r in reasons), reasons
    assert "holder.draw()" in messages[-1]  # explain shows the expression, not a temporary
