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
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import inspect
import io
import json
import math
import os
import pickle
import re
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODES = ("eager", "tf.function", "gpe", "gpe-run")
CHILD_TIMEOUT = 600  # seconds a mode may take (gpe has known hangs)
RTOL_CLOSE = 1e-4    # "close": every float within this relative difference
SCALE_FLOOR = 1e-2   # ... of max(|a|, |b|, SCALE_FLOOR): tiny values compare absolutely


def is_step_name(name: str) -> bool:
    return name == "train_step" or name.endswith("_step")


def default_steps(path: str) -> int | None:
    """The program's DEFAULT_STEPS, read from its source (the parent imports no TF)."""
    with open(path) as f:
        found = re.search(r"^DEFAULT_STEPS\s*=\s*(\d+)", f.read(), re.M)
    return int(found.group(1)) if found else None


def program_path(name: str) -> str:
    if not name.endswith(".py"):
        name = os.path.join(HERE, name + ".py")
    return os.path.abspath(name)


# --- the child: one mode in this process ---------------------------------------------------

class Timed:
    """Records the time of every call, then calls `inner` (a function, a tf.function or a
    gpe function); as a class attribute it binds through `inner`'s own descriptor, as the
    decorated method would."""

    def __init__(self, inner, stamps: list):
        self.inner, self.stamps = inner, stamps

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        bound, stamps = self.inner.__get__(obj, objtype), self.stamps

        def call(*args, **kwargs):
            stamps.append(time.perf_counter())
            return bound(*args, **kwargs)
        return call

    def __call__(self, *args, **kwargs):
        self.stamps.append(time.perf_counter())
        return self.inner(*args, **kwargs)


def load_program(path: str):
    sys.path.insert(0, os.path.dirname(path))
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def step_functions(module):
    """[(label, owner, attribute name, function)]: module-level step functions and step
    methods of the module's own classes."""
    found = []
    for name, obj in list(vars(module).items()):
        if inspect.isfunction(obj) and obj.__module__ == module.__name__ and is_step_name(name):
            found.append((name, module, name, obj))
        elif inspect.isclass(obj) and obj.__module__ == module.__name__:
            for attr, value in list(vars(obj).items()):
                if inspect.isfunction(value) and is_step_name(attr):
                    found.append((f"{name}.{attr}", obj, attr, value))
    return found


def plain(value):
    """Observables in a picklable, comparable form (tensors and gpe's lazy values become
    NumPy arrays)."""
    if hasattr(value, "numpy") and callable(value.numpy):
        return value.numpy()
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def child(mode: str, path: str, steps: int | None, adaptive: bool, result_file: str) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import gpe  # installed (the repository root would shadow it with its API folder)
    module = load_program(path)
    steps = steps if steps is not None else module.DEFAULT_STEPS
    stamps, wrapped = {}, {}
    for label, owner, attr, fn in step_functions(module):
        if mode == "tf.function":
            inner = tf.function(fn)
        elif mode == "gpe":
            inner = gpe.function(fn, adaptive=adaptive)
            wrapped[label] = inner
        else:
            inner = fn
        stamps[label] = []
        setattr(owner, attr, Timed(inner, stamps[label]))
    out = io.StringIO()
    error = result = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", gpe.GpeWarning)
        start = time.perf_counter()
        try:
            with contextlib.redirect_stdout(out):
                result = plain(module.main(steps))
        except BaseException as exc:  # noqa: BLE001 - reported, not handled
            error = f"{type(exc).__name__}: {exc}"
            tb = traceback.format_exc()
        end = time.perf_counter()
    record = {
        "mode": mode, "steps": steps, "result": result, "stdout": out.getvalue(),
        "error": error, "traceback": tb if error else None, "start": start, "end": end,
        "stamps": stamps, "timed": getattr(module, "TIMED_STEP", None),
        "stats": {label: fn.stats() for label, fn in wrapped.items()},
        "warnings": sorted({str(w.message) for w in caught
                            if issubclass(w.category, gpe.GpeWarning)}),
    }
    with open(result_file, "wb") as f:
        pickle.dump(record, f)


# --- the parent: run the modes, compare, report --------------------------------------------

def run_mode(mode: str, path: str, steps: int | None, adaptive: bool, workdir: str) -> dict:
    result_file = os.path.join(workdir, f"{os.path.basename(path)}.{mode}.pkl")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", GPE_WAIT_TIMEOUT="120")
    python = sys.executable
    if mode == "gpe-run":
        dump = result_file + ".dump"
        command = [python, "-m", "gpe.cli", "run", "--report", path, "--dump", dump]
        if steps is not None:
            command += ["--steps", str(steps)]
    else:
        command = [python, os.path.abspath(__file__), "--child", mode, path,
                   "--result", result_file] + (["--steps", str(steps)] if steps else []) + \
                  (["--adaptive"] if adaptive else [])
    start = time.perf_counter()
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=CHILD_TIMEOUT,
                              env=env, cwd=workdir)  # not the repository root: its
        # folder gpe/ would shadow the installed namespace for `python -m gpe.cli`
    except subprocess.TimeoutExpired as exc:
        return {"mode": mode, "error": f"timeout: no result after {CHILD_TIMEOUT} s (hang?)",
                "stdout": exc.stdout or "", "stderr": exc.stderr or "", "result": None}
    wall = time.perf_counter() - start
    if mode == "gpe-run":
        record = {"mode": mode, "stdout": proc.stdout, "stderr": proc.stderr,
                  "rc": proc.returncode, "result": None, "error": None, "wall": wall}
        if os.path.exists(dump):
            with open(dump, "rb") as f:
                record["result"] = pickle.load(f)
        if proc.returncode != 0:
            record["error"] = f"exit {proc.returncode}: {last_error_line(proc.stderr)}"
        record["report"] = gpe_report(proc.stderr)
        return record
    if not os.path.exists(result_file):
        return {"mode": mode, "error": f"child died (exit {proc.returncode}): "
                                       f"{last_error_line(proc.stderr)}",
                "stdout": proc.stdout, "stderr": proc.stderr, "result": None}
    with open(result_file, "rb") as f:
        record = pickle.load(f)
    record["stderr"] = proc.stderr
    record["wall"] = wall
    return record


def last_error_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines()
             if line and not line.startswith((" ", "WARNING", "I0000", "E0000", "W0000"))]
    errors = [line for line in lines if re.match(r"^[A-Za-z_.]*(Error|Exception|Exit)\b", line)
              or re.match(r"^[A-Za-z_.]+: ", line)]
    return (errors or lines or ["(no output)"])[-1][:300]


def gpe_report(stderr: str) -> list[str]:
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("gpe report"):
            return lines[i:]
    return []


def compare(a, b, where="") -> tuple[str, float, str]:
    """("identical" | "close" | "differs", max relative difference, first difference)."""
    import numpy as np
    if isinstance(a, (float, np.floating)) and isinstance(b, (float, np.floating, int)) or \
            isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        x, y = np.asarray(a), np.asarray(b)
        if x.shape != y.shape or x.dtype.kind != y.dtype.kind:
            return "differs", math.inf, f"{where}: {x.dtype}{x.shape} vs {y.dtype}{y.shape}"
        if x.dtype.kind not in "fc":
            if np.array_equal(x, y):
                return "identical", 0.0, ""
            i = np.argwhere(x != y)[0]
            return "differs", math.inf, f"{where}{list(i)}: {x[tuple(i)]} vs {y[tuple(i)]}"
        if np.array_equal(x, y, equal_nan=True):
            return "identical", 0.0, ""
        with np.errstate(all="ignore"):
            diff = np.abs(x - y) / np.maximum(np.maximum(np.abs(x), np.abs(y)), SCALE_FLOOR)
        diff = np.where(np.isnan(x) & np.isnan(y), 0.0, diff)
        diff = np.where(np.isnan(diff), np.inf, diff)
        worst = float(diff.max())
        i = np.unravel_index(int(diff.argmax()), diff.shape) if diff.shape else ()
        text = f"{where}{list(i) if i else ''}: {x[i]!r} vs {y[i]!r}"
        return ("close" if worst <= RTOL_CLOSE else "differs"), worst, text
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return "differs", math.inf, f"{where}: length {len(a)} vs {len(b)}"
        return merge([compare(x, y, f"{where}[{i}]") for i, (x, y) in enumerate(zip(a, b))])
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return "differs", math.inf, f"{where}: keys {sorted(a)} vs {sorted(b)}"
        return merge([compare(a[k], b[k], f"{where}.{k}") for k in a])
    if type(a) is not type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        return "differs", math.inf, f"{where}: {type(a).__name__} vs {type(b).__name__}"
    if a == b:
        return "identical", 0.0, ""
    return "differs", math.inf, f"{where}: {a!r} vs {b!r}"[:200]


def merge(parts):
    order = {"identical": 0, "close": 1, "differs": 2}
    status = max((p[0] for p in parts), key=order.get, default="identical")
    worst = max((p[1] for p in parts), default=0.0)
    first = next((p[2] for p in parts if p[0] == status and p[2]), "")
    return status, worst, first


NUMBER = re.compile(r"-?\d+\.?\d*(?:e[-+]?\d+)?")


def compare_stdout(a: str, b: str) -> str:
    if a == b:
        return "identical"
    if NUMBER.sub("#", a) == NUMBER.sub("#", b):
        xs = [float(v) for v in NUMBER.findall(a)]
        ys = [float(v) for v in NUMBER.findall(b)]
        worst = max(abs(x - y) / max(abs(x), abs(y), 1e-6) for x, y in zip(xs, ys))
        return f"numbers differ (max rel {worst:.1e})"
    la, lb = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return f"differs at line {i + 1}: {x!r} vs {y!r}"
    return f"differs: {len(la)} lines vs {len(lb)}"


def timing(record: dict, warmup: int) -> dict:
    stamps = record.get("stamps") or {}
    name = record.get("timed") or ("train_step" if "train_step" in stamps else None)
    if name is None:
        name = next((k for k in stamps if k.endswith(".train_step")),
                    next((k for k, v in stamps.items() if v), None))
    calls = stamps.get(name) or []
    if len(calls) < warmup + 3:
        return {"step": name, "median_ms": None, "drain_ms": None, "calls": len(calls)}
    intervals = [b - a for a, b in zip(calls[warmup:], calls[warmup + 1:])]
    drain = (record["end"] - calls[warmup]) / (len(calls) - warmup)
    return {"step": name, "median_ms": statistics.median(intervals) * 1e3,
            "drain_ms": drain * 1e3, "calls": len(calls)}


def verdict(eager: dict, other: dict) -> dict:
    if other.get("error") and other.get("result") is None:
        return {"match": f"error: {other['error']}"}
    out = {}
    if eager.get("result") is None:
        return {"match": "no eager result"}
    parts = {k: compare(eager["result"][k], other["result"][k], k)
             for k in ("losses", "weights", "state")}
    status, worst, first = merge(list(parts.values()))
    if status == "identical":
        out["match"] = "identical"
    elif status == "close":
        out["match"] = f"close (max rel {worst:.1e})"
    else:
        out["match"] = "DIFFERS: " + "; ".join(
            f"{k} {p[0]}" + (f" ({p[2]})" if p[0] == "differs" else "")
            for k, p in parts.items() if p[0] != "identical")
    out["parts"] = {k: p[0] for k, p in parts.items()}
    out["stdout"] = compare_stdout(eager.get("stdout", ""), other.get("stdout", ""))
    if other.get("error"):
        out["match"] += f"; then error: {other['error']}"
    return out


def sliced_fraction(stats: dict) -> str:
    parts = []
    for label, s in stats.items():
        steady = s["calls"] - min(s["calls"], 3)
        frac = s["graph_calls"] / steady if steady else 0.0
        parts.append(f"{label} {s['graph_calls']}/{steady} ({frac:.0%})")
    return ", ".join(parts) or "-"


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
            run = ("ok, " if not r.get("error") else f"{r['error']}; ") + match(r)
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
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, program_path(args.programs[0]), args.steps, args.adaptive,
              args.result)
        return 0
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
