"""What a profile costs: a 1,000-call run with and without `gpe.profile` (issue 31).

    python tests/bench_profile.py [--calls 1000] [--repeats 7] [--windows 50,100]
                                  [--skip 100] [--whole 0]
    python tests/bench_profile.py --adds-up

The run is examples/train_mlp.py's step (an MLP's forward and backward pass and six
variable updates, the loss kept in a host list), sliced and already built, called
--calls times, then the last loss read (the wait for the graph to finish is in the time).
Each round runs it these ways in one process, in turn, so that a busy machine loads them
alike:

- off: no profile (gpe's hooks off);
- report: `gpe run --report`'s accounting of the host's time (host/diagnostics/profile.py
  HostTime, without its overlap timing);
- tf profiler: TensorFlow's profiler alone around the run (its own op events; gpe's hooks
  off);
- gpe.profile all: `with gpe.profile(DIR, calls="all"):` around the run, every call
  recorded (TensorFlow's events and gpe's);
- gpe.profile: `with gpe.profile(DIR):` around the run, the default: a window of 20 calls
  from the first call of a function that has run sliced (here the run's first: the step
  is built before);
- gpe.profile calls=N: `with gpe.profile(DIR, calls=N, skip=--skip):` around the run, a
  window of N calls recorded after --skip calls (one way per N of --windows).

Prints the median seconds of each and its ratio to off: the calls alone (a window's
profile may still be being written then), the whole block with the profiler's start and
stop (stopping collects and writes the profile: its cost grows with the events recorded)
and the median of each round's ratio of that to the round's off ("paired"), and the
process's CPU seconds, with the load average before and after. --whole N also times N
rounds of whole processes, `gpe run SCRIPT` against `gpe run --profile DIR SCRIPT` (the
default window) and `gpe run --profile DIR --profile-calls all SCRIPT`, of a script making
the same 1,000 calls (interpreter start, imports and the build included), each round's
ratio to that round's run without a profile and their median. --adds-up instead runs
four examples under `gpe run --report` and prints the report's total (its parts add up
to it) against the script's own clock, its first line to its exit. Not a test: the numbers depend on
the machine.
"""
from __future__ import annotations

import contextlib
import argparse
import os
import re
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

BASE_WAYS = ("off", "report", "tf profiler", "gpe.profile all", "gpe.profile")

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


@contextlib.contextmanager
def tf_profiler(logdir: str):
    tf.profiler.experimental.start(logdir)
    try:
        yield
    finally:
        tf.profiler.experimental.stop()


def way(name: str, logdir: str, skip: int):
    """The context the run is made in, one way."""
    if name == "off":
        return contextlib.nullcontext()
    if name == "report":
        return HostTime(overlap=False)
    if name == "tf profiler":
        return tf_profiler(logdir)
    if name == "gpe.profile all":
        return gpe.profile(logdir, calls="all")
    if name == "gpe.profile":
        return gpe.profile(logdir)
    return gpe.profile(logdir, calls=int(name.rpartition("=")[2]), skip=skip)


def one_way(name: str, step, data, calls: int, logdir: str,
            skip: int) -> tuple[float, float, float]:
    """(seconds of the calls, seconds with the profile's start and stop, the process's
    CPU seconds of those: every thread's, the graph's and the profiler's included)."""
    started, cpu = time.perf_counter(), time.process_time()
    with way(name, logdir, skip):
        begun = time.perf_counter()
        run_calls(step, data, calls)
        ran = time.perf_counter() - begun
    return ran, time.perf_counter() - started, time.process_time() - cpu


def whole(pairs: int, calls: int) -> dict[str, list[float]]:
    """Whole `gpe run` processes, without and with --profile (the default window, every
    call), in turn."""
    folder = tempfile.mkdtemp(prefix="gpe-bench-profile-")
    script = os.path.join(folder, "run.py")
    with open(script, "w") as f:
        f.write(SCRIPT.format(examples=os.path.join(ROOT, "examples"), calls=calls))
    profile = ["--profile", os.path.join(folder, "p")]
    ways = {"gpe run": [], "gpe run --profile": profile,
            "... --profile-calls all": profile + ["--profile-calls", "all"]}
    times: dict[str, list[float]] = {name: [] for name in ways}
    try:
        for _ in range(pairs):
            for name, extra in ways.items():
                started = time.perf_counter()
                subprocess.run([sys.executable, "-m", "gpe.cli", "run", *extra, script],
                               check=True, capture_output=True, cwd=folder,
                               env={**os.environ, "GPE_PAYOFF": "0", "PYTHONPATH": ROOT})
                times[name].append(time.perf_counter() - started)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return times


# `gpe run --report`'s breakdown against the script's own clock: a copy of each example
# that notes the time at its first line and prints it at exit
ADDS_UP = [("train_mlp.py", ["--modes", "gpe", "--steps", "300"]),
           ("numpy_mid_step.py", ["--steps", "60"]), ("tree_rnn.py", ["--steps", "40"]),
           ("lstm_lm.py", ["--steps", "30"])]
CLOCK = ("import time as _t0, atexit as _a0, sys as _s0; _T0 = _t0.perf_counter(); "
         "_a0.register(lambda: print('SCRIPT_S %.4f' % (_t0.perf_counter() - _T0), "
         "file=_s0.stderr))")


def adds_up() -> None:
    """Each example under `gpe run --report`: the report's total (the parts add up to
    it) against the script's own clock, from its first line to its exit."""
    examples = os.path.join(ROOT, "examples")
    for name, args in ADDS_UP:
        folder = tempfile.mkdtemp(prefix="gpe-bench-profile-")
        try:
            for f in os.listdir(examples):
                if f.endswith(".py"):
                    shutil.copy(os.path.join(examples, f), folder)
            with open(os.path.join(folder, name)) as f:
                lines = f.read().split("\n")
            first = next((i + 1 for i, line in enumerate(lines)
                          if line.startswith("from __future__")), 0)
            lines.insert(first, CLOCK)
            with open(os.path.join(folder, name), "w") as f:
                f.write("\n".join(lines))
            err = subprocess.run([sys.executable, "-m", "gpe.cli", "run", "--report", name,
                                  *args], cwd=folder, capture_output=True, text=True,
                                 env={**os.environ, "PYTHONPATH": ROOT}).stderr
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        total = re.search(r"host's time went \(([\d.]+) s on the main thread\)", err)
        clock = re.search(r"SCRIPT_S ([\d.]+)", err)
        if total is None or clock is None:
            print(f"  {name}: no report\n{err[-2000:]}")
            continue
        total, clock = float(total.group(1)), float(clock.group(1))
        print(f"  {name:<18} report {total:7.3f} s, the script's own clock {clock:7.3f} s: "
              f"{total / clock:6.1%}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--windows", default="50,100",
                        help="the window sizes N of the `gpe.profile(calls=N)` ways")
    parser.add_argument("--skip", type=int, default=100,
                        help="the calls before a window opens (skip=)")
    parser.add_argument("--ways", default=",".join(BASE_WAYS),
                        help="which of the other ways to run")
    parser.add_argument("--whole", type=int, default=0, metavar="N",
                        help="also time N rounds of whole `gpe run` processes")
    parser.add_argument("--verbose", action="store_true", help="print every round's time")
    parser.add_argument("--adds-up", action="store_true",
                        help="only: examples under `gpe run --report`, the report's total "
                             "against the script's own clock")
    args = parser.parse_args(argv)
    if args.adds_up:
        print(f"gpe run --report's total against the script's clock (load average "
              f"{os.getloadavg()[0]:.1f}):")
        adds_up()
        return 0
    ways = ["off"] + [w for w in args.ways.split(",") if w and w != "off"] + \
        [f"gpe.profile calls={n}" for n in args.windows.split(",") if n]
    args.load = os.getloadavg()[0]
    data = train_mlp.make_data()
    history: list = []
    step = gpe.function(train_mlp.make_step(train_mlp.make_model(), history), adaptive=False)
    run_calls(step, data, 60)  # profiled, built, its graph started
    logdir = tempfile.mkdtemp(prefix="gpe-bench-profile-")
    times = {name: ([], [], []) for name in ways}
    try:
        one_way("gpe.profile", step, data, 20, logdir, 0)  # the profiler's own first start
        for _ in range(args.repeats):
            for name in ways:
                history.clear()
                for kept, value in zip(times[name], one_way(name, step, data, args.calls,
                                                            logdir, args.skip)):
                    kept.append(value)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    if args.verbose:
        for name in ways:
            print(f"  {name:<20} calls s: " + " ".join(f"{t:.4f}" for t in times[name][0]))
            print(f"  {'':<20} with s:  " + " ".join(f"{t:.4f}" for t in times[name][1]))
    report(times, args)
    if args.whole:
        runs = whole(args.whole, args.calls)
        base = runs["gpe run"]
        print(f"whole processes, median of {args.whole} rounds (interpreter start, imports, "
              f"build and {args.calls} calls; paired: the median of each round's ratio); "
              f"load average {os.getloadavg()[0]:.1f}:")
        for name, seconds in runs.items():
            paired = statistics.median(s / b for s, b in zip(seconds, base))
            print(f"  {name:<26} {statistics.median(seconds):7.2f} s "
                  f"{statistics.median(seconds) / statistics.median(base):7.3f} "
                  f"paired {paired:7.3f}")
    return 0


def report(times: dict, args) -> None:
    off = [statistics.median(t) for t in times["off"]]
    print(f"{args.calls} sliced calls of examples/train_mlp.py's step, median of "
          f"{args.repeats} rounds (the ways in turn in each round; windows of calls=N after "
          f"{args.skip} calls); load average {args.load:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after:")
    print(f"  {'way':<20} {'calls s':>9} {'x off':>7} {'with start/stop s':>18} "
          f"{'x off':>7} {'paired':>7} {'CPU s':>8} {'x off':>7}")
    for name, kept in times.items():
        row = [statistics.median(t) for t in kept]
        # the median of each round's ratio to that round's off (a busy machine's slow
        # stretches load both alike)
        paired = statistics.median(w / o for w, o in zip(kept[1], times["off"][1]))
        print(f"  {name:<20} {row[0]:9.4f} {row[0] / off[0]:7.3f} {row[1]:18.4f} "
              f"{row[1] / off[1]:7.3f} {paired:7.3f} {row[2]:8.4f} {row[2] / off[2]:7.3f}")


if __name__ == "__main__":
    sys.exit(main())
