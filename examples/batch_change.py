"""Benchmark: a training program that changes its batch size once, against one that never
does (issue 5). Both run the same number of steps of the same MLP under gpe; the changed
one pays for a guard failure, 3 profile calls and building a second variant.

    python examples/batch_change.py [STEPS] [REPEATS]

Each program runs in a fresh process (as a user's program would); prints the median total
seconds of each (and eager's, for scale), the ratio, and checks both end in eager's state.
"""
from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import gpe  # noqa: E402

FEATURES, HIDDEN, CLASSES = 32, 128, 10


def make_step():
    rng = np.random.default_rng(0)
    w1 = tf.Variable(rng.normal(size=(FEATURES, HIDDEN)).astype(np.float32) * 0.1)
    w2 = tf.Variable(rng.normal(size=(HIDDEN, HIDDEN)).astype(np.float32) * 0.1)
    w3 = tf.Variable(rng.normal(size=(HIDDEN, CLASSES)).astype(np.float32) * 0.1)
    params = [w1, w2, w3]
    losses = []

    def train_step(x, y):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(x, w1))
            h = tf.nn.relu(tf.matmul(h, w2))
            logits = tf.matmul(h, w3)
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        grads = tape.gradient(loss, params)
        for p, g in zip(params, grads):
            p.assign_sub(0.05 * g)
        losses.append(loss)
        return loss
    return train_step, params, losses


def batches(steps: int, change_at: int | None):
    rng = np.random.default_rng(1)
    out = []
    for i in range(steps):
        n = 64 if change_at is None or i < change_at else 48
        out.append((tf.constant(rng.normal(size=(n, FEATURES)).astype(np.float32)),
                    tf.constant(rng.integers(0, CLASSES, size=n).astype(np.int32))))
    return out


def run(steps: int, change_at: int | None, sliced: bool) -> tuple[float, np.ndarray]:
    """Total seconds of the training loop (first call to last result), and the final
    state (last loss and the weights' sums)."""
    step, params, losses = make_step()
    target = gpe.function(step) if sliced else step
    data = batches(steps, change_at)
    start = time.perf_counter()
    for x, y in data:
        target(x, y)
    final = float(losses[-1])  # waits for the graph
    return time.perf_counter() - start, np.array([final] + [p.numpy().sum() for p in params])


def one_program(args) -> int:
    """Child process: run one program once, print its seconds and final state."""
    kind, steps = args[0], int(args[1])
    change_at = steps // 2 if kind.endswith("changed") else None
    seconds, state = run(steps, change_at, sliced=not kind.startswith("eager"))
    print(seconds, " ".join(repr(float(v)) for v in state))
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--program"]:
        return one_program(sys.argv[2:])
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    import subprocess
    times, states = {}, {}
    for kind in ("same", "changed", "eager same", "eager changed"):
        for i in range(repeats if not kind.startswith("eager") else 1):
            out = subprocess.run([sys.executable, __file__, "--program", kind.replace(" ", "-"),
                                  str(steps)], capture_output=True, text=True, check=True)
            seconds, *state = out.stdout.split()
            times.setdefault(kind, []).append(float(seconds))
            states[kind] = state
    assert states["changed"] == states["eager changed"], "gpe's final state differs from eager"
    assert states["same"] == states["eager same"], "gpe's final state differs from eager"
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{steps} steps, each program in a fresh process, median of {repeats}: batch 64 "
          f"throughout {med['same']:.3f} s; 64 then 48 from step {steps // 2} "
          f"{med['changed']:.3f} s (eager: {med['eager same']:.3f} s, "
          f"{med['eager changed']:.3f} s)")
    print(f"changed / unchanged under gpe: {med['changed'] / med['same']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
