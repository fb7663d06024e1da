"""Train a small MLP on synthetic data eagerly, with tf.function, and with gpe; compare.

    python examples/train_mlp.py [--steps 300] [--modes eager,tf.function,gpe]

The training step is ordinary eager TF2 code with host Python in it (it appends each loss
to a Python list). gpe runs it sliced and gives the same losses, the same final weights and
the same list as eager; tf.function runs it fast but traces the append once, so its list
ends up holding a single symbolic tensor. Prints the loss as it trains and the median time
per step of each mode.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gpe  # noqa: E402

BATCH, FEATURES, HIDDEN = 32, 16, 64
LR = 0.05


def make_data(seed: int = 0, batches: int = 8):
    """Synthetic regression data: y = sin(x @ a) + noise, made with NumPy."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(FEATURES, 1)).astype(np.float32)
    xs = [rng.normal(size=(BATCH, FEATURES)).astype(np.float32) for _ in range(batches)]
    ys = [np.sin(x @ a) + 0.05 * rng.normal(size=(BATCH, 1)).astype(np.float32) for x in xs]
    return [(tf.constant(x), tf.constant(y)) for x, y in zip(xs, ys)]


def make_model(seed: int = 1):
    rng = np.random.default_rng(seed)

    def weight(*shape):
        return tf.Variable(rng.normal(scale=1 / np.sqrt(shape[0]), size=shape).astype(np.float32))
    return {"w1": weight(FEATURES, HIDDEN), "b1": tf.Variable(tf.zeros([HIDDEN])),
            "w2": weight(HIDDEN, HIDDEN), "b2": tf.Variable(tf.zeros([HIDDEN])),
            "w3": weight(HIDDEN, 1), "b3": tf.Variable(tf.zeros([1]))}


def make_step(m, history):
    w1, b1, w2, b2, w3, b3 = m["w1"], m["b1"], m["w2"], m["b2"], m["w3"], m["b3"]

    def train_step(x, y):
        with tf.GradientTape() as tape:
            h1 = tf.nn.relu(tf.matmul(x, w1) + b1)
            h2 = tf.nn.relu(tf.matmul(h1, w2) + b2)
            pred = tf.matmul(h2, w3) + b3
            loss = tf.reduce_mean(tf.square(pred - y))
        g = tape.gradient(loss, [w1, b1, w2, b2, w3, b3])
        w1.assign_sub(LR * g[0])
        b1.assign_sub(LR * g[1])
        w2.assign_sub(LR * g[2])
        b2.assign_sub(LR * g[3])
        w3.assign_sub(LR * g[4])
        b3.assign_sub(LR * g[5])
        history.append(loss)
        return loss
    return train_step


WARMUP = 40  # steps not timed: tracing, profiling, first graph runs, gpe's eager comparison


def train(mode: str, steps: int, data, report_every: int, quiet: bool = False,
          measure=contextlib.nullcontext):
    """Train from fresh weights. Returns losses, weights, history, seconds per step, step fn.

    Time per step is wall time from step WARMUP to the end, including the wait for work
    still in flight (gpe returns before the graph has finished), divided by the steps.
    """
    model, history = make_model(), []
    step = make_step(model, history)
    if mode == "gpe":
        step = gpe.function(step)
    elif mode == "tf.function":
        step = tf.function(step)
    losses = []
    for i in range(WARMUP):  # tracing, profiling, graph instantiation
        x, y = data[i % len(data)]
        losses.append(step(x, y))
    float(losses[-1])
    with measure():
        start = time.perf_counter()
        for i in range(WARMUP, steps):
            x, y = data[i % len(data)]
            loss = step(x, y)
            losses.append(loss)
            if (i + 1) % report_every == 0 and not quiet:
                print(f"  [{mode:>11}] step {i + 1:4d}  loss {float(loss):.5f}")
        losses = [float(v) for v in losses]  # waits for any work still in flight
        per_step = (time.perf_counter() - start) / (steps - WARMUP)
    weights = {k: v.numpy() for k, v in model.items()}
    return losses, weights, history, per_step, step


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--modes", default="eager,tf.function,gpe",
                        help="comma-separated: eager, tf.function, gpe")
    parser.add_argument("--report-every", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed runs per mode; the median is reported")
    args = parser.parse_args(argv)
    if args.steps <= WARMUP:
        parser.error(f"--steps must be more than {WARMUP}")
    data = make_data()
    results, timings = {}, {}
    for mode in args.modes.split(","):
        print(f"training with {mode}")
        results[mode] = train(mode, args.steps, data, args.report_every)
        timings[mode] = [results[mode][3]] + [
            train(mode, args.steps, data, args.report_every, quiet=True)[3]
            for _ in range(args.repeats - 1)]
    print(f"\ntime per step, median of {args.repeats} runs of {args.steps} steps "
          f"(wall time including the final wait):")
    base = statistics.median(timings["eager"]) if "eager" in timings else None
    for mode, (losses, weights, history, _, _) in results.items():
        median = statistics.median(timings[mode])
        ratio = f"  {base / median:5.1f}x eager" if base else ""
        print(f"  {mode:>11}: {median * 1e6:8.1f} us{ratio}   history holds {len(history)} "
              f"entr{'y' if len(history) == 1 else 'ies'}")
    if "eager" in results and "gpe" in results:
        e, g = results["eager"], results["gpe"]
        same_losses = e[0] == g[0]
        same_weights = all(np.array_equal(e[1][k], g[1][k]) for k in e[1])
        same_history = [float(v) for v in e[2]] == [float(v) for v in g[2]]
        print(f"\ngpe vs eager: losses identical: {same_losses}, final weights identical: "
              f"{same_weights}, history identical: {same_history}")
        print(f"gpe stats: {g[4].stats()}")
        overlap = gpe.timing()  # before the warm-up: turning timing on rebuilds the sink
        train("gpe", args.steps, data, args.report_every, quiet=True, measure=lambda: overlap)
        print(f"gpe, one more run of {args.steps - WARMUP} steps: {overlap.result}")
        if not (same_losses and same_weights and same_history):
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
