"""A step that reads its learning rate and dropout rate from a hyper-parameter object that
the training loop changes as it goes (decay every few steps, dropout annealed, a warm-up
phase), as users write schedules by hand. The model is plain tf.Variables in a small class;
dropout masks come from a tf.random.Generator so every mode draws the same numbers.

    python examples/lr_schedule_object.py [--steps N]
"""
from __future__ import annotations

import argparse
import os
import pickle

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

DEFAULT_STEPS = 60
BATCH, FEATURES, HIDDEN = 32, 10, 32


class HyperParams:
    def __init__(self):
        self.learning_rate = 0.01
        self.dropout_rate = 0.3
        self.momentum = 0.9


class Model:
    def __init__(self, rng):
        self.w1 = tf.Variable(rng.normal(scale=0.3, size=(FEATURES, HIDDEN)).astype(np.float32))
        self.b1 = tf.Variable(tf.zeros([HIDDEN]))
        self.w2 = tf.Variable(rng.normal(scale=0.3, size=(HIDDEN, 1)).astype(np.float32))
        self.b2 = tf.Variable(tf.zeros([1]))
        self.variables = [self.w1, self.b1, self.w2, self.b2]
        self.velocity = [tf.Variable(tf.zeros_like(v)) for v in self.variables]
        self.noise = tf.random.Generator.from_seed(3)

    def __call__(self, x, dropout_rate):
        h = tf.nn.relu(tf.matmul(x, self.w1) + self.b1)
        if dropout_rate > 0:
            keep = tf.cast(self.noise.uniform(tf.shape(h)) >= dropout_rate, tf.float32)
            h = h * keep / (1.0 - dropout_rate)
        return tf.matmul(h, self.w2) + self.b2


def train_step(model, hp, x, y):
    with tf.GradientTape() as tape:
        pred = model(x, hp.dropout_rate)
        loss = tf.reduce_mean(tf.square(pred - y))
    grads = tape.gradient(loss, model.variables)
    for v, g, m in zip(model.variables, grads, model.velocity):
        m.assign(hp.momentum * m + g)
        v.assign_sub(hp.learning_rate * m)
    return loss


def main(steps: int = DEFAULT_STEPS) -> dict:
    keras.utils.set_random_seed(0)
    rng = np.random.RandomState(0)
    a = rng.normal(size=(FEATURES, 1)).astype(np.float32)
    xs = [rng.normal(size=(BATCH, FEATURES)).astype(np.float32) for _ in range(8)]
    data = [(tf.constant(x), tf.constant(np.sin(x @ a))) for x in xs]
    model, hp = Model(rng), HyperParams()
    losses, schedule = [], []
    for step in range(steps):
        if step < 10:  # warm-up: the learning rate grows linearly
            hp.learning_rate = 0.01 * (step + 1)
        elif step % 10 == 0:
            hp.learning_rate *= 0.7
            hp.dropout_rate = max(0.0, hp.dropout_rate - 0.1)
            print(f"step {step}: learning rate {hp.learning_rate:.4f}, "
                  f"dropout {hp.dropout_rate:.1f}, loss {float(losses[-1]):.4f}")
        schedule.append((hp.learning_rate, hp.dropout_rate))
        losses.append(train_step(model, hp, *data[step % len(data)]))
    return {"losses": [float(v) for v in losses],
            "weights": [v.numpy() for v in model.variables],
            "state": {"schedule": schedule, "velocity": [m.numpy() for m in model.velocity]}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--dump", help="write the observables main() returns to this file")
    args = parser.parse_args()
    result = main(args.steps)
    if args.dump:
        with open(args.dump, "wb") as f:
            pickle.dump(result, f)
