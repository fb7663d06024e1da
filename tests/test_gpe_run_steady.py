"""Steady-state calls of training steps under `gpe run` (issue 12): what kept them eager
when `gpe run` wraps every function of the script (payoff, adaptive timing, wrapped
callees), each with a test that runs the program eagerly and under gpe and compares."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from gpe.run import auto
from harness import check

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
