"""Which ops can fail on the values they get (tfprog/failing.py): the judgement is precise
for integer division by a divisor known when tracing and for `Range` of known bounds (a
Dropout's seed arithmetic and a metric's range no longer make the host wait each call),
and never says "cannot fail" of an op that can raise."""
from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from gpe.tfprog.failing import can_fail
from harness import check


def ops_of(fn, *specs) -> dict:
    """{op type: [can_fail of each op of that type]} in `fn` traced on `specs`."""
    graph = tf.function(fn).get_concrete_function(*specs).graph
    found: dict = {}
    for op in graph.get_operations():
        found.setdefault(op.type, []).append(can_fail(op))
    return found


INT = tf.TensorSpec([3], tf.int32)
SCALAR = tf.TensorSpec([], tf.int32)


def test_integer_division_by_a_known_nonzero_divisor_cannot_fail():
    assert ops_of(lambda x: tf.math.floormod(x, 3), INT)["FloorMod"] == [False]
    assert ops_of(lambda x: x // tf.constant([1, 2, 3]), INT)["FloorDiv"] == [False]
    assert ops_of(lambda x: tf.truncatemod(x, -2), INT)["TruncateMod"] == [False]


def test_integer_division_by_zero_or_an_unknown_divisor_can_fail():
    assert ops_of(lambda x: tf.math.floormod(x, 0), INT)["FloorMod"] == [True]
    assert ops_of(lambda x: x // tf.constant([1, 0, 3]), INT)["FloorDiv"] == [True]
    assert ops_of(lambda x, n: x % n, INT, SCALAR)["FloorMod"] == [True]
    assert ops_of(lambda x, n: tf.truncatediv(x, n), INT, SCALAR)["TruncateDiv"] == [True]


def test_float_division_can_fail_only_on_an_unknown_shape():
    floats = tf.TensorSpec([3], tf.float32)
    assert ops_of(lambda x: tf.math.floormod(x, 0.0), floats)["FloorMod"] == [False]
    unknown = tf.TensorSpec(None, tf.float32)
    assert ops_of(lambda x, y: tf.math.floormod(x, y), unknown, unknown)["FloorMod"] == [True]


def test_range_of_valid_known_bounds_cannot_fail():
    assert ops_of(lambda x: tf.range(4) + x, SCALAR)["Range"] == [False]
    assert ops_of(lambda x: tf.range(5, 1, -2) + x, SCALAR)["Range"] == [False]
    assert ops_of(lambda x: tf.range(0.0, 1.0, 0.25), SCALAR)["Range"] == [False]


def test_range_of_unknown_or_invalid_bounds_can_fail():
    assert ops_of(lambda n: tf.range(n), SCALAR)["Range"] == [True]
    assert ops_of(lambda n: tf.range(0, 4, n), SCALAR)["Range"] == [True]
    for start, limit, delta in ((4, 0, 1), (0, 4, -1), (0.0, 1.0, float("nan")),
                                (0.0, float("inf"), 1.0)):
        assert not _valid(start, limit, delta), (start, limit, delta)
    assert not _valid(np.array([0, 1]), 4, 1)
    assert _valid(np.int64(0), np.int64(3), np.int64(1))


def _valid(start, limit, delta) -> bool:
    from gpe.tfprog.failing import _range_is_valid  # pylint: disable=import-outside-toplevel
    return _range_is_valid(start, limit, delta)


def test_an_integer_modulo_by_an_argument_still_raises_where_eager_does():
    """A divisor the host sends can be zero: the host waits for the modulo before the
    statement after it, so the error surfaces there, before the write and the log."""
    def make(log):
        v = tf.Variable(0)

        def main(x, n):
            r = tf.math.floormod(x, n)
            log.append("after")
            v.assign_add(tf.reduce_sum(r))
            return r
        return main, {"v": v}
    x = tf.constant([5, 7, 9])
    check(make, [(x, tf.constant(2)), (x, tf.constant(4)), (x, tf.constant(0)),
                 (x, tf.constant(3))])


@pytest.mark.timeout(300)
def test_a_dropout_and_metric_step_needs_no_wait_on_the_graph():
    """keras_custom_step's shape: a Dropout (its seed is reduced by FloorMod by a
    constant) and a SparseCategoricalAccuracy (a Range of constants): the host no longer
    waits for the graph in each call, and the results are eager's."""
    def make(log):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.layers.Dense(8, activation="relu"),
                                  keras.layers.Dropout(0.1), keras.layers.Dense(3)])
        model(tf.zeros([4, 5]))
        opt = keras.optimizers.SGD(0.1)
        acc = keras.metrics.SparseCategoricalAccuracy()
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

        def main(x, y):
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss = loss_fn(y, logits)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            acc.update_state(y, logits)
            log.append("step")
            return loss
        return main, {f"w{i}": w for i, w in enumerate(model.trainable_variables)}
    x = tf.reshape(tf.range(20, dtype=tf.float32) / 10.0, [4, 5])
    y = tf.constant([0, 1, 2, 1])
    under = check(make, [(x, y)] * 4)
    parts = [v.part for v in under.target.variants.values()]
    assert parts and all(not p.waits for p in parts), [p.waits for p in parts]
