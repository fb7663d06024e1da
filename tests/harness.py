"""Differential testing: run a program eagerly and under gpe, compare everything observable.

A program is a factory `make(log) -> (fn, variables)` that builds fresh state each time:
`fn` is the function under test, `variables` a dict of the tf.Variables it may change,
and `log` a list the function may append side effects to. Printed output is captured.
"""
from __future__ import annotations

import collections
import contextlib
import inspect
import io
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import tensorflow as tf

import gpe
from gpe import cli
from gpe.host.runtime.opcount import eager_ops, user_ops


@dataclass
class Run:
    results: list
    variables: dict
    log: list
    stdout: str
    target: Any = None
    host_ops: dict = field(default_factory=dict)


def plain(value: Any) -> Any:
    """A comparable form: tensors (and Pendings) become (dtype, ndarray)."""
    if hasattr(value, "_gpe_pending"):
        value = value.resolve()
    if isinstance(value, (tf.Tensor, tf.Variable)):
        return ("tensor", value.dtype.name, value.numpy())
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value)
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, tf.errors.OpError):
        return ("raised", type(value).__name__, op_error_text(value.message))
    if isinstance(value, BaseException):
        return ("raised", type(value).__name__, str(value))
    if inspect.isgenerator(value):
        return ("generator", plain(list(value)))
    return value


def op_error_text(message: str) -> str:
    """A TF op error's own text: eager wraps it in `{{function_node ...}} ... name: `, a graph
    names the node; the op's message and `[Op:Type]` are what both share."""
    message = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", message)
    return re.sub(r"\s*name:\s*$", "", message)


def same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@dataclass(frozen=True)
class Var:
    """In a call's arguments: the program's variable of this name (from fresh state)."""

    name: str


def run(make: Callable, calls: list[tuple] | None, sliced: bool, **options) -> Run:
    """`make(log)` may also return the calls, as a third item (used when `calls` is None):
    arguments that are part of the program's fresh state (its objects) belong there."""
    log: list = []
    made = make(log)
    fn, variables = made[0], made[1]
    if calls is None:
        calls = made[2]
    # one profile call (not gpe's default 3) unless a test asks: the slicing tests count
    # sliced calls as "all but the first"; tests of speculation use the default
    options.setdefault("profile_calls", 1)
    target = gpe.function(fn, **options) if sliced else fn
    out = io.StringIO()
    results: list = []
    host_ops: dict = {}
    with contextlib.redirect_stdout(out):
        for i, args in enumerate(calls):
            kwargs = {}
            if args and isinstance(args[-1], dict) and args[-1].get("__kwargs__"):
                kwargs = {k: v for k, v in args[-1].items() if k != "__kwargs__"}
                args = args[:-1]
            args = tuple(variables[a.name] if isinstance(a, Var) else a for a in args)
            counter = eager_ops() if sliced else contextlib.nullcontext(None)
            graph_calls = target.stats()["graph_calls"] if sliced else 0
            with counter as counts:
                try:
                    results.append(plain(target(*args, **kwargs)))
                except Exception as exc:  # compared like any other result
                    results.append(plain(exc))
            # only calls that ran sliced count (a new signature's profile call is eager)
            if counts is not None and target.stats()["graph_calls"] > graph_calls:
                for op, n in user_ops(counts).items():
                    host_ops[op] = host_ops.get(op, 0) + n
    variables = {k: v.numpy() for k, v in variables.items()}
    return Run(results, variables, plain(log), out.getvalue(), target, host_ops)


def check(make: Callable, calls: list[tuple] | None, graph_calls: int | None = None,
          host_ops_allowed: frozenset = frozenset(), **options) -> Run:
    """Assert gpe matches eager on `calls`; return the gpe run for further checks.

    graph_calls: how many calls must have run sliced (default: all but the profile call).
    host_ops_allowed: TF op types that may run eagerly on the host after the first call.
    """
    eager = run(make, calls, sliced=False)
    under = run(make, calls, sliced=True, **options)
    for i, (a, b) in enumerate(zip(eager.results, under.results)):
        assert same(a, b), f"call {i}: eager returned {a!r}, gpe returned {b!r}"
    assert eager.variables.keys() == under.variables.keys()
    for name in eager.variables:
        assert same(eager.variables[name], under.variables[name]), (
            f"variable {name}: eager {eager.variables[name]!r}, gpe {under.variables[name]!r}")
    assert same(eager.log, under.log), f"side effects: eager {eager.log!r}, gpe {under.log!r}"
    assert eager.stdout == under.stdout, f"printed: eager {eager.stdout!r}, gpe {under.stdout!r}"
    stats = under.target.stats()
    expected = len(eager.results) - 1 if graph_calls is None else graph_calls
    assert stats["graph_calls"] == expected, f"expected {expected} sliced calls: {stats}"
    unexpected = {op: n for op, n in under.host_ops.items() if op not in host_ops_allowed}
    assert not unexpected, f"TF ops ran eagerly on the host under gpe: {unexpected}"
    return under


def python_calls(fn, *args) -> dict:
    """{file:function: n} of the Python functions (and C functions) one call of fn runs."""
    seen: collections.Counter = collections.Counter()

    def profile(frame, event, arg):
        if event == "call":
            code = frame.f_code
            seen[f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}"] += 1
        elif event == "c_call":
            seen["C:" + getattr(arg, "__name__", "?")] += 1
    sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return dict(seen)


def differential(program) -> list:
    """`program(wrap, log) -> (results, variables)` run with `wrap` the identity and with
    `wrap` = gpe.function(profile_calls=1, adaptive=False): everything observable must
    match. Returns the functions gpe wrapped."""
    def observe(sliced):
        made, log, out = [], [], io.StringIO()

        def wrap(fn):
            if sliced:
                made.append(gpe.function(fn, profile_calls=1, adaptive=False))
            return made[-1] if sliced else fn
        with contextlib.redirect_stdout(out):
            results, variables = program(wrap, log)
        return (plain(results), {k: v.numpy() for k, v in variables.items()}, plain(log),
                out.getvalue()), made
    eager, _ = observe(False)
    under, made = observe(True)
    for what, a, b in zip(("results", "variables", "side effects", "printed"), eager, under):
        assert same(a, b), f"{what}: eager {a!r}, gpe {b!r}"
    return made


def gpe_cli(cwd, *args) -> tuple[int, str]:
    """`gpe ARGS` run in this process from `cwd` (gpe.cli.main, as `python -m gpe.cli` runs
    it; tests/test_run.py runs that entry point itself): (exit status, stderr). An exception
    main lets out is raised here, where the command would have printed a traceback."""
    here, path, err = os.getcwd(), list(sys.path), io.StringIO()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                status = cli.main(list(args))
            except SystemExit as exc:  # argparse's errors
                status = exc.code
    finally:
        os.chdir(here)
        sys.path[:] = path  # `explain FILE:...` puts FILE's folder first
    return status, err.getvalue()

