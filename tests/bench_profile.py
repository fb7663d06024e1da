"""What a profile costs: a 1,000-call run with and without `gpe.profile` (issue 31).

    python tests/bench_profile.py [--calls 1000] [--repeats 7] [--whole 0]

The run is examples/train_mlp.py's step (an MLP's forward and backward pass and six
variable updates, the loss kept in a host list), sliced and already built, called
--calls times, then the last loss read (the wait for the graph to finish is in the time).
Each round runs it four ways in one process, in turn, so that a busy machine loads them
alike:

- off: no profile (gpe's hooks off: one attribute check each);
- report: `gpe run --report`'s accounting of the host's time (host/diagnostics/profile.py
  HostTime, without its overlap timing);
- tf profiler: TensorFlow's profiler alone around the run (its own op events; gpe's hooks
  off);
- gpe.profile: `with gpe.profile(DIR):` around the run (TensorFlow's events and gpe's).

Prints the median seconds of each and its ratio to off, for the calls alone and for the
calls with the profiler's start and stop (stopping collects and writes the profile).
--whole N also times N pairs of whole processes, `gpe run SCRIPT` against `gpe run
--profile DIR SCRIPT`, of a script making the same 1,000 calls (interpreter start, imports
and the build included). Not a test: the numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples"))

import tensorflow as tf  # noqa: E402

import gpe  # noqa: E402
import train_mlp  # noqa: E402
from gpe.host.diagnostics.profile import HostTime  # noqa: E402

WAYS = ("off", "report", "tf profiler", "gpe.profile")

SCRIPT = """
import sys
sys.path.insert(0, {examples!r})
import tensorflow as tf
import train_mlp
data = train_mlp.make_data()
m = train_mlp.make_model()
history = []

def train_step(x, y):  # train_mlp's step, here: `gpe run` slices the script's functions
    with tf.GradientTape() as tape:
        h1 = tf.nn.relu(tf.matmul(x, m["w1"]) + m["b1"])
        h2 = tf.nn.relu(tf.matmul(h1, m["w2"]) + m["b2"])
        loss = tf.reduce_mean(tf.square(tf.matmul(h2, m["w3"]) + m["b3"] - y))
    names = ["w1", "b1", "w2", "b2", "w3", "b3"]
    for name, g in zip(names, tape.gradient(loss, [m[n] for n in names])):
        m[name].assign_sub(0.05 * g)
    history.append(loss)
    return loss

for i in range({calls}):
    loss = train_step(*data[i % len(data)])
print(float(loss))
"""


def run_calls(step, data, calls: int) -> None:
    for i in range(calls):
        loss = step(*data[i % len(data)])
    float(loss)


def one_way(way: str, step, data, calls: int, logdir: str) -> tuple[float, float, float]:
    """(seconds of the calls, seconds with the profiler's start and stop, the process's
    CPU seconds of those: every thread's, the graph's and the profiler's included)."""
    started, cpu = time.perf_counter(), time.process_time()
    if way == "off":
        begun = time.perf_counter()
        run_calls(step, data, calls)
        ran = time.perf_counter() - begun
    elif way == "report":
        with HostTime(overlap=False):
            begun = time.perf_counter()
            run_calls(step, data, calls)
            ran = time.perf_counter() - begun
    elif way == "tf profiler":
        tf.profiler.experimental.start(logdir)
        begun = time.perf_counter()
        run_calls(step, data, calls)
        ran = time.perf_counter() - begun
        tf.profiler.experimental.stop()
    else:
        with gpe.profile(logdir):
            begun = time.perf_counter()
            run_calls(step, data, calls)
            ran = time.perf_counter() - begun
    return ran, time.perf_counter() - started, time.process_time() - cpu


def whole(pairs: int, calls: int) -> dict[str, list[float]]:
    """Whole `gpe run` processes, without and with --profile, in turn."""
    folder = tempfile.mkdtemp(prefix="gpe-bench-profile-")
    script = os.path.join(folder, "run.py")
    with open(script, "w") as f:
        f.write(SCRIPT.format(examples=os.path.join(ROOT, "examples"), calls=calls))
    times: dict[str, list[float]] = {"gpe run": [], "gpe run --profile": []}
    try:
        for _ in range(pairs):
            for way, extra in (("gpe run", []), ("gpe run --profile",
                                                 ["--profile", os.path.join(folder, "p")])):
                started = time.perf_counter()
                subprocess.run([sys.executable, "-m", "gpe.cli", "run", *extra, script],
                               check=True, capture_output=True, cwd=folder,
                               env={**os.environ, "GPE_PAYOFF": "0", "PYTHONPATH": ROOT})
                times[way].append(time.perf_counter() - started)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return times


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--whole", type=int, default=0, metavar="N",
                        help="also time N pairs of whole `gpe run` processes")
    parser.add_argument("--verbose", action="store_true", help="print every round's time")
    args = parser.parse_args(argv)
    data = train_mlp.make_data()
    history: list = []
    step = gpe.function(train_mlp.make_step(train_mlp.make_model(), history), adaptive=False)
    run_calls(step, data, 60)  # profiled, built, its graph started
    logdir = tempfile.mkdtemp(prefix="gpe-bench-profile-")
    times = {way: ([], [], []) for way in WAYS}
    try:
        one_way("gpe.profile", step, data, 20, logdir)  # the profiler's own first start
        for _ in range(args.repeats):
            for way in WAYS:
                history.clear()
                for kept, value in zip(times[way], one_way(way, step, data, args.calls,
                                                           logdir)):
                    kept.append(value)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    if args.verbose:
        for way in WAYS:
            print(f"  {way:<12} calls s: " + " ".join(f"{t:.4f}" for t in times[way][0]))
    off = [statistics.median(t) for t in times["off"]]
    print(f"{args.calls} sliced calls of examples/train_mlp.py's step, median of "
          f"{args.repeats} rounds (the ways in turn in each round):")
    print(f"  {'way':<12} {'calls s':>9} {'x off':>7} {'with start/stop s':>18} {'x off':>7}"
          f" {'CPU s':>8} {'x off':>7}")
    for way in WAYS:
        row = [statistics.median(t) for t in times[way]]
        print(f"  {way:<12} {row[0]:9.4f} {row[0] / off[0]:7.3f} {row[1]:18.4f} "
              f"{row[1] / off[1]:7.3f} {row[2]:8.4f} {row[2] / off[2]:7.3f}")
    if args.whole:
        runs = whole(args.whole, args.calls)
        base = statistics.median(runs["gpe run"])
        print(f"whole processes, median of {args.whole} pairs (interpreter start, imports, "
              f"build and {args.calls} calls):")
        for way, seconds in runs.items():
            print(f"  {way:<20} {statistics.median(seconds):7.2f} s "
                  f"{statistics.median(seconds) / base:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
