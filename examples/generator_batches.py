"""Batches come from a Python generator of NumPy arrays (as from a hand-written loader);
some batches are corrupt (a NaN feature). The step computes the loss, checks it on the host
and raises ValueError before applying the update when it is not finite; the training loop
catches the error, logs the batch as skipped and goes on. Batches are passed to the step as
NumPy arrays.

    python examples/generator_batches.py [--steps N]
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
BATCH, FEATURES = 32, 8
BAD_EVERY = 7


def batches(rng, count):
    a = rng.normal(size=(FEATURES, 1)).astype(np.float32)
    for i in range(count):
        x = rng.normal(size=(BATCH, FEATURES)).astype(np.float32)
        y = (x @ a > 0).astype(np.float32)
        if i % BAD_EVERY == BAD_EVERY - 1:
            x[rng.randint(BATCH), rng.randint(FEATURES)] = np.nan
        yield x, y


class Trainer:
    def __init__(self):
        self.model = keras.Sequential([keras.Input((FEATURES,)),
                                       keras.layers.Dense(16, activation="relu"),
                                       keras.layers.Dense(1)])
        self.optimizer = keras.optimizers.SGD(0.1)
        self.bce = keras.losses.BinaryCrossentropy(from_logits=True)

    def train_step(self, x, y):
        with tf.GradientTape() as tape:
            loss = self.bce(y, self.model(x, training=True))
        if not np.isfinite(loss.numpy()):
            raise ValueError(f"non-finite loss {float(loss)}")
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss


def main(steps: int = DEFAULT_STEPS) -> dict:
    keras.utils.set_random_seed(0)
    trainer = Trainer()
    losses, skipped = [], []
    for i, (x, y) in enumerate(batches(np.random.RandomState(0), steps)):
        try:
            losses.append(trainer.train_step(x, y))
        except ValueError as err:
            skipped.append((i, str(err)))
            print(f"batch {i} skipped: {err}")
        if (i + 1) % 20 == 0:
            print(f"batch {i + 1}: loss {float(losses[-1]):.4f}")
    return {"losses": [float(v) for v in losses],
            "weights": [v.numpy() for v in trainer.model.trainable_variables],
            "state": {"skipped": skipped,
                      "iterations": int(trainer.optimizer.iterations.numpy())}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--dump", help="write the observables main() returns to this file")
    args = parser.parse_args()
    result = main(args.steps)
    if args.dump:
        with open(args.dump, "wb") as f:
            pickle.dump(result, f)
