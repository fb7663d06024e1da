"""Differential runner: a generated program eagerly and under gpe, everything observable compared.

`check_seed(seed, calls=6)` (in this process) loads the program of `generate.program(seed)`
twice, into two fresh modules (fresh variables, fresh LOG), calls `main` with the same
arguments in both, eagerly in one and wrapped by `gpe.function(..., profile_calls=1,
adaptive=False)` in the other, and compares per call the value returned or the exception
raised (type and message), then the final value of every module-level tf.Variable and of
every variable of a module-level Keras layer or optimizer, the LOG list and the printed
output. Tensors compare by dtype, shape and bits; Python values by exact type and repr (an
int must stay an int, a float a float, not a tensor); containers by their exact type (a
list subclass, a namedtuple) and their items.

`Worker` runs seeds (or sources) in a child process, so that a hang is a finding and not a
stuck test: the child runs the program eagerly first and says so, then under gpe. A
program that does not end eagerly within its own time limit is "broken" (a generator bug,
never a gpe hang); one that ends eagerly but not under gpe within the request's time limit
is a "hang". After either, the child's Python stacks are dumped (faulthandler) and the
child is killed and replaced.
"""
from __future__ import annotations

import contextlib
import inspect
import io
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

from .generate import program

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
ROOT = os.path.dirname(TESTS)

# statuses: "same" (no finding), "diff" (an observable difference), "gpe_error" (gpe raised
# where eager did not, or raised another exception), "hang" (the time limit passed, or gpe's
# own wait watchdog fired), "broken" (the program could not even be loaded, or does not end
# eagerly either: a generator bug)
FINDINGS = ("diff", "gpe_error", "hang")


@dataclass
class Result:
    seed: int | None
    status: str
    detail: str = ""
    mode: str = "main"
    calls: int = 0
    graph_calls: int = 0          # calls of main that ran sliced
    eager_calls: int = 0
    helper_graph_calls: int = 0   # sliced calls of other functions of the program
    fallbacks: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    eager_raised: int = 0         # calls that raised eagerly (compared like results)
    seconds: float = 0.0

    @property
    def finding(self) -> bool:
        return self.status in FINDINGS


def call_args(seed: int, calls: int = 6) -> list[tuple]:
    """The arguments of each call: (x values, n, flag, scale). Two calls with the profile
    call's values, then changed values, a changed n, flag or scale (sometimes to an int or
    a tensor), and a changed shape."""
    import random
    r = random.Random(seed * 7919 + 1)

    def vec(size):
        return [round(r.uniform(-1.5, 1.5), 2) for _ in range(size)]

    x, n, flag, scale = vec(3), r.randint(0, 3), r.random() < 0.5, r.choice([0.5, 1.5, -0.5])
    out = [(x, n, flag, scale), (x, n, flag, scale)]
    while len(out) < calls:
        c = r.randrange(6)
        if c <= 1:
            x = vec(len(x))
        elif c == 2:
            n = r.randint(0, 3)
        elif c == 3:
            flag = not flag
        elif c == 4:
            # mostly a float; sometimes an int or a float32 tensor (["tensor", value])
            scale = r.choice([0.5, 1.5, -0.5, 2.0, 2, ["tensor", 0.5], ["tensor", -1.5]])
        else:
            x = vec(r.choice([2, 4]) if len(x) == 3 else 3)
        out.append((x, n, flag, scale))
    return out[:calls]


# -- what is compared ----------------------------------------------------------------------

def op_error_text(message: str) -> str:
    """A TF op error's own text (eager wraps it in `{{function_node ...}}`; a graph names
    its node at the end)."""
    message = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", message)
    return re.sub(r"\s*name:\s*$", "", message)


def normalise(value: Any) -> Any:
    """A comparable, JSON-able form of a value: exact for tensors (bits) and Python scalars
    (type and repr)."""
    import numpy as np
    import tensorflow as tf
    if isinstance(value, BaseException):
        if isinstance(value, tf.errors.OpError):
            return ["raised", type(value).__name__, op_error_text(value.message)]
        return ["raised", type(value).__name__, str(value)]
    if isinstance(value, (bool, int, float, str, type(None))):
        return ["py", type(value).__name__, repr(value)]
    if isinstance(value, np.generic):
        return ["np", type(value).__name__, repr(value.item()), value.tobytes().hex()]
    if isinstance(value, np.ndarray):
        return ["array", value.dtype.str, list(value.shape), value.tobytes().hex(),
                np.array2string(value)]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [normalise(v) for v in value]]
    if isinstance(value, dict):
        return [type(value).__name__, [[repr(k), normalise(v)] for k, v in value.items()]]
    if tf.is_tensor(value) or hasattr(value, "numpy") and hasattr(value, "dtype"):
        array = np.asarray(value.numpy())
        return ["tensor", tf.as_dtype(value.dtype).name, list(array.shape),
                array.tobytes().hex(), np.array2string(array)]
    return ["obj", type(value).__name__, repr(value)]


def show(norm: Any) -> str:
    """A short readable form of a normalised value."""
    if not isinstance(norm, list) or not norm:
        return repr(norm)
    kind = norm[0]
    if kind == "raised":
        return f"raised {norm[1]}({norm[2]!r})"
    if kind == "py":
        return f"{norm[2]} ({norm[1]})"
    if kind == "np":
        return f"np.{norm[1]}({norm[2]})"
    if kind in ("tensor", "array"):
        return f"{kind}<{norm[1]}{norm[2]}> {norm[4]}"
    if kind in ("list", "tuple"):
        return f"{kind}[{', '.join(show(v) for v in norm[1])}]"
    if kind == "dict":
        return "{" + ", ".join(f"{k}: {show(v)}" for k, v in norm[1]) + "}"
    if len(norm) == 2 and isinstance(norm[1], list):  # a list, tuple or dict subclass
        return f"{kind}[{', '.join(show(v) for v in norm[1])}]"
    return repr(norm)


# -- running a program ---------------------------------------------------------------------

_counter = [0]


def write_source(source: str, tag: str) -> str:
    """A file of its own for each program (inspect and linecache read sources by name)."""
    directory = os.path.join(tempfile.gettempdir(), f"gpe-fuzz-{os.getpid()}")
    os.makedirs(directory, exist_ok=True)
    _counter[0] += 1
    path = os.path.join(directory, f"prog_{tag}_{_counter[0]}.py")
    with open(path, "w") as f:
        f.write(source)
    return path


def load(path: str, name: str):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class Observed:
    results: list
    variables: dict
    log: Any
    stdout: str
    stats: dict | None = None
    helper_graph_calls: int = 0
    warnings: list = field(default_factory=list)


def execute(path: str, args: list[tuple], sliced: bool, mode: str = "main") -> Observed:
    import gpe
    import tensorflow as tf
    from tensorflow.python import pywrap_tfe
    # TensorFlow's eager cache of Python scalars keys them by value, and -0.0 == 0.0: once a
    # program converted -0.0, `tf.constant(0.0)` and `x * 0.0` give -0.0 in this process
    # (eagerly too). Each run starts from an empty cache, so no earlier program's zeros
    # leak into it (seed 21070 after 21008 "differed" in the signs of zeros).
    pywrap_tfe.TFE_ClearScalarCache()
    _counter[0] += 1
    module = load(path, f"gpe_fuzz_{'gpe' if sliced else 'eager'}_{_counter[0]}")
    ns = module.__dict__
    wrapped = {}
    if sliced:
        # the program's functions (not its classes, nor a Keras layer it made: callable
        # objects whose class is the module's)
        names = ["main"] if mode == "main" else [
            k for k, v in ns.items() if inspect.isfunction(v)
            and getattr(v, "__module__", None) == module.__name__]
        for name in names:
            wrapped[name] = ns[name] = gpe.function(ns[name], profile_calls=1, adaptive=False)
    target = ns["main"]
    out = io.StringIO()
    results = []
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out):
        warnings.simplefilter("always")
        for xs, n, flag, scale in args:
            if isinstance(scale, list):
                scale = tf.constant(scale[1], tf.float32)
            try:
                value = target(tf.constant(xs, tf.float32), n, flag, scale)
                results.append(normalise(value))
            except Exception as exc:  # compared like any other result
                results.append(normalise(exc))
        variables = {k: normalise(v.numpy()) for k, v in ns.items() if isinstance(v, tf.Variable)}
        # a module-level Keras layer's weights and an optimizer's state (Keras variables
        # are not tf.Variables), in their order
        if "keras" in sys.modules:  # (not imported for a program without Keras)
            kinds = (tf.keras.layers.Layer, tf.keras.optimizers.Optimizer)
            variables.update({f"{k}.variables": normalise([w.numpy() for w in v.variables])
                              for k, v in ns.items() if isinstance(v, kinds)})
        # the program's plain module state: LOG, and COUNT and STATE where it has them
        log = normalise({k: v for k, v in ns.items() if k.isupper()
                         and isinstance(v, (int, float, list, dict))})
    observed = Observed(results, variables, log, out.getvalue())
    observed.warnings = sorted({str(w.message).splitlines()[0][:200] for w in caught
                                if type(w.message).__name__ == "GpeWarning"})
    if sliced:
        observed.stats = target.stats()
        observed.helper_graph_calls = sum(f.stats()["graph_calls"] for k, f in wrapped.items()
                                          if k != "main")
    sys.modules.pop(module.__name__, None)
    return observed


def compare(eager: Observed, under: Observed) -> tuple[str, str]:
    """(status, detail) of the first difference, or ("same", "")."""
    for i, (a, b) in enumerate(zip(eager.results, under.results)):
        if a != b:
            a_raised = a[0] == "raised"
            b_raised = b[0] == "raised"
            status = "diff"
            if b_raised and (not a_raised or a[1] != b[1]):
                status = "hang" if b[1] == "GpeTimeoutError" else "gpe_error"
            return status, f"call {i}: eager {show(a)}; gpe {show(b)}"
    for name in eager.variables:
        if eager.variables[name] != under.variables.get(name):
            return "diff", (f"variable {name}: eager {show(eager.variables[name])}; "
                            f"gpe {show(under.variables.get(name))}")
    if eager.log != under.log:
        return "diff", f"globals: eager {show(eager.log)}; gpe {show(under.log)}"
    if eager.stdout != under.stdout:
        a, b = eager.stdout.splitlines(), under.stdout.splitlines()
        k = next((i for i, (p, q) in enumerate(zip(a, b)) if p != q), min(len(a), len(b)))
        return "diff", (f"stdout line {k}: eager {a[k] if k < len(a) else '<end>'!r}; "
                        f"gpe {b[k] if k < len(b) else '<end>'!r} "
                        f"({len(a)} vs {len(b)} lines)")
    return "same", ""


def check_source(source: str, args: list[tuple], seed: int | None = None,
                 mode: str = "main", eager_done=None) -> Result:
    """`eager_done(seconds)` is called once the eager run has ended."""
    start = time.perf_counter()
    path = write_source(source, "s" if seed is None else str(seed))
    try:
        eager = execute(path, args, sliced=False)
    except Exception:
        return Result(seed, "broken", traceback.format_exc(limit=3), mode)
    if eager_done is not None:
        eager_done(time.perf_counter() - start)
    try:
        under = execute(path, args, sliced=True, mode=mode)
    except Exception as exc:
        status = "hang" if type(exc).__name__ == "GpeTimeoutError" else "gpe_error"
        return Result(seed, status, "outside a call: " + traceback.format_exc(limit=6), mode,
                      seconds=time.perf_counter() - start)
    status, detail = compare(eager, under)
    stats = under.stats or {}
    return Result(seed, status, detail, mode, calls=stats.get("calls", 0),
                  graph_calls=stats.get("graph_calls", 0),
                  eager_calls=stats.get("eager_calls", 0),
                  helper_graph_calls=under.helper_graph_calls,
                  fallbacks={str(k)[:200]: v for k, v in stats.get("fallbacks", {}).items()},
                  warnings=under.warnings,
                  eager_raised=sum(r[0] == "raised" for r in eager.results),
                  seconds=time.perf_counter() - start)


def mode_of(seed: int) -> str:
    """Odd seeds wrap every function of the program (as `gpe run` does), even seeds only
    main (its callees are then wrapped by gpe itself, as plain functions of its module)."""
    return "all" if seed % 2 else "main"


def check_seed(seed: int, calls: int = 6, eager_done=None) -> Result:
    """Run seed's program eagerly and under gpe in this process and compare."""
    return check_source(program(seed), call_args(seed, calls), seed, mode_of(seed),
                        eager_done)


# -- child processes -----------------------------------------------------------------------

def serve() -> None:
    """A worker's loop: one JSON request a line on stdin; on the reply descriptor a line
    `{"eager_seconds": s}` once the eager run has ended, then the JSON Result a line.
    Anything else the process writes goes to stderr."""
    import faulthandler
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.__stdout__ = os.fdopen(1, "w", closefd=False)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow  # noqa: F401  before the first request's clock starts
    import gpe  # noqa: F401
    reply.write(json.dumps({"ready": True}) + "\n")
    reply.flush()
    def eager_done(seconds: float) -> None:
        reply.write(json.dumps({"eager_seconds": seconds}) + "\n")
        reply.flush()

    for line in sys.stdin:
        request = json.loads(line)
        print(f"== request {request.get('seed')}", file=sys.stderr, flush=True)
        faulthandler.dump_traceback_later(max(request["timeout"] - 3, 1), exit=False)
        try:
            if "source" in request:
                result = check_source(request["source"], [tuple(a) for a in request["args"]],
                                      request.get("seed"), request.get("mode", "main"),
                                      eager_done)
            else:
                result = check_seed(request["seed"], request.get("calls", 6), eager_done)
        except BaseException:  # the runner itself failed: report, keep serving
            result = Result(request.get("seed"), "gpe_error",
                            "runner: " + traceback.format_exc(limit=6))
        faulthandler.cancel_dump_traceback_later()
        reply.write(json.dumps(asdict(result)) + "\n")
        reply.flush()


class Worker:
    """One child process serving requests, replaced after a hang or a crash, and after
    every `recycle` requests (to bound what a long run leaks)."""

    def __init__(self, wait_timeout: float = 30.0, recycle: int = 100, env: dict | None = None):
        self.wait_timeout, self.recycle = wait_timeout, recycle
        self.env = env  # the children's environment (default: this process's, at start)
        self.proc = None
        self.served = 0

    def start(self) -> None:
        env = dict(self.env or os.environ, GPE_WAIT_TIMEOUT=str(self.wait_timeout),
                   TF_CPP_MIN_LOG_LEVEL="2", PYTHONHASHSEED="0")
        import gpe  # the worker imports the gpe this process does (a checkout's, from its root)
        home = os.path.dirname(os.path.dirname(os.path.abspath(gpe.__file__)))
        env["PYTHONPATH"] = os.pathsep.join([home] + [p for p in env.get(
            "PYTHONPATH", "").split(os.pathsep) if p])
        self.stderr = tempfile.NamedTemporaryFile("w+", prefix="gpe-fuzz-worker-",
                                                  suffix=".log", delete=False)
        code = f"import sys; sys.path.insert(0, {TESTS!r}); from fuzz.differential import serve; serve()"
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr,
                                     cwd=TESTS, env=env,
                                     text=True, bufsize=1)
        self.served = 0
        line = self._readline(120)
        if not line:
            raise RuntimeError(f"fuzz worker did not start; see {self.stderr.name}")

    def _readline(self, timeout: float) -> str | None:
        """The worker's next line; None after `timeout` seconds; "" at its end (it died)."""
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        return self.proc.stdout.readline()

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None
            self.stderr.close()
            os.unlink(self.stderr.name)

    def request(self, payload: dict, timeout: float, eager_timeout: float | None = None
                ) -> Result:
        """Run one request: the eager run gets `eager_timeout` seconds (default: half of
        `timeout`), the run under gpe `timeout` seconds more."""
        if self.proc is None or self.proc.poll() is not None or self.served >= self.recycle:
            self.stop()
            self.start()
        self.served += 1
        start = time.perf_counter()
        position = os.path.getsize(self.stderr.name)
        eager_timeout = timeout / 2 if eager_timeout is None else eager_timeout
        self.proc.stdin.write(json.dumps(dict(payload, timeout=eager_timeout + timeout)) + "\n")
        self.proc.stdin.flush()
        line = self._readline(eager_timeout)
        eager_ended = bool(line) and "eager_seconds" in json.loads(line)
        if eager_ended:
            line = self._readline(timeout)
        if line:
            return Result(**json.loads(line))
        return self._failed(payload, line == "", eager_ended, eager_timeout, timeout,
                            position, start)

    def _failed(self, payload: dict, died: bool, eager_ended: bool, eager_timeout: float,
                timeout: float, position: int, start: float) -> Result:
        """The result of a request the worker did not answer: it died (its output ended: a
        crash) or it ran out of time (a hang); killed and replaced either way."""
        if died:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
            code = self.proc.poll()
            died_how = (f"signal {signal.Signals(-code).name}" if code is not None and code < 0
                        else f"exit status {code}")
        with open(self.stderr.name) as f:
            f.seek(position)
            tail = f.read()[-6000:]
        self.stop()
        if not eager_ended:  # not gpe's doing
            status, what = "broken", (
                f"the worker died in the eager run ({died_how})" if died else
                f"the program did not end eagerly in {eager_timeout:.0f} s (a generator bug, "
                "not a gpe hang)")
        elif died:
            status, what = "gpe_error", f"crash: the worker died under gpe ({died_how})"
        else:
            status, what = "hang", f"no answer in {timeout:.0f} s under gpe (eager ended)"
        seed = payload.get("seed")
        mode = payload.get("mode") or (mode_of(seed) if seed is not None else "main")
        return Result(seed, status, f"{what}; worker stderr:\n{tail}", mode,
                      seconds=time.perf_counter() - start)


def run_seeds(seeds, timeout: float = 90.0, calls: int = 6, progress=None,
              recycle: int = 100, env: dict | None = None) -> list[Result]:
    """Each seed in a child process (one child for `recycle` seeds; a new one after a hang
    or a crash)."""
    worker = Worker(recycle=recycle, env=env)
    results = []
    try:
        for seed in seeds:
            result = worker.request({"seed": seed, "calls": calls}, timeout)
            results.append(result)
            if progress:
                progress(result)
    finally:
        worker.stop()
    return results
