"""A step that leaves TensorFlow in the middle: it reads the per-example losses with
`.numpy()`, weights the hardest examples with NumPy (a rank-based focus), feeds the
weights back into the loss under the tape, and after the gradient computes a global norm
with NumPy to clip the update (a hand-written clip, as users port from other code).

    python examples/numpy_mid_step.py [--steps N]
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
BATCH, FEATURES, CLASSES = 32, 12, 3
CLIP = 1.0
LR = 0.1

model = None
clip_log = []


def train_step(x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        ranks = np.argsort(np.argsort(per_example.numpy()))
        focus = 0.5 + ranks / (len(ranks) - 1)
        focus = focus / focus.sum()
        loss = tf.reduce_sum(per_example * tf.constant(focus, tf.float32))
    grads = tape.gradient(loss, model.trainable_variables)
    norm = np.sqrt(sum(np.sum(np.square(g.numpy())) for g in grads))
    scale = min(1.0, CLIP / (norm + 1e-6))
    clip_log.append(scale < 1.0)
    for v, g in zip(model.trainable_variables, grads):
        v.assign_sub(LR * scale * g)
    return loss


def main(steps: int = DEFAULT_STEPS) -> dict:
    global model, clip_log
    keras.utils.set_random_seed(0)
    rng = np.random.RandomState(0)
    x = rng.normal(size=(BATCH * 6, FEATURES)).astype(np.float32)
    y = np.argmax(x[:, :CLASSES] * 2 + rng.normal(size=(len(x), CLASSES)), axis=1).astype(np.int32)
    data = [(tf.constant(x[i:i + BATCH]), tf.constant(y[i:i + BATCH]))
            for i in range(0, len(x), BATCH)]
    model = keras.Sequential([keras.Input((FEATURES,)),
                              keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    clip_log = []
    losses = []
    for step in range(steps):
        losses.append(train_step(*data[step % len(data)]))
        if (step + 1) % 15 == 0:
            print(f"step {step + 1}: loss {float(losses[-1]):.4f}, "
                  f"clipped {sum(clip_log[-15:])} of the last 15 steps")
    return {"losses": [float(v) for v in losses],
            "weights": [v.numpy() for v in model.trainable_variables],
            "state": {"clipped": [bool(c) for c in clip_log]}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--dump", help="write the observables main() returns to this file")
    args = parser.parse_args()
    result = main(args.steps)
    if args.dump:
        with open(args.dump, "wb") as f:
            pickle.dump(result, f)
