"""A user's subclass of a Keras optimizer that only constructs it (`class
AdamOptWrapper(optimizers.Adam)` passing its own defaults to `__init__`, as a WGAN-GP
repository does) behaves as Keras's class: its `apply_gradients` runs in the graph. It was
host work (the class is not Keras's own), so the step's update ran eagerly and, the object
holding it changed by host code, every number read from that object was sent mid-call,
which put the step's random op behind a gate (refused: "tf.random.normal runs inside a
tf.cond branch"). A subclass that defines a method Keras runs stays on the host."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from harness import check

RNG = np.random.default_rng(5)
X = tf.constant(RNG.normal(size=(8, 4)).astype(np.float32))
Y = tf.constant(RNG.normal(size=(8, 1)).astype(np.float32))


class AdamOptWrapper(keras.optimizers.Adam):
    def __init__(self, learning_rate=1e-3, beta_1=0.0, beta_2=0.9, epsilon=1e-4, **kwargs):
        super().__init__(learning_rate, beta_1, beta_2, epsilon, **kwargs)


class NoisyAdam(keras.optimizers.Adam):
    def apply_gradients(self, grads_and_vars):
        print("applying")
        return super().apply_gradients(grads_and_vars)


class Trainer:
    def __init__(self, optimizer):
        keras.utils.set_random_seed(2)
        self.batch_size, self.noise_dim = 8, 4
        self.model = keras.Sequential([keras.layers.Dense(8), keras.layers.Dense(1)])
        self.model(X)
        self.opt = optimizer

    def step(self, y):
        z = tf.random.normal((self.batch_size, self.noise_dim))
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((self.model(X + 0.1 * z) - y) ** 2)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss


def _trainer(optimizer_class):
    def make(log):
        tf.random.set_seed(7)
        trainer = Trainer(optimizer_class())
        variables = {f"w{i}": v for i, v in enumerate(trainer.model.weights)}
        return trainer.step, variables, [(Y,)] * 6
    return make


@pytest.mark.timeout(300)
def test_a_subclass_that_only_constructs_a_keras_optimizer_runs_in_the_graph():
    check(_trainer(AdamOptWrapper), None)  # every call after the profile call sliced


@pytest.mark.timeout(300)
def test_a_subclass_overriding_apply_gradients_stays_on_the_host():
    under = check(_trainer(NoisyAdam), None, graph_calls=None, host_ops_allowed=frozenset(
        {"ReadVariableOp", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp",
         "Mul", "Sub", "AddV2", "Pow", "Sqrt", "RealDiv", "Cast", "Square", "Identity",
         "NoOp", "StatelessRandomUniformV2"}))
    assert under.stdout.count("applying") == 6
