"""A LeNet-style CNN (Conv2D, MaxPooling2D, Conv2D, MaxPooling2D, Flatten, Dense, Dense)
on small synthetic 16x16 images, written as the TF "quickstart for experts": a subclassed
keras.Model, module-level `loss_object`, `optimizer`, metrics, and module-level
`train_step(images, labels)` and `test_step(images, labels)`; the loop trains an epoch,
evaluates, prints and resets the metrics.

    python examples/lenet_cnn.py [--steps N]      # N training batches
"""
from __future__ import annotations

import argparse
import os
import pickle

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

DEFAULT_STEPS = 40
BATCH, SIZE, CLASSES = 16, 16, 4
TRAIN_BATCHES, TEST_BATCHES = 8, 2

model = loss_object = optimizer = None
train_loss = train_accuracy = test_loss = test_accuracy = None


class LeNet(keras.Model):
    def __init__(self):
        super().__init__()
        self.conv1 = keras.layers.Conv2D(6, 3, activation="relu")
        self.pool1 = keras.layers.MaxPooling2D()
        self.conv2 = keras.layers.Conv2D(12, 3, activation="relu")
        self.pool2 = keras.layers.MaxPooling2D()
        self.flatten = keras.layers.Flatten()
        self.d1 = keras.layers.Dense(32, activation="relu")
        self.d2 = keras.layers.Dense(CLASSES)

    def call(self, x):
        x = self.pool1(self.conv1(x))
        x = self.pool2(self.conv2(x))
        return self.d2(self.d1(self.flatten(x)))


def train_step(images, labels):
    with tf.GradientTape() as tape:
        predictions = model(images, training=True)
        loss = loss_object(labels, predictions)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    train_loss(loss)
    train_accuracy(labels, predictions)
    return loss


def test_step(images, labels):
    predictions = model(images, training=False)
    t_loss = loss_object(labels, predictions)
    test_loss(t_loss)
    test_accuracy(labels, predictions)


def make_images(rng, count):
    """Class k: a bright bar in one of four orientations/positions, plus noise."""
    labels = rng.randint(CLASSES, size=count)
    images = 0.3 * rng.normal(size=(count, SIZE, SIZE, 1)).astype(np.float32)
    for i, k in enumerate(labels):
        offset = rng.randint(4, SIZE - 4)
        if k == 0:
            images[i, offset, :, 0] += 1.0
        elif k == 1:
            images[i, :, offset, 0] += 1.0
        elif k == 2:
            images[i, np.arange(SIZE), np.arange(SIZE), 0] += 1.0
        else:
            images[i, np.arange(SIZE), SIZE - 1 - np.arange(SIZE), 0] += 1.0
    return [(tf.constant(images[j:j + BATCH]), tf.constant(labels[j:j + BATCH].astype(np.int32)))
            for j in range(0, count, BATCH)]


def main(steps: int = DEFAULT_STEPS) -> dict:
    global model, loss_object, optimizer
    global train_loss, train_accuracy, test_loss, test_accuracy
    keras.utils.set_random_seed(0)
    rng = np.random.RandomState(0)
    train_ds = make_images(rng, BATCH * TRAIN_BATCHES)
    test_ds = make_images(rng, BATCH * TEST_BATCHES)
    model = LeNet()
    loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = keras.optimizers.Adam(2e-3)
    train_loss = keras.metrics.Mean(name="train_loss")
    train_accuracy = keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")
    test_loss = keras.metrics.Mean(name="test_loss")
    test_accuracy = keras.metrics.SparseCategoricalAccuracy(name="test_accuracy")
    losses, history = [], []
    for step in range(steps):
        images, labels = train_ds[step % TRAIN_BATCHES]
        losses.append(train_step(images, labels))
        if (step + 1) % TRAIN_BATCHES == 0:
            for test_images, test_labels in test_ds:
                test_step(test_images, test_labels)
            row = (float(train_loss.result()), float(train_accuracy.result()),
                   float(test_loss.result()), float(test_accuracy.result()))
            history.append(row)
            print(f"Epoch {(step + 1) // TRAIN_BATCHES}, Loss: {row[0]:.4f}, "
                  f"Accuracy: {row[1] * 100:.2f}, Test Loss: {row[2]:.4f}, "
                  f"Test Accuracy: {row[3] * 100:.2f}")
            for metric in (train_loss, train_accuracy, test_loss, test_accuracy):
                metric.reset_state()
    return {"losses": [float(v) for v in losses],
            "weights": [v.numpy() for v in model.trainable_variables],
            "state": {"history": history}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--dump", help="write the observables main() returns to this file")
    args = parser.parse_args()
    result = main(args.steps)
    if args.dump:
        with open(args.dump, "wb") as f:
            pickle.dump(result, f)
