"""A small transformer-style sequence classifier: keras.layers.MultiHeadAttention with a
residual LayerNormalization and a feed-forward block, then pooling and a classifier. Written
as the TF "quickstart for experts" scripts are: the model, loss, optimizer and metric are
module-level globals (made fresh by `main`), `train_step(x, y)` is a module-level function.
The task: is the first token's marker repeated later in the sequence.

    python examples/attention_seq.py [--steps N]
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
BATCH, SEQ, FEATURES, DIM, HEADS = 16, 8, 6, 16, 2

model = None
loss_object = None
optimizer = None
train_accuracy = None


class Encoder(keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.project = keras.layers.Dense(DIM)
        self.attention = keras.layers.MultiHeadAttention(num_heads=HEADS, key_dim=DIM // HEADS)
        self.norm1 = keras.layers.LayerNormalization()
        self.ffn = keras.Sequential([keras.layers.Dense(2 * DIM, activation="relu"),
                                     keras.layers.Dense(DIM)])
        self.norm2 = keras.layers.LayerNormalization()

    def call(self, x):
        h = self.project(x)
        h = self.norm1(h + self.attention(h, h))
        return self.norm2(h + self.ffn(h))


def build_model():
    inputs = keras.Input((SEQ, FEATURES))
    h = Encoder()(inputs)
    h = keras.layers.GlobalAveragePooling1D()(h)
    return keras.Model(inputs, keras.layers.Dense(2)(h))


def train_step(x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = loss_object(y, logits)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    train_accuracy.update_state(y, logits)
    return loss


def make_data(rng, count):
    x = rng.normal(size=(count, SEQ, FEATURES)).astype(np.float32)
    y = rng.randint(2, size=count).astype(np.int32)
    marker = rng.randint(1, SEQ, size=count)
    x[:, 0, 0] = 3.0
    x[np.arange(count), marker, 0] = np.where(y == 1, 3.0, -3.0)
    return [(tf.constant(x[i:i + BATCH]), tf.constant(y[i:i + BATCH]))
            for i in range(0, count, BATCH)]


def main(steps: int = DEFAULT_STEPS) -> dict:
    global model, loss_object, optimizer, train_accuracy
    keras.utils.set_random_seed(0)
    data = make_data(np.random.RandomState(0), BATCH * 10)
    model = build_model()
    loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = keras.optimizers.Adam(3e-3)
    train_accuracy = keras.metrics.SparseCategoricalAccuracy()
    losses, accuracies = [], []
    for step in range(steps):
        x, y = data[step % len(data)]
        losses.append(train_step(x, y))
        if (step + 1) % len(data) == 0:
            accuracies.append(float(train_accuracy.result()))
            print(f"epoch {(step + 1) // len(data)}: loss {float(losses[-1]):.4f} "
                  f"accuracy {accuracies[-1]:.4f}")
            train_accuracy.reset_state()
    return {"losses": [float(v) for v in losses],
            "weights": [v.numpy() for v in model.trainable_variables],
            "state": {"accuracies": accuracies}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--dump", help="write the observables main() returns to this file")
    args = parser.parse_args()
    result = main(args.steps)
    if args.dump:
        with open(args.dump, "wb") as f:
            pickle.dump(result, f)
