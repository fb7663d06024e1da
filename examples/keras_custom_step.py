"""A subclassed keras.Model trained by a custom step on a trainer object (the Keras
"writing a training loop from scratch" style): GradientTape around `self.model(x,
training=True)`, gradients for `self.model.trainable_variables`, `apply_gradients(zip(...))`
and Keras metrics (`Mean`, `SparseCategoricalAccuracy`) updated inside the step; the loop
prints the metrics and resets them every epoch.

    python examples/keras_custom_step.py [--steps N]
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
BATCH, FEATURES, HIDDEN, CLASSES = 32, 20, 32, 4
BATCHES_PER_EPOCH = 8


class MLP(keras.Model):
    def __init__(self, hidden, classes):
        super().__init__()
        self.dense1 = keras.layers.Dense(hidden, activation="relu")
        self.dropout = keras.layers.Dropout(0.1)
        self.dense2 = keras.layers.Dense(classes)

    def call(self, x, training=False):
        h = self.dense1(x)
        h = self.dropout(h, training=training)
        return self.dense2(h)


class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        self.loss_metric = keras.metrics.Mean(name="loss")
        self.acc_metric = keras.metrics.SparseCategoricalAccuracy(name="accuracy")

    def train_step(self, x, y):
        with tf.GradientTape() as tape:
            logits = self.model(x, training=True)
            loss = self.loss_fn(y, logits)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        self.loss_metric.update_state(loss)
        self.acc_metric.update_state(y, logits)
        return loss


def make_data(rng):
    x = rng.normal(size=(BATCH * BATCHES_PER_EPOCH, FEATURES)).astype(np.float32)
    teacher = rng.normal(size=(FEATURES, CLASSES)).astype(np.float32)
    y = np.argmax(x @ teacher + 0.5 * rng.normal(size=(len(x), CLASSES)), axis=1)
    return [(tf.constant(x[i:i + BATCH]), tf.constant(y[i:i + BATCH].astype(np.int32)))
            for i in range(0, len(x), BATCH)]


def main(steps: int = DEFAULT_STEPS) -> dict:
    keras.utils.set_random_seed(0)
    batches = make_data(np.random.RandomState(0))
    model = MLP(HIDDEN, CLASSES)
    model(batches[0][0])
    trainer = Trainer(model, keras.optimizers.Adam(learning_rate=1e-2))
    losses, epochs = [], []
    for step in range(steps):
        x, y = batches[step % len(batches)]
        losses.append(trainer.train_step(x, y))
        if (step + 1) % BATCHES_PER_EPOCH == 0:
            loss, acc = float(trainer.loss_metric.result()), float(trainer.acc_metric.result())
            print(f"epoch {(step + 1) // BATCHES_PER_EPOCH}: loss {loss:.4f} accuracy {acc:.4f}")
            epochs.append((loss, acc))
            trainer.loss_metric.reset_state()
            trainer.acc_metric.reset_state()
    return {"losses": [float(v) for v in losses],
            "weights": [v.numpy() for v in model.trainable_variables],
            "state": {"epochs": epochs, "iterations": int(trainer.optimizer.iterations.numpy()),
                      "optimizer": [v.numpy() for v in trainer.optimizer.variables]}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--dump", help="write the observables main() returns to this file")
    args = parser.parse_args()
    result = main(args.steps)
    if args.dump:
        with open(args.dump, "wb") as f:
            pickle.dump(result, f)
