"""A keras.Sequential regression model whose step does host work inside the tape: it reads
the learning rate from a Python schedule method, appends it to a list and prints every few
steps, all inside `with tf.GradientTape()`, then applies plain SGD by `assign_sub` and
counts steps in a Python attribute.

    python examples/sequential_host_in_tape.py [--steps N]
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
BATCH, FEATURES, HIDDEN = 32, 16, 32
PRINT_EVERY = 10


class Trainer:
    def __init__(self, model, base_lr=0.05, decay_every=20):
        self.model = model
        self.base_lr = base_lr
        self.decay_every = decay_every
        self.step = 0
        self.lr_history = []

    def lr_schedule(self, step):
        return self.base_lr * 0.5 ** (step // self.decay_every)

    def train_step(self, x, y):
        with tf.GradientTape() as tape:
            lr = self.lr_schedule(self.step)
            self.lr_history.append(lr)
            pred = self.model(x, training=True)
            loss = tf.reduce_mean(tf.square(pred - y))
            if self.step % PRINT_EVERY == 0:
                print(f"step {self.step}: lr {lr:.4f}")
        grads = tape.gradient(loss, self.model.trainable_variables)
        for g, v in zip(grads, self.model.trainable_variables):
            v.assign_sub(lr * g)
        self.step += 1
        return loss


def make_data(rng, batches=6):
    a = rng.normal(size=(FEATURES, 1)).astype(np.float32)
    out = []
    for _ in range(batches):
        x = rng.normal(size=(BATCH, FEATURES)).astype(np.float32)
        y = np.tanh(x @ a) + 0.1 * rng.normal(size=(BATCH, 1)).astype(np.float32)
        out.append((tf.constant(x), tf.constant(y.astype(np.float32))))
    return out


def main(steps: int = DEFAULT_STEPS) -> dict:
    keras.utils.set_random_seed(0)
    data = make_data(np.random.RandomState(0))
    model = keras.Sequential([keras.Input((FEATURES,)),
                              keras.layers.Dense(HIDDEN, activation="relu"),
                              keras.layers.Dense(HIDDEN, activation="relu"),
                              keras.layers.Dense(1)])
    trainer = Trainer(model)
    losses = []
    for i in range(steps):
        x, y = data[i % len(data)]
        loss = trainer.train_step(x, y)
        losses.append(loss)
        if (i + 1) % PRINT_EVERY == 0:
            print(f"  loss {float(loss):.5f}")
    return {"losses": [float(v) for v in losses],
            "weights": [v.numpy() for v in model.trainable_variables],
            "state": {"step": trainer.step, "lr_history": trainer.lr_history}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--dump", help="write the observables main() returns to this file")
    args = parser.parse_args()
    result = main(args.steps)
    if args.dump:
        with open(args.dump, "wb") as f:
            pickle.dump(result, f)
