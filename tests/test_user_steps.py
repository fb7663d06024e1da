"""Training steps written the way users write them, which ran correctly but eagerly on
every call: each program runs eagerly and under gpe, compared on everything observable
(results, final variables, side effects, printed output; tests/harness.py), and its
calls after the profile call(s) must run sliced.

- a Keras subclassed model's own step calling Keras's `self.compute_loss(...)` (the
  "Customizing what happens in fit" guide), then `self.optimizer.apply_gradients`;
- a plain `Trainer` whose step gets the model's output from another method of its own
  (`logits = self.forward(x)`), its model built by the first step;
- a loop over a list argument that is empty on every call (`for e in extra:`).
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from harness import check, differential

pytestmark = pytest.mark.timeout(180)

RNG = np.random.default_rng(0)
X = tf.constant(RNG.normal(size=(8, 4)).astype(np.float32))
Y = tf.constant(RNG.normal(size=(8, 1)).astype(np.float32))
LABELS = tf.constant(RNG.integers(0, 3, size=8))


class Net(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(8, activation="relu")
        self.out = keras.layers.Dense(3)

    def call(self, inputs, training=False):
        h = self.hidden(inputs)
        if training:
            h = h * 0.5
        return self.out(h)


class Trainer:
    """A plain class holding a model; the forward pass is a method of its own."""

    def __init__(self, model):
        self.model = model
        self.opt = keras.optimizers.Adam(0.01)
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def forward(self, x):
        return self.model(x, training=True)

    def step(self, x, y):
        with tf.GradientTape() as tape:
            logits = self.forward(x)
            loss = self.loss_fn(y, logits)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss


def test_trainer_forward_method_with_a_model_built_by_the_first_step():
    """The model is built by the first step (as most trainers leave it): the forward
    method was judged host work while the model was unbuilt, and that judgement was kept
    after the model was built (every call ran eagerly: "`logits`: a tensor made by host
    code inside a `with` block")."""
    def make(log):
        keras.utils.set_random_seed(3)
        trainer = Trainer(Net())  # not called yet
        calls = [(X, LABELS)] * 6
        return trainer.step, {}, calls

    under = check(make, None, graph_calls=4)
    assert under.target.stats()["eager_calls"] == 2  # the unbuilt call, then the profile call
    assert under.target.stats()["fallbacks"] == {}


def test_trainer_forward_method_with_a_built_model():
    def make(log):
        keras.utils.set_random_seed(4)
        model = Net()
        model(X)
        trainer = Trainer(model)
        variables = {f"w{i}": v for i, v in enumerate(model.weights)}
        return trainer.step, variables, [(X, LABELS)] * 5

    check(make, None)
