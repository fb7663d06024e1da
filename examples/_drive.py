"""Drive one or more example training programs eagerly, with tf.function, with gpe and
under `gpe run`; compare what they observe and time them.

    python examples/_drive.py PROGRAM [PROGRAM ...] [--steps N] [--warmup W]
                              [--repeats R] [--timing-steps M]
                              [--modes eager,tf.function,gpe,gpe-run] [--adaptive]
                              [--out DIR] [--json FILE]

PROGRAM is a file of examples/ (`gan` or `examples/gan.py`) with the shape every program
there has: `main(steps) -> {"losses", "weights", "state"}`, step functions named
`train_step` or `*_step` (module-level functions, or methods of module-level classes) that
`main` looks up at call time. Each mode runs in its own process:

- eager: `main(steps)` as written;
- tf.function: every step function replaced by `tf.function(fn)` before `main` runs;
- gpe: every step function replaced by `gpe.function(fn, adaptive=False)` (`--adaptive`
  keeps gpe's own choice of eager where that is faster), with `stats()` collected;
- gpe-run: `gpe run --report PROGRAM --steps N --dump FILE` in a subprocess, unmodified.

tf.function, gpe and gpe-run are compared with eager: losses, final weights, host state
(bit-identical, close, or different, with where) and printed output. Timing comes from
`--repeats` further runs of eager, tf.function and gpe (in turn, each its own process) of
`--timing-steps` steps: per run, the median interval between successive calls of the
program's main step function (TIMED_STEP in the program, else `train_step`) after
`--warmup` calls, so it includes the loop's host work; the table shows the median over the
runs. `drain` is the mean over the same calls up to the end of `main` (its final
`float(...)` waits for work still in flight), shown where it exceeds 1.5x the median.
Writes one JSON file per program under `--out` and prints a table.

The children, the program contract and the comparison are gpe's own (gpe.drive,
gpe.compare), shared with `gpe bench PROGRAM`, which times eager, tf.function and gpe the
same way and prints ratios, build time and gpe's fallback overhead.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile

from gpe.bench_program import run_metrics
from gpe.compare import verdict
from gpe.drive import MODES, default_steps, gpe_report, is_step_name, run_mode  # noqa: F401

HERE = os.path.dirname(os.path.abspath(__file__))


def program_path(name: str) -> str:
    if not name.endswith(".py"):
        name = os.path.join(HERE, name + ".py")
    return os.path.abspath(name)


def timing(record: dict, warmup: int) -> dict:
    if not record.get("calls"):
        return {"step": None, "median_ms": None, "drain_ms": None, "calls": 0}
    m = run_metrics(record, warmup)
    enough = m["calls"] >= warmup + 3
    return {"step": m["step"], "median_ms": m["ms_per_step"] if enough else None,
            "drain_ms": m["ms_to_end"] if enough else None, "calls": m["calls"]}


def sliced_fraction(stats: dict) -> str:
    parts = []
    for label, s in stats.items():
        steady = s["calls"] - min(s["calls"], 3)
        frac = s["graph_calls"] / steady if steady else 0.0
        parts.append(f"{label} {s['graph_calls']}/{steady} ({frac:.0%})")
    return ", ".join(parts) or "-"


_ROW = re.compile(r"^\s+(\S+): (\d+) calls, (?:(\d+) sliced, [^;]*(?:.*last (\d+) calls: "
                  r"(\d+) sliced)?|\d+ ms eagerly)")
_INTERVAL = re.compile(r"^\s+(\S+): .*, ([\d.]+) ms a call to the end")


def run_ms(report: list[str] | None, step: str | None) -> float | None:
    """`gpe run`'s time per call of the timed step over the second half, up to the end of
    the program (its report), the wait for the graph included."""
    for line in report or []:
        m = _INTERVAL.match(line)
        if m and step and m.group(1).rsplit(".", 1)[-1] == step.rsplit(".", 1)[-1]:
            return float(m.group(2))
    return None


def run_steps(report: list[str] | None) -> dict:
    """From `gpe run --report`: per step function (train_step, *_step) that was called,
    (calls, sliced calls, sliced calls in the second half, calls in the second half): the
    report's "last N calls" (from a mark past half the calls; a function with too few
    calls for it: all its calls); a function that waited to pay off its build throughout
    counts none sliced."""
    found = {}
    for line in report or []:
        m = _ROW.match(line)
        if m is None or not is_step_name(m.group(1).rsplit(".", 1)[-1]):
            continue
        calls = int(m.group(2))
        if m.group(3) is None:  # waiting on payoff throughout
            found[m.group(1)] = (calls, 0, 0, calls - calls // 2)
        elif m.group(4) is None:  # too few calls for the later ones apart: all of them
            found[m.group(1)] = (calls, int(m.group(3)), int(m.group(3)), calls)
        else:
            found[m.group(1)] = (calls, int(m.group(3)), int(m.group(5)), int(m.group(4)))
    return found


def run_fraction(report: list[str] | None) -> tuple[float, float, str]:
    """(sliced share of all step calls, of the second half's, text) under `gpe run`."""
    steps = run_steps(report)
    calls, sliced = sum(v[0] for v in steps.values()), sum(v[1] for v in steps.values())
    late, late_calls = sum(v[2] for v in steps.values()), sum(v[3] for v in steps.values())
    whole, second = sliced / calls if calls else 0.0, late / late_calls if late_calls else 0.0
    text = ", ".join(f"{n} {v[1]}/{v[0]}" for n, v in steps.items())
    return whole, second, f"{text}; second half {late}/{late_calls} ({second:.0%})"


def reasons(record: dict) -> list[str]:
    found = []
    for label, s in (record.get("stats") or {}).items():
        found += [f"{label}: eager x{n}: {r}" for r, n in s["fallbacks"].items()]
        found += [f"{label}: guard failed x{n}: {r}" for r, n in s["guard_failures"].items()]
    return found


def drive(path: str, modes, steps, warmup, adaptive, out_dir, repeats=0,
          timing_steps=None) -> dict:
    name = os.path.splitext(os.path.basename(path))[0]
    records, timings = {}, {}
    if timing_steps is None:
        base = steps or default_steps(path)
        timing_steps = 2 * base if base else None
    with tempfile.TemporaryDirectory() as workdir:
        for mode in modes:
            print(f"[{name}] {mode} ...", file=sys.stderr, flush=True)
            records[mode] = run_mode(mode, path, steps, adaptive, workdir)
        for r in range(repeats):  # timing runs, the modes in turn
            for mode in modes:
                if mode == "gpe-run" or records[mode].get("error"):
                    continue
                print(f"[{name}] {mode} timing run {r + 1} ...", file=sys.stderr, flush=True)
                record = run_mode(mode, path, timing_steps, adaptive, workdir)
                if not record.get("error"):
                    timings.setdefault(mode, []).append(timing(record, warmup))
    summary = {"program": name, "modes": {}}
    eager = records.get("eager", {})
    for mode, record in records.items():
        row = {"error": record.get("error")}
        if mode != "gpe-run":
            row["timing"] = timing(record, warmup)
            runs = [t for t in timings.get(mode, []) if t["median_ms"] is not None]
            if runs:
                row["timing_runs"] = runs
                row["timing"] = dict(runs[0], median_ms=statistics.median(
                    t["median_ms"] for t in runs), drain_ms=statistics.median(
                    t["drain_ms"] for t in runs), runs=len(runs))
        if mode != "eager" and "eager" in records:
            row.update(verdict(eager, record))
        if mode == "gpe":
            row["sliced"] = sliced_fraction(record.get("stats") or {})
            row["stats"] = record.get("stats")
            row["reasons"] = reasons(record)
            row["warnings"] = record.get("warnings")
        if mode == "gpe-run":
            row["rc"] = record.get("rc")
            row["report"] = record.get("report")
            row["whole"], row["second_half"], row["sliced"] = run_fraction(row["report"])
            step = ((summary["modes"].get("eager") or {}).get("timing") or {}).get("step")
            row["timing"] = {"step": step, "median_ms": run_ms(row["report"], step)}
        if record.get("traceback"):
            row["traceback"] = record["traceback"]
        row["stdout"] = row.get("stdout", None)
        row["stdout_text"] = record.get("stdout", "")
        summary["modes"][mode] = row
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
            json.dump(summary, f, indent=1, default=str)
        with open(os.path.join(out_dir, f"{name}.stderr.txt"), "w") as f:
            for mode, record in records.items():
                f.write(f"===== {mode}\n{record.get('stderr', '')}\n")
    return summary


def ms(row, base=None) -> str:
    t = (row or {}).get("timing") or {}
    if row and row.get("error") and not t.get("median_ms"):
        return "error"
    if not t.get("median_ms"):
        return "-"
    text = f"{t['median_ms']:.2f}"
    base_ms = ((base or {}).get("timing") or {}).get("median_ms")
    if base_ms and base is not row:
        text += f" ({base_ms / t['median_ms']:.1f}x)"
    if t.get("drain_ms") and t["drain_ms"] > 1.5 * t["median_ms"]:
        text += f" [drain {t['drain_ms']:.2f}]"
    return text


def table(summaries) -> str:
    lines = ["| program | eager ms/step | tf.function ms/step (x eager) | tf.function vs eager | "
             "gpe ms/step (x eager) | gpe sliced (steady calls) | gpe vs eager | gpe run | "
             "gpe reasons |", "|" + "---|" * 9]
    for s in summaries:
        m = s["modes"]
        e, t, g, r = (m.get(k) for k in MODES)

        def match(row):
            if not row:
                return "-"
            text = row.get("match", "")
            if row.get("stdout") and row["stdout"] != "identical":
                text += f"; stdout {row['stdout']}"
            return text.replace("|", "/").replace("\n", " ")
        run = "-"
        if r:
            run = f"{ms(r, e)}; " + ("ok, " if not r.get("error") else f"{r['error']}; ") + \
                match(r) + \
                f"; {r.get('sliced', '')}"
        lines.append(" | ".join([
            f"| {s['program']}", ms(e), ms(t, e), match(t), ms(g, e),
            (g or {}).get("sliced", "-"), match(g), run.replace("|", "/"),
            "<br>".join((g or {}).get("reasons") or []).replace("|", "/") or "-"]) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("programs", nargs="+")
    parser.add_argument("--steps", type=int, default=None,
                        help="steps for main() (default: the program's DEFAULT_STEPS)")
    parser.add_argument("--warmup", type=int, default=10,
                        help="calls of the timed step left out of the timing")
    parser.add_argument("--repeats", type=int, default=0,
                        help="timing runs per mode after the correctness run (0: time that)")
    parser.add_argument("--timing-steps", type=int, default=None,
                        help="steps of each timing run (default: twice --steps or DEFAULT_STEPS)")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--adaptive", action="store_true",
                        help="gpe mode: let gpe run a variant eagerly where that is faster")
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "gpe_drive"))
    parser.add_argument("--json", help="also write all summaries to this file")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if "eager" in modes:  # the reference runs first
        modes.remove("eager")
        modes.insert(0, "eager")
    summaries = []
    for program in args.programs:
        summary = drive(program_path(program), modes, args.steps, args.warmup, args.adaptive,
                        args.out, args.repeats, args.timing_steps)
        summaries.append(summary)
        print(table([summary]).splitlines()[-1], flush=True)
    print()
    print(table(summaries))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summaries, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
