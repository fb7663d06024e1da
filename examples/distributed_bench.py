"""Eager, tf.function and gpe side by side on examples/distributed.py's programs
(MirroredStrategy over 2 logical CPUs), each run in its own process:

    python examples/distributed_bench.py [--programs vars,keras,subclassed] [--steps N]
                                         [--repeats R]

Prints, per program and mode, ms per step (median over the runs of each run's median),
whether losses and final weights equal eager's, and the fraction of gpe's calls that ran
sliced. tf.function's error is shown where it fails.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("eager", "tf.function", "gpe")


def run(program: str, mode: str, steps: int, out: str) -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    subprocess.run([sys.executable, os.path.join(HERE, "distributed.py"), "--program",
                    program, "--mode", mode, "--steps", str(steps), "--json", out],
                   cwd=tempfile.gettempdir(), capture_output=True, timeout=600, env=env)
    with open(out) as f:
        return json.load(f)


def row(program: str, runs: dict[str, list[dict]]) -> str:
    eager = runs["eager"][0]
    cells = [program]
    for mode in MODES:
        first = runs[mode][0]
        if "error" in first:
            cells.append(f"fails ({first['error'][:40]})")
            continue
        ms = statistics.median(r["ms"] for r in runs[mode])
        match = "" if mode == "eager" else (
            " identical" if first["losses"] == eager["losses"]
            and first["weights"] == eager["weights"] else " DIFFERENT")
        stats = first.get("stats")
        sliced = f" sliced {stats['graph_calls']}/{stats['calls']}" if stats else ""
        cells.append(f"{ms:.1f}{match}{sliced}")
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", default="vars,keras,subclassed")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    print("| program (MirroredStrategy, 2 CPUs) | eager ms | tf.function ms | gpe ms |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for program in args.programs.split(","):
            runs = {m: [] for m in MODES}
            for i in range(args.repeats):
                for mode in MODES:
                    out = os.path.join(tmp, f"{program}-{mode}-{i}.json")
                    runs[mode].append(run(program, mode, args.steps, out))
            print(row(program, runs), flush=True)


if __name__ == "__main__":
    main()
