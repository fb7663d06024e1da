"""A function that runs a whole epoch over a dataset whose last batch is smaller (d2l's
`train_epoch_ch3` over a real dataset: 60,000 examples in batches of 256). The profile
call outlines the loop's body after a few passes (slicer/outline.py), and the epoch's own
variant was built from the passes before that only: all full batches, so its loop took
values of that shape alone; the last batch broke the guard mid-call, every call, and the
function was profiled and built again until it gave up ("values computed during the call
keep changing type"): eager throughout. Every pass observes what its iteration starts
with now, so the loop takes any batch size; where a trace needs the batch size (a callee
reading `y.shape[0]`: slicer/shapes.py), the loop takes the largest batch and hands the
last one back to the host each call, without building again."""
import numpy as np
import pytest
import tensorflow as tf

from harness import check

RNG = np.random.default_rng(3)
FEATURES = tf.constant(RNG.normal(size=(18, 3)), tf.float32)
TARGETS = tf.constant(RNG.normal(size=(18, 1)), tf.float32)


# the host iterates the dataset and sends each batch (a loop the host decides)
ITERATING = frozenset({"AnonymousIteratorV3", "MakeIterator", "IteratorGetNext"})
# and where the last batch is handed back to it, it runs that batch eagerly (counted)
HANDED_BACK = ITERATING | {"ReadVariableOp", "MatMul", "Sub", "Pow", "Sum", "RealDiv", "Neg",
                           "Mul", "Shape", "BroadcastGradientArgs", "Reshape", "Tile",
                           "AssignSubVariableOp", "Identity"}


def _data():
    return tf.data.Dataset.from_tensor_slices((FEATURES, TARGETS)).batch(4)  # 4 of 4, 2


def per_example(y_hat, y):
    return tf.reduce_sum((y_hat - y) ** 2) / y.shape[0]  # the batch size, when traced


def summed(y_hat, y):
    return tf.reduce_sum((y_hat - y) ** 2)


W = tf.Variable(tf.ones((3, 1)))  # a module's variable (a closure's keeps the loop whole)
LOG = []


def epoch(data, loss):
    total = 0.0
    for X, y in data:
        with tf.GradientTape() as tape:
            l = loss(tf.matmul(X, W), y)
        W.assign_sub(0.01 * tape.gradient(l, W))
        total += float(l)
    LOG.append(total)
    return W.read_value()


def _epoch(loss, log):
    W.assign(tf.ones((3, 1)))
    LOG[:] = []
    return epoch, {"W": W}, [(_data(), loss)] * 6


@pytest.mark.timeout(300)
def test_an_epoch_whose_loss_reads_the_batch_size_hands_its_last_batch_back():
    # a profile call more: the loop's trace of any batch size failed, built again with
    # the largest batch (from the same profile calls and one more)
    under = check(lambda log: _epoch(per_example, log), None, graph_calls=2,
                  profile_calls=3, host_ops_allowed=HANDED_BACK)
    # two MatMuls a batch (forward, gradient): one batch of five per call ran eagerly
    assert under.host_ops["MatMul"] == 2 * 2, under.host_ops
    stats = under.target.stats()
    assert stats["variants"] == 1 and not stats["fallbacks"], stats
    # the last batch (2, 3) handed back by each sliced call, nothing built again
    assert list(stats["guard_failures"].values()) == [2], stats


@pytest.mark.timeout(300)
def test_an_epoch_with_a_smaller_last_batch_runs_every_batch_in_the_graph():
    under = check(lambda log: _epoch(summed, log), None, graph_calls=3, profile_calls=3,
                  host_ops_allowed=ITERATING)
    stats = under.target.stats()
    assert stats["variants"] == 1 and not stats["guard_failures"], stats


def _scaled_by_the_batch_size(log):
    w = tf.Variable(tf.ones((3, 1)))

    def epoch(data):
        total = 0.0
        for X, y in data:
            with tf.GradientTape() as tape:  # (a full batch's loss counts twice)
                l = tf.reduce_sum((tf.matmul(X, w) - y) ** 2) * (2.0 if X.shape[0] == 4 else 1.0)
            w.assign_sub(0.01 * tape.gradient(l, w))
            total += float(l)
        log.append(total)
        return w.read_value()
    return epoch, {"w": w}, [(_data(),)] * 6


@pytest.mark.timeout(300)
def test_a_step_reading_its_own_batch_size_is_not_traced_with_none():
    """A wrong result: the loop took any batch size (its profile calls saw 4 and 2), so
    `X.shape[0] == 4` was traced as `None == 4`, False, in every sliced call. The TF part
    checks the dimensions it reads of a loop's values when traced: the loop takes the
    largest batch, the last one handed back to the host."""
    under = check(_scaled_by_the_batch_size, None, graph_calls=2, profile_calls=3,
                  host_ops_allowed=HANDED_BACK)
    assert under.host_ops["MatMul"] == 2 * 2, under.host_ops  # one batch of five a call
