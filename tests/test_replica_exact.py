"""A per-replica step under MirroredStrategy keeps eager's arithmetic (the TF guide's
distributed custom training loop: `strategy.run(train_step, ...)` with a Conv2D model).

MirroredStrategy builds each replica's ops on a thread of its own, also while gpe traces
the step's TF part there: the tracing thread's exact arithmetic (tfprog/exact.py: the
Conv2D bias gradient kept apart from oneDNN's merge, AddN as ordered adds) did not reach
those threads, and the steps' losses and weights drifted from eager's by an ulp from the
first steps (the tutorial's epoch losses differed in the 6th digit). In a subprocess:
the strategy is made before anything else of TensorFlow runs."""
import json
import os
import subprocess
import sys

import background

CHILD = r"""
import json, sys
import numpy as np
import tensorflow as tf
import keras
import gpe

strategy = tf.distribute.MirroredStrategy(["/cpu:0"])

def run(sliced):
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras.Sequential([
            keras.Input((12, 12, 1)), keras.layers.Conv2D(8, 3, activation="relu"),
            keras.layers.MaxPooling2D(), keras.layers.Flatten(),
            keras.layers.Dense(16, activation="relu"), keras.layers.Dense(10)])
        loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                 reduction=None)
        opt = keras.optimizers.Adam(0.01)

    def train_step(inputs):
        images, labels = inputs
        with tf.GradientTape() as tape:
            predictions = model(images, training=True)
            loss = tf.nn.compute_average_loss(loss_object(labels, predictions))
        gradients = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    step = gpe.function(train_step, profile_calls=1, adaptive=False) if sliced else train_step
    rng = np.random.RandomState(0)
    losses = []
    for _ in range(16):
        x = tf.constant(rng.rand(32, 12, 12, 1).astype("float32"))
        y = tf.constant(rng.randint(0, 10, 32).astype("uint8"))
        per_replica = strategy.run(step, args=((x, y),))
        losses.append(float(strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, None)))
    out = {"losses": losses, "weights": [w.numpy().tolist() for w in model.weights]}
    if sliced:
        out["graph_calls"] = step.stats()["graph_calls"]
    return out

print(json.dumps({"eager": run(False), "gpe": run(True)}))
"""


def _child():
    """CHILD run from a file (gpe slices from the source), in a folder of its own (in the
    background: tests/background.py)."""
    with background.folder() as folder:
        script = os.path.join(folder, "replica_conv.py")
        with open(script, "w") as f:
            f.write(CHILD)
        return subprocess.run([sys.executable, script], capture_output=True, text=True,
                              timeout=600, env=background.env(GPE_PAYOFF="0"), cwd=folder)


def background_jobs():
    return {"test_a_replica_step_with_a_conv_layer_matches_eager_exactly": _child}


def test_a_replica_step_with_a_conv_layer_matches_eager_exactly():
    done = background.result(
        f"{__name__}.test_a_replica_step_with_a_conv_layer_matches_eager_exactly", _child)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["gpe"]["losses"] == out["eager"]["losses"]
    assert out["gpe"]["weights"] == out["eager"]["weights"]
    assert out["gpe"]["graph_calls"] == 15, done.stderr[-3000:]
