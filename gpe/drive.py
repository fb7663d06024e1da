"""Run a program one way in a child process and bring back what it observed.

The program contract (used by `gpe bench` and examples/_drive.py): a Python file with a
top-level `main(steps)` whose return value holds what should match eager (the examples
return {"losses", "weights", "state"}: any nesting of lists, tuples, dicts, numbers,
strings, NumPy arrays and tensors works), and step functions: module-level functions or
methods of the file's own classes named `train_step` or `*_step`, or those the file names
in `STEP_FUNCTIONS = ["fn", "Class.method"]`. `main` must look them up when it calls them
(as ordinary code does), so that replacing them on the module or class takes effect.
Optional: `DEFAULT_STEPS` (an int), `TIMED_STEP` (the step whose calls are timed; default
`train_step`, else the first found).

The ways (MODES): eager (as written); tf.function (every step function replaced by
`tf.function(fn)`); gpe (by `gpe.function(fn)`); gpe-run (`gpe run --report` of the
unmodified file, which must accept `--steps N --dump FILE`, as the examples do).
The child records, per step function, each call's start time, duration and what gpe or
tf.function did in it (KINDS), main's result made plain (NumPy), its printed output, any
error, gpe's stats() and warnings, and (gpe, after main) `calibrate`'s timings of plain
against gpe calls of the steps gpe runs eagerly; it pickles the record to a file.

    python -m gpe.drive MODE PROGRAM RESULT_FILE [--steps N] [--no-adaptive]

(run it with a working directory outside the repository: its folder gpe/ would shadow the
installed package).
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import inspect
import io
import os
import pickle
import re
import subprocess
import sys
import time
import traceback
import warnings

MODES = ("eager", "tf.function", "gpe", "gpe-run")
CHILD_TIMEOUT = 600  # seconds a way may take (a hang must end)
CALIBRATION_PAIRS = 12  # gpe mode, after main: plain and gpe calls, alternated
# what one call of a step function did: eager mode's plain call, tf.function's steady call
# or one that traced, gpe's sliced call, profile call, eager call (a fallback, or the
# adaptive choice), or a call that built a variant
KINDS = {"call": "c", "traced": "t", "sliced": "s", "profile": "p", "eager": "e",
         "built": "b"}


class ProgramError(Exception):
    """The program does not follow the contract (no main, no step functions...)."""


def is_step_name(name: str) -> bool:
    return name == "train_step" or name.endswith("_step")


def check_program(path: str) -> dict:
    """Read the program's source (no import, no TensorFlow) and check the contract; returns
    {"default_steps": int | None}. Raises ProgramError with a one-line reason."""
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        tree = ast.parse(source, path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ProgramError(f"cannot read {path}: {exc}") from None
    except SyntaxError as exc:
        raise ProgramError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None
    top = {node.name: node for node in tree.body
           if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    main = top.get("main")
    if not isinstance(main, ast.FunctionDef):
        raise ProgramError(f"{path} has no top-level function main(steps): gpe bench calls "
                           f"main(steps) and compares what it returns")
    if not main.args.args and not main.args.vararg:
        raise ProgramError(f"{path}: main() takes no argument; gpe bench calls main(steps)")
    listed = re.search(r"^STEP_FUNCTIONS\s*=", source, re.M)
    steps = [name for name, node in top.items()
             if isinstance(node, ast.FunctionDef) and is_step_name(name)]
    steps += [f"{cls}.{node.name}" for cls, c in top.items() if isinstance(c, ast.ClassDef)
              for node in c.body if isinstance(node, ast.FunctionDef) and is_step_name(node.name)]
    if not steps and not listed:
        raise ProgramError(f"{path} has no step function: name it train_step or *_step (a "
                           f"top-level function or a method of a top-level class), or list "
                           f"them in STEP_FUNCTIONS")
    found = re.search(r"^DEFAULT_STEPS\s*=\s*(\d+)", source, re.M)
    return {"default_steps": int(found.group(1)) if found else None}


def default_steps(path: str) -> int | None:
    """The program's DEFAULT_STEPS, read from its source (the parent imports no TF)."""
    with open(path) as f:
        found = re.search(r"^DEFAULT_STEPS\s*=\s*(\d+)", f.read(), re.M)
    return int(found.group(1)) if found else None


# --- the child: one way, in this process ----------------------------------------------------

def _counters(fn):
    """A snapshot of what `fn` (a gpe or tf.function callable) has done so far."""
    stats = getattr(fn, "stats_", None)
    if stats is None:  # a bound gpe method holds its function
        stats = getattr(getattr(fn, "_sliced", None), "stats_", None)
    if stats is not None:
        return (stats.graph_calls, stats.profile_calls, stats.eager_calls, stats.variants)
    count = getattr(fn, "experimental_get_tracing_count", None)
    return (count(),) if count is not None else ()


def _kind(before: tuple, after: tuple) -> str:
    if not before:
        return KINDS["call"]
    if len(before) == 1:
        return KINDS["traced" if after[0] > before[0] else "call"]
    if after[3] > before[3]:
        return KINDS["built"]
    for i, kind in ((1, "profile"), (0, "sliced"), (2, "eager")):
        if after[i] > before[i]:
            return KINDS[kind]
    return KINDS["call"]


class Timed:
    """Records each call's start, duration and kind, then calls `inner` (a function, a
    tf.function or a gpe function); as a class attribute it binds through `inner`'s own
    descriptor, as the decorated method would. Keeps the last call's callables (`inner`
    and the plain function, bound alike) and arguments for `calibrate`."""

    def __init__(self, inner, record: dict, plain=None):
        self.inner, self.record, self.plain = inner, record, plain
        self.last = None

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        bound = self.inner.__get__(obj, objtype)
        plain = None if self.plain is None else self.plain.__get__(obj, objtype)
        return lambda *args, **kwargs: self._call(bound, plain, args, kwargs)

    def __call__(self, *args, **kwargs):
        return self._call(self.inner, self.plain, args, kwargs)

    def _call(self, fn, plain, args, kwargs):
        record = self.record
        self.last = (fn, plain, args, kwargs)
        start = time.perf_counter()
        record["starts"].append(start)
        before = _counters(fn)
        try:
            return fn(*args, **kwargs)
        finally:
            record["durations"].append(time.perf_counter() - start)
            record["kinds"].append(_kind(before, _counters(fn)))


def _timed_call(fn, args, kwargs) -> tuple[float, str]:
    before = _counters(fn)
    start = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - start, _kind(before, _counters(fn))


def calibrate(timed: dict, pairs: int = CALIBRATION_PAIRS) -> dict:
    """After main (its results already taken): for each step function gpe ran eagerly
    after its profile calls, alternate `pairs` calls of the plain function and of the gpe
    function on the last call's arguments, output discarded. The gpe calls that ran
    eagerly against the plain ones, in one process, give the per-call cost of gpe's
    bookkeeping where it does not slice. {label: {"plain_s": [...], "gpe_eager_s": [...]}
    or {"error": ...}}."""
    found = {}
    for label, t in timed.items():
        if t.last is None or KINDS["eager"] not in t.record["kinds"] or t.last[1] is None:
            continue
        fn, plain, args, kwargs = t.last
        plain_s, gpe_s = [], []
        try:
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for _ in range(pairs):
                    plain_s.append(_timed_call(plain, args, kwargs)[0])
                    took, kind = _timed_call(fn, args, kwargs)
                    if kind == KINDS["eager"]:
                        gpe_s.append(took)
        except Exception as exc:  # noqa: BLE001 - a step that fails when called again
            found[label] = {"error": short_error(exc)}
            continue
        found[label] = {"plain_s": plain_s, "gpe_eager_s": gpe_s}
    return found


def load_program(path: str):
    sys.path.insert(0, os.path.dirname(path))
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def step_functions(module):
    """[(label, owner, attribute name, function)]: the functions STEP_FUNCTIONS names, else
    module-level step functions and step methods of the module's own classes."""
    listed = getattr(module, "STEP_FUNCTIONS", None)
    if listed is not None:
        found = []
        for label in listed:
            owner_name, _, attr = label.rpartition(".")
            owner = getattr(module, owner_name) if owner_name else module
            found.append((label, owner, attr, vars(owner)[attr]))
        return found
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
    """Observables in a picklable, comparable form (tensors, variables and gpe's lazy values
    become NumPy arrays)."""
    if hasattr(value, "numpy") and callable(value.numpy):
        return value.numpy()
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def _wrap_steps(module, mode: str, adaptive: bool) -> tuple[dict, dict, dict]:
    import tensorflow as tf
    from .api import function as gpe_function
    calls, wrapped, timed = {}, {}, {}
    for label, owner, attr, fn in step_functions(module):
        if mode == "tf.function":
            inner = tf.function(fn)
        elif mode == "gpe":
            inner = wrapped[label] = gpe_function(fn, adaptive=adaptive)
        else:
            inner = fn
        calls[label] = {"starts": [], "durations": [], "kinds": []}
        timed[label] = Timed(inner, calls[label], fn if mode == "gpe" else None)
        setattr(owner, attr, timed[label])
    return calls, wrapped, timed


def short_error(exc: BaseException) -> str:
    """`Type: message`, the message's last line only (TF's "in user code:" prefix and
    its source excerpt left out; the traceback keeps them)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    name = type(exc).__name__
    return (last if last.startswith(name + ":") else f"{name}: {last}")[:300]


def child(mode: str, path: str, steps: int | None, adaptive: bool, result_file: str) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from .host.diagnostics.stats import GpeWarning
    module = load_program(path)
    steps = steps if steps is not None else getattr(module, "DEFAULT_STEPS", 100)
    calls, wrapped, timed = _wrap_steps(module, mode, adaptive)
    out = io.StringIO()
    error = result = tb = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", GpeWarning)
        start = time.perf_counter()
        try:
            with contextlib.redirect_stdout(out):
                result = plain(module.main(steps))
        except BaseException as exc:  # noqa: BLE001 - reported, not handled
            error = short_error(exc)
            tb = traceback.format_exc()
        end = time.perf_counter()
    stats = {label: fn.stats() for label, fn in wrapped.items()}  # before calibrate's calls
    record = {
        "mode": mode, "steps": steps, "result": result, "stdout": out.getvalue(),
        "error": error, "traceback": tb, "start": start, "end": end, "calls": calls,
        "stamps": {label: c["starts"] for label, c in calls.items()},
        "timed": getattr(module, "TIMED_STEP", None),
        "stats": stats, "calibration": calibrate(timed) if error is None else {},
        "warnings": sorted({str(w.message) for w in caught
                            if issubclass(w.category, GpeWarning)}),
    }
    with open(result_file, "wb") as f:
        pickle.dump(record, f)


# --- the parent: start a child, read its record -------------------------------------------

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


def _command(mode, path, steps, adaptive, result_file) -> list[str]:
    if mode == "gpe-run":
        command = [sys.executable, "-m", "gpe.cli", "run", "--report", path,
                   "--dump", result_file + ".dump"]
        return command + (["--steps", str(steps)] if steps is not None else [])
    return [sys.executable, "-m", "gpe.drive", mode, path, result_file] + \
        (["--steps", str(steps)] if steps is not None else []) + \
        ([] if adaptive else ["--no-adaptive"])


def _gpe_run_record(proc, result_file: str, wall: float) -> dict:
    record = {"mode": "gpe-run", "stdout": proc.stdout, "stderr": proc.stderr,
              "rc": proc.returncode, "result": None, "error": None, "wall": wall}
    if os.path.exists(result_file + ".dump"):
        with open(result_file + ".dump", "rb") as f:
            record["result"] = pickle.load(f)
    if proc.returncode != 0:
        record["error"] = f"exit {proc.returncode}: {last_error_line(proc.stderr)}"
    record["report"] = gpe_report(proc.stderr)
    return record


def run_mode(mode: str, path: str, steps: int | None, adaptive: bool, workdir: str,
             timeout: float = CHILD_TIMEOUT, tag: str = "") -> dict:
    """Run `path` one way in a child process (working directory `workdir`, not the
    repository root: its folder gpe/ would shadow the installed package) and return the
    child's record, or one with "error" set where the child failed or timed out."""
    result_file = os.path.join(workdir, f"{os.path.basename(path)}.{mode}{tag}.pkl")
    for stale in (result_file, result_file + ".dump"):  # a dead child must not leave
        if os.path.exists(stale):                      # an earlier run's record behind
            os.remove(stale)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", GPE_WAIT_TIMEOUT="120")
    start = time.perf_counter()
    try:
        proc = subprocess.run(_command(mode, path, steps, adaptive, result_file),
                              capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=workdir)
    except subprocess.TimeoutExpired as exc:
        return {"mode": mode, "error": f"timeout: no result after {timeout:.0f} s (hang?)",
                "stdout": exc.stdout or "", "stderr": exc.stderr or "", "result": None}
    wall = time.perf_counter() - start
    if mode == "gpe-run":
        return _gpe_run_record(proc, result_file, wall)
    if not os.path.exists(result_file):
        return {"mode": mode, "error": f"child died (exit {proc.returncode}): "
                                       f"{last_error_line(proc.stderr)}",
                "stdout": proc.stdout, "stderr": proc.stderr, "result": None}
    with open(result_file, "rb") as f:
        record = pickle.load(f)
    record["stderr"], record["wall"] = proc.stderr, wall
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpe.drive",
                                     description="run a program one way (a child of gpe bench)")
    parser.add_argument("mode", choices=[m for m in MODES if m != "gpe-run"])
    parser.add_argument("program")
    parser.add_argument("result")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--no-adaptive", action="store_true")
    args = parser.parse_args(argv)
    child(args.mode, os.path.abspath(args.program), args.steps, not args.no_adaptive,
          args.result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
