"""A training loop fed by tf.data: `from_tensor_slices((x, y)).shuffle(...).batch(32)` over
100 examples, so each epoch ends with a batch of 4. A keras.Sequential classifier, Adam,
a Mean metric; the step is a module-level function taking the model and optimizer.

    python examples/tfdata_last_batch.py [--steps N]      # N batches
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
EXAMPLES, BATCH, FEATURES, CLASSES = 100, 32, 12, 3


def train_step(model, optimizer, loss_metric, x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    loss_metric.update_state(loss, sample_weight=tf.shape(x)[0])
    return loss


def main(steps: int = DEFAULT_STEPS) -> dict:
    keras.utils.set_random_seed(0)
    rng = np.random.RandomState(0)
    x = rng.normal(size=(EXAMPLES, FEATURES)).astype(np.float32)
    y = np.argmax(x[:, :CLASSES] + 0.3 * rng.normal(size=(EXAMPLES, CLASSES)), axis=1)
    dataset = tf.data.Dataset.from_tensor_slices((x, y.astype(np.int64)))
    dataset = dataset.shuffle(EXAMPLES, seed=0).batch(BATCH)
    model = keras.Sequential([keras.Input((FEATURES,)),
                              keras.layers.Dense(24, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    optimizer = keras.optimizers.Adam(1e-2)
    loss_metric = keras.metrics.Mean()
    losses, epoch_losses, batch_sizes, done = [], [], [], 0
    epoch = 0
    while done < steps:
        epoch += 1
        for xb, yb in dataset:
            if done == steps:
                break
            losses.append(train_step(model, optimizer, loss_metric, xb, yb))
            batch_sizes.append(int(xb.shape[0]))
            done += 1
        epoch_losses.append(float(loss_metric.result()))
        print(f"epoch {epoch}: loss {epoch_losses[-1]:.4f}")
        loss_metric.reset_state()
    return {"losses": [float(v) for v in losses],
            "weights": [v.numpy() for v in model.trainable_variables],
            "state": {"epoch_losses": epoch_losses, "batch_sizes": batch_sizes}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--dump", help="write the observables main() returns to this file")
    args = parser.parse_args()
    result = main(args.steps)
    if args.dump:
        with open(args.dump, "wb") as f:
            pickle.dump(result, f)
