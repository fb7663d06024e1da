"""What building one small function costs: slicing, tracing, registering and its first call.

    python tests/bench_build_cost.py [--functions N] [--repeats R]

Writes N functions of about 20 lines each (tests/bench_many_functions.py's template: TF
ops on a small tensor, Python numbers, a loop of fixed count, an `if` on a number) and,
in one process, makes each a gpe function with one profile call and no adaptive timing,
then times the call that slices it, traces its TF part, registers the part (a new sink
for its group) and runs it in the graph, until its result is read; less the time of a
plain eager call of the same function. Prints the first function's cost (the process's
first sink: TensorFlow's one-time costs) and the median and mean of the others, wall and
CPU time, over R processes. Not a test: the numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import os, sys, time, warnings
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, {here!r})
import tensorflow as tf
import gpe
import bench_many_functions
warnings.simplefilter("ignore", gpe.GpeWarning)
path = os.path.join({tmp!r}, "gpe_build_cost_functions.py")
with open(path, "w") as f:
    f.write(bench_many_functions.script({n}, 1, callee_every=0))
sys.path.insert(0, {tmp!r})
import gpe_build_cost_functions as generated
x, w = tf.ones([4, 8]) * 0.1, tf.ones([8, 8]) * 0.05
for i in range({n}):
    plain = getattr(generated, f"f{{i}}")
    sliced = gpe.function(plain, profile_calls=1, adaptive=False)
    sliced(x, w)  # its profile call, eager
    start = time.perf_counter()
    plain(x, w)
    eager = time.perf_counter() - start
    start, cpu = time.perf_counter(), time.process_time()
    out, total = sliced(x, w)  # sliced, traced, registered, run in the graph
    float(total)
    wall, cpu = time.perf_counter() - start - eager, time.process_time() - cpu
    assert sliced.stats()["graph_calls"] == 1, sliced.stats()
    print("cost", wall, cpu)
"""


def measure(functions: int) -> list[tuple[float, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([sys.executable, "-c", CHILD.format(here=HERE, tmp=tmp,
                                                                  n=functions)],
                              cwd=tmp, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return [(float(a), float(b)) for _, a, b in
            (line.split() for line in done.stdout.splitlines() if line.startswith("cost"))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--functions", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    first, rest = [], []
    for _ in range(args.repeats):
        costs = measure(args.functions)
        first.append(costs[0])
        rest.extend(costs[1:])
    ms = lambda values: statistics.median(values) * 1e3  # noqa: E731
    print(f"{args.functions} functions of about 20 lines, {args.repeats} processes")
    print(f"  first function:  {ms([w for w, _ in first]):6.1f} ms wall "
          f"{ms([c for _, c in first]):6.1f} ms CPU (medians)")
    print(f"  the others:      {ms([w for w, _ in rest]):6.1f} ms wall "
          f"{ms([c for _, c in rest]):6.1f} ms CPU (medians); mean "
          f"{statistics.mean(w for w, _ in rest) * 1e3:.1f} ms wall")


if __name__ == "__main__":
    main()
