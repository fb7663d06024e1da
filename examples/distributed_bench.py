"""Eager, tf.function and gpe side by side on examples/distributed.py's programs, under
MirroredStrategy over 2 logical CPUs and MultiWorkerMirroredStrategy on 2 local workers
(launched by distributed.py, one process each), with the distributed step decorated
(`dist`: the function that calls strategy.run and strategy.reduce) and with the
per-replica step decorated (`replica`: plain `strategy.run(step, ...)` in the loop). The
three modes of a row run in one process (one per worker), taking turns step by step
(`distributed.py --mode all`), so that their times are taken under the same load; one
command makes the whole table:

    python examples/distributed_bench.py [--programs vars,keras,subclassed] [--steps N]
                                         [--repeats R] [--wrap dist,replica]
                                         [--strategy mirrored,multiworker]

Prints, per row, ms per step for each mode (median over the runs of each run's median),
whether gpe's (and tf.function's) losses and final weights equal eager's, the fraction of
gpe's steady-state calls (after its profile calls) that ran sliced, gpe's speed relative
to eager and tf.function, and whether the row meets issue 16's targets (identical, >= 90%
sliced, >= 0.9x tf.function where tf.function is correct: equal to eager, or within
1e-5, "differs by"). tf.function's error is shown where it fails; under multiworker,
"workers disagree" where the workers' results differ.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("eager", "tf.function", "gpe")


def run(program: str, steps: int, out: str, wrap: str, strategy: str) -> dict:
    """One run of the three modes side by side (`distributed.py --mode all`: one process,
    or one per worker): {mode: result}. Its own process group, killed past the limit."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    cmd = [sys.executable, os.path.join(HERE, "distributed.py"), "--program", program,
           "--mode", "all", "--steps", str(steps), "--json", out, "--wrap", wrap,
           "--strategy", strategy, "--timeout", "500"]
    proc = subprocess.Popen(cmd, cwd=tempfile.gettempdir(), env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {mode: {"error": "did not end in time (killed)"} for mode in MODES}
    try:
        with open(out) as f:
            result = json.load(f)
    except (OSError, ValueError):
        return {mode: {"error": f"exit {proc.returncode}: {err[-200:]}"} for mode in MODES}
    if "modes" not in result:  # a worker failed before it could report
        return {mode: result for mode in MODES}
    return result["modes"]


def same(a: dict, b: dict) -> bool:
    return a.get("losses") == b.get("losses") and a.get("weights") == b.get("weights")


def difference(a: dict, b: dict) -> float:
    """The largest absolute difference between two runs' losses and final weights."""
    import numpy as np
    pairs = [(a["losses"], b["losses"]), *zip(a["weights"], b["weights"])]
    return max(float(np.max(np.abs(np.subtract(x, y)))) for x, y in pairs)


def row(label: list[str], runs: dict[str, list[dict]]) -> str:
    eager = runs["eager"][0]
    cells, times, correct = list(label), {}, {}
    for mode in MODES:
        first = runs[mode][0]
        if "error" in first:
            cells.append(f"fails ({first['error'][:40]})")
            continue
        ms = times[mode] = statistics.median(r["ms"] for r in runs[mode] if "ms" in r)
        correct[mode] = mode == "eager" or same(first, eager)
        note = "" if mode == "eager" else (" identical" if correct[mode] else " DIFFERENT")
        if mode == "tf.function" and not correct[mode]:  # rounding (graph rewrites)?
            diff = difference(first, eager)
            correct[mode] = diff <= 1e-5
            note = f" differs by {diff:.0e}" if correct[mode] else note
        if first.get("agree") is False:
            note += " workers disagree"
            correct[mode] = False
        cells.append(f"{ms:.1f}{note}")
    stats = runs["gpe"][0].get("stats")
    fraction = None
    if stats:
        steady = stats["calls"] - stats["profile_calls"]
        fraction = stats["graph_calls"] / steady if steady > 0 else 0.0
        cells.append(f"{stats['graph_calls']}/{steady}")
    else:
        cells.append("-")
    ratios = {}
    for base in ("eager", "tf.function"):  # speed of gpe relative to each (x faster)
        ok = base in times and "gpe" in times
        ratios[base] = times[base] / times["gpe"] if ok else None
        cells.append(f"{ratios[base]:.2f}x" if ok else "-")
    cells.append(verdict(correct, fraction, ratios["tf.function"]))
    return "| " + " | ".join(cells) + " |"


def verdict(correct: dict, fraction, vs_tf) -> str:
    """Issue 16's targets: gpe identical to eager, >= 90% of its steady-state calls
    sliced, >= 0.9x tf.function's speed where tf.function ran and is correct (equal to
    eager, or within float rounding: 1e-5)."""
    misses = []
    if not correct.get("gpe"):
        misses.append("not identical")
    if fraction is None or fraction < 0.9:
        misses.append("< 90% sliced")
    if correct.get("tf.function") and (vs_tf is None or vs_tf < 0.9):
        misses.append("< 0.9x tf.function")
    return "yes" if not misses else "NO: " + ", ".join(misses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", default="vars,keras,subclassed")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--wrap", default="dist,replica")
    parser.add_argument("--strategy", default="mirrored,multiworker")
    args = parser.parse_args()
    print("| strategy | decorated | program | eager ms | tf.function ms | gpe ms | "
          "gpe sliced (steady) | gpe vs eager | gpe vs tf.function | targets met |")
    print("|---|---|---|---|---|---|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for strategy in args.strategy.split(","):
            for wrap in args.wrap.split(","):
                for program in args.programs.split(","):
                    runs = {m: [] for m in MODES}
                    for i in range(args.repeats):
                        out = os.path.join(tmp, f"{strategy}-{wrap}-{program}-{i}.json")
                        for mode, result in run(program, args.steps, out, wrap,
                                                strategy).items():
                            runs[mode].append(result)
                    print(row([strategy, wrap, program], runs), flush=True)


if __name__ == "__main__":
    main()
