"""Findings from public programs run under gpe as written (the corpus, outside the
repository): each a program in their shape, compared with eager."""
import numpy as np
import pytest
import tensorflow as tf

import gpe

EPS = np.finfo(np.float32).eps.item()


def get_expected_return(rewards, gamma, standardize=True):
    """TF's actor-critic tutorial (tensorflow/docs, reinforcement_learning/actor_critic)."""
    n = tf.shape(rewards)[0]
    returns = tf.TensorArray(dtype=tf.float32, size=n)
    rewards = tf.cast(rewards[::-1], dtype=tf.float32)
    discounted_sum = tf.constant(0.0)
    discounted_sum_shape = discounted_sum.shape
    for i in tf.range(n):
        reward = rewards[i]
        discounted_sum = reward + gamma * discounted_sum
        discounted_sum.set_shape(discounted_sum_shape)
        returns = returns.write(i, discounted_sum)
    returns = returns.stack()[::-1]
    if standardize:
        returns = ((returns - tf.math.reduce_mean(returns)) /
                   (tf.math.reduce_std(returns) + EPS))
    return returns


@pytest.mark.timeout(300)
def test_a_method_call_statement_moved_whole_keeps_its_line():
    """`discounted_sum.set_shape(shape)` in a loop: the statement's whole expression moved
    into a temporary, which had no line (the slicer failed: "'Assign' object has no
    attribute 'lineno'", so the function was never sliced, for no reason a user could
    act on). Now it is sliced as far as it can be, and says what stays on the host."""
    sliced = gpe.function(get_expected_return, adaptive=False)
    for k in range(6):
        rewards = tf.constant(np.arange(5 + k % 2, dtype=np.int32))
        expected = get_expected_return(rewards, 0.99).numpy()
        assert np.array_equal(expected, sliced(rewards, 0.99).numpy())
    reasons = list(sliced.stats()["fallbacks"])
    assert reasons and not any("slicer-error" in r for r in reasons), reasons
    assert any("`discounted_sum_shape`" in r for r in reasons), reasons
