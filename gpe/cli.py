"""The `gpe` command."""
from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import sys


class Usage(Exception):
    """Bad input on the command line: reported as one `gpe: ...` line, exit status 2."""


def _file(path: str) -> None:
    if not os.path.exists(path):
        raise Usage(f"no such file: {path}")
    if not os.path.isfile(path):
        raise Usage(f"not a file: {path}")


def _load_target(target: str):
    path, _, name = target.rpartition(":")
    if not path or not name:
        raise Usage(f"expected FILE:FUNCTION, got {target!r}")
    _file(path)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec = importlib.util.spec_from_file_location("_gpe_target", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    obj = module
    for part in name.split("."):
        if not hasattr(obj, part):
            raise Usage(f"{path} has no function {name!r}")
        obj = getattr(obj, part)
    if not _is_function(obj):
        raise Usage(f"{path}: {name!r} is not a function (it is {type(obj).__name__!r})")
    return obj


def _is_function(obj) -> bool:
    """A Python function or method, possibly wrapped (by @gpe.function or functools)."""
    target = getattr(obj, "__func__", obj)
    try:
        target = inspect.unwrap(target)
    except ValueError:
        return False
    return inspect.isfunction(target)


def _explain(args) -> int:
    from .api import explain
    explain(_load_target(args.target))
    return 0


def _run(args) -> int:
    from .run import print_script_error, report, run_script
    if args.script is None:
        args.parser.error("the following arguments are required: SCRIPT")
    _file(args.script)
    calls = _profile_calls(args)
    status = 0
    observed = None
    try:
        if args.report or args.profile:  # the host's time, a TensorBoard profile
            from .observe import Observed
            observed = Observed(args.report, args.profile, calls, args.profile_skip)
            with observed.running():
                run_script(args.script, args.args)
        else:
            run_script(args.script, args.args)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code not in (None, 0) and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except Exception as exc:  # the script's error, told as Python would tell it
        print_script_error(exc, args.script)
        status = 1
    finally:
        if args.report:
            print(report(), file=sys.stderr)
        if observed is not None:
            from .observe import tell
            tell(observed)
    return status


def _profile_calls(args) -> int | str:
    """--profile-calls as gpe.profile takes it (a number, or "all"), checked."""
    from .host.diagnostics.profile import ALL, CALLS
    if args.profile is None and (args.profile_calls is not None or
                                 args.profile_skip is not None):
        raise Usage("--profile-calls and --profile-skip go with --profile DIR")
    calls = args.profile_calls
    if calls is None:
        calls = CALLS
    elif calls != ALL:
        try:
            calls = int(calls)
        except ValueError:
            calls = 0
    if calls != ALL and calls < 1 or args.profile_skip is not None and args.profile_skip < 0:
        raise Usage("--profile-calls must be a number of calls (at least 1) or 'all', and "
                    "--profile-skip at least 0")
    return calls


def _bench(args) -> int:
    if args.crossing or not args.programs:
        return _bench_crossing(args)
    from .bench import run_bench
    for option in ("steps", "repeats"):
        value = getattr(args, option)
        if value is not None and value < 1:
            raise Usage(f"--{option} must be at least 1, got {value}")
    if args.warmup < 0:
        raise Usage(f"--warmup must be 0 or more, got {args.warmup}")
    if args.timeout <= 0:
        raise Usage(f"--timeout must be positive, got {args.timeout}")
    if args.calls is not None:
        raise Usage("--calls applies to --crossing; for a program use --steps")
    for path in args.programs:
        _file(path)
    return run_bench(args, Usage)


def _bench_crossing(args) -> int:
    from .bench_crossing import main
    if args.programs:
        raise Usage("--crossing takes no PROGRAM")
    for option in ("steps", "json", "plot"):
        if getattr(args, option) is not None:
            raise Usage(f"--{option} applies to a PROGRAM, not to --crossing")
    args.calls = 2000 if args.calls is None else args.calls
    args.repeats = 5 if args.repeats is None else args.repeats
    for option in ("calls", "repeats"):
        if getattr(args, option) < 1:
            raise Usage(f"--{option} must be at least 1, got {getattr(args, option)}")
    main(args.calls, args.repeats)
    return 0


BENCH_DESCRIPTION = (
    "Run each PROGRAM three ways, each in its own process, --repeats times: eagerly, with "
    "tf.function on its step functions and with gpe on them; print per way the steady-state "
    "ms per step (median), the ratio to eager and to tf.function, build time, the share of "
    "calls sliced, gpe's eager calls with their per-call overhead, and whether the results, "
    "final variables, host state and printed output match eager's. PROGRAM is a Python file "
    "with a top-level main(steps) returning what to compare (e.g. {'losses': [...], "
    "'weights': [...], 'state': {...}}) and step functions named train_step or *_step (or "
    "listed in STEP_FUNCTIONS) that main looks up when it calls them. Progress goes to "
    "stderr. Exit status 1 where gpe's results differ from eager's or gpe fails.")


def _bench_parser(commands) -> None:
    bench = commands.add_parser(
        "bench", help="time a program eagerly, with tf.function and with gpe, and check "
                      "that it still does the same (or, with --crossing, gpe's crossing cost)",
        usage="gpe bench [-h] [--steps N] [--repeats R] [--warmup W] [--json FILE] "
              "[--plot FILE.png] [--no-adaptive] [--timeout S] PROGRAM [PROGRAM ...]\n"
              "       gpe bench --crossing [--calls N] [--repeats R]",
        description=BENCH_DESCRIPTION,
        epilog="With --crossing (or no PROGRAM): the cost of crossing between host and "
               "graph: an eager op, a tf.function call, the host's queue primitives, a "
               "pipelined host->TF send, an empty sliced call and a TF->host round trip "
               "(median microseconds per operation).")
    bench.add_argument("programs", nargs="*", metavar="PROGRAM",
                       help="Python file(s) following the contract above")
    bench.add_argument("--steps", type=int, metavar="N",
                       help="main(N) (default: the program's DEFAULT_STEPS, else 100)")
    bench.add_argument("--repeats", type=int, metavar="R",
                       help="runs per way; the median is shown (default 3; --crossing: 5)")
    bench.add_argument("--warmup", type=int, default=10, metavar="W",
                       help="calls of the timed step left out of its timing at least "
                            "(default 10; the first half is always left out)")
    bench.add_argument("--json", metavar="FILE", help="also write every figure to FILE (JSON)")
    bench.add_argument("--plot", metavar="FILE.png",
                       help="also draw step times per way to a PNG (needs matplotlib: "
                            "pip install 'gpe[plot]')")
    bench.add_argument("--no-adaptive", action="store_true",
                       help="gpe keeps every variant sliced (default: gpe's own choice of "
                            "eager where that is faster)")
    bench.add_argument("--timeout", type=float, default=600, metavar="S",
                       help="seconds one way's run may take before it counts as hung "
                            "(default 600)")
    bench.add_argument("--crossing", action="store_true",
                       help="measure the cost of crossing between host and graph instead")
    bench.add_argument("--calls", type=int, metavar="N",
                       help="--crossing: operations per timed run (default 2000)")
    bench.set_defaults(run=_bench)


def _extract(args) -> int:
    from .extract import extract
    if not (args.target.endswith(".py") or os.path.isdir(args.target)) and os.sep in args.target:
        raise Usage(f"no such file or folder: {args.target}")
    try:
        extract(args.target, args.out, args.tensorboard)
    except (ImportError, FileNotFoundError) as exc:
        raise Usage(f"cannot import {args.target}: {exc}") from None
    return 0


def _inspect(args) -> int:
    from .extract import describe
    from .tfprog.bundle import BundleError
    try:
        print(describe(args.bundle), end="")
    except BundleError as exc:
        raise Usage(str(exc).removeprefix("gpe: ")) from None
    return 0


def _bundle_commands(commands) -> None:
    extract = commands.add_parser(
        "extract", help="slice a module's functions ahead of time into a bundle",
        description="Import MODULE_OR_PATH (a module name, a package folder or a .py file; "
                    "nothing runs but the import) and slice every function whose argument "
                    "types are declared (@gpe.function(input_signature=...) or tf.TensorSpec "
                    "annotations), without calling it. Writes the bundle (FunctionDefs, "
                    "generated host code, index) to OUT; gpe.load(OUT) runs them. A bundle "
                    "in a folder gpe_bundle next to the module is used when the module's "
                    "functions are first called.")
    extract.add_argument("target", metavar="MODULE_OR_PATH")
    extract.add_argument("-o", "--out", required=True, metavar="OUT",
                         help="the bundle folder to write")
    extract.add_argument("--tensorboard", metavar="DIR",
                         help="also write each function's graph for TensorBoard to DIR")
    extract.set_defaults(run=_extract)
    inspect_ = commands.add_parser("inspect", help="show a bundle's index",
                                   description="Print a bundle's functions, signatures, "
                                               "channels, captures, ops and sizes.")
    inspect_.add_argument("bundle", metavar="OUT")
    inspect_.set_defaults(run=_inspect)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpe", description="Graph program extraction for imperative TensorFlow 2.")
    commands = parser.add_subparsers(dest="command", required=True)
    explain = commands.add_parser(
        "explain", help="show where each line of a function runs and what crosses",
        description="Show, per source line of FUNCTION, whether it runs in the TF part, on "
                    "the host or on both, why, and which values cross in which direction. "
                    "Arguments are assumed to be tensors. FILE is imported to find FUNCTION, "
                    "so its top-level code runs.")
    explain.add_argument("target", metavar="FILE:FUNCTION",
                         help="a Python file and a function in it (Class.method works)")
    explain.set_defaults(run=_explain)
    run = commands.add_parser(
        "run", help="run a script with every function in it sliced",
        usage="gpe run [-h] [--report] [--profile DIR [--profile-calls N|all] "
              "[--profile-skip K]] SCRIPT [ARGS ...]",
        description="Run SCRIPT as __main__, with every top-level function and method in it, "
                    "and in the modules it imports from its own directory, handled as if "
                    "decorated with @gpe.function. Functions without TF work stay plain "
                    "Python.")
    run.add_argument("--report", action="store_true",
                     help="at exit, print per function: calls, sliced calls, eager calls and "
                          "why any call ran eagerly, and where the host's time went (to "
                          "stderr)")
    run.add_argument("--profile", metavar="DIR",
                     help="write a TensorBoard profile to DIR of a window of the run's calls "
                          "of gpe functions: TensorFlow's ops and gpe's calls, waits, fences "
                          "and builds on one timeline (view: pip install 'gpe[profile]'; "
                          "tensorboard --logdir DIR)")
    run.add_argument("--profile-calls", metavar="N|all",
                     help="the window's calls (default 20), or 'all': every call, builds "
                          "included (a profile costs per call recorded: a small step's run "
                          "takes about twice as long profiled whole)")
    run.add_argument("--profile-skip", metavar="K", type=int,
                     help="open the window after K calls of gpe functions (default: at the "
                          "first call of a function that has run sliced and made its adaptive "
                          "choice, the steady state)")
    run.add_argument("script", metavar="SCRIPT", nargs="?",  # checked in _run: ARGS is
                     help="the Python script to run")  # optional, SCRIPT is not
    run.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                     help="arguments passed to the script")
    run.set_defaults(run=_run, parser=run)
    _bench_parser(commands)
    _bundle_commands(commands)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return args.run(args)
    except Usage as exc:
        print(f"gpe: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
