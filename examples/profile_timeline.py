"""Profile examples/train_mlp.py's step under gpe: the host ahead of the graph, then a step
that reads its loss with `.numpy()` and so waits for the graph at every call.

    python examples/profile_timeline.py [DIR] [--steps 200]

Writes two TensorBoard profiles under DIR (default: gpe-profile), one per run, and prints
where the host's time went in each (as `gpe run --report` does). View them with
TensorBoard's profile plugin: `pip install 'gpe[profile]'`, `tensorboard --logdir DIR`,
Profile tab, trace viewer (docs/profiling.md says how to read the timeline).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gpe  # noqa: E402
from gpe.host.diagnostics.profile import HostTime, format_host_time  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_mlp import LR, make_data, make_model  # noqa: E402


def make_step(m, history, read_now: bool):
    w1, b1, w2, b2, w3, b3 = m["w1"], m["b1"], m["w2"], m["b2"], m["w3"], m["b3"]

    def train_step(x, y):  # as examples/train_mlp.py's
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
        history.append(loss)  # a Pending: the host runs ahead
        return loss

    def train_step_numpy(x, y):  # the same, keeping the loss as a NumPy value
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
        history.append(loss.numpy())  # the host needs the value now: it waits
        return loss

    return train_step_numpy if read_now else train_step


def profiled(logdir: str, steps: int, read_now: bool) -> None:
    data, history = make_data(), []
    step = gpe.function(make_step(make_model(), history, read_now), adaptive=False)
    for i in range(10):  # profile calls and the build, before the profile
        step(*data[i % len(data)])
    float(history[-1])
    with gpe.profile(logdir) as p:
        started = time.perf_counter()
        with HostTime(overlap=False) as host:
            for i in range(steps):
                loss = step(*data[i % len(data)])
            final = float(loss)
        took = time.perf_counter() - started
    print(f"{step.__name__}: final loss {final:.5f}; profile written to {p.path}")
    print(format_host_time(host, took))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logdir", nargs="?", default="gpe-profile")
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args(argv)
    profiled(os.path.join(args.logdir, "ahead"), args.steps, read_now=False)
    time.sleep(1.1)  # (TensorFlow names a profile's run by the second it was written)
    profiled(os.path.join(args.logdir, "waits"), args.steps, read_now=True)
    print(f"view: tensorboard --logdir {args.logdir}  (pip install 'gpe[profile]')")
    return 0


if __name__ == "__main__":
    sys.exit(main())
