"""`gpe run SCRIPT [ARGS...]`: run an unmodified script with its functions sliced.

The script runs as `__main__`. Every top-level function and every method of a top-level
class in it, and in the modules it imports from its own directory, is wrapped as if
decorated with `@gpe.function` (innermost, under any decorators it has); generators,
coroutines and nested functions are left alone, and so is a function that reads the stack
of frames (its caller's frame would be gpe's); but a nested function of these files given
to `strategy.run` (a per-replica step defined inside `main()`) is sliced there, as
`@gpe.function` on it would be (`replica_step`). A function with no TF work becomes plain
Python after its first call. All of them share the one session. Constructors and other
special methods, properties, static and class methods, and the set-up methods Keras calls
(`build`, `get_config`, ...) are left as they are; `__call__` is wrapped (a tf.Module's
forward pass in TF's guides), except on a Keras layer, where Keras's own `__call__`
machinery runs it as Python does.
"""
from __future__ import annotations

import ast
import importlib.abc
import importlib.machinery
import inspect
import os
import sys
import sysconfig
import traceback
import types
import weakref
from typing import Callable

from . import host, slicer, tfprog
from .host.speculation import payoff
from .host.call.function import SlicedFunction
from .host.distribution import replicated
from .host.runtime.graph_error import RAISED_IN_GRAPH

DECORATOR = "__gpe_function__"
_wrapped: list[weakref.ref] = []
_compiled: set[str] = set()  # the files gpe run compiled: the script, its folder's modules
STEP = "__gpe_step__"  # a plain function's sliced step, kept in its __dict__ (replica_step)
MAX_STEPS = 3  # functions of one code sliced as steps, none built, before it stays plain
_steps: dict[types.CodeType, list] = {}  # code -> the steps made of its functions (weakly)


def auto(fn: Callable):
    """The decorator `gpe run` adds to every function it can slice."""
    if not inspect.isfunction(fn) or inspect.isgeneratorfunction(fn) or \
            inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        return fn
    # built only once its calls have paid for it (host/speculation/payoff.py; GPE_PAYOFF=0: at once)
    sliced = SlicedFunction(fn, auto=True, payoff=payoff.enabled())
    _wrapped.append(weakref.ref(sliced))
    return sliced


# methods that set an object up or describe it, not the work: left as they are (Keras
# inspects several of them, and runs `build` once)
_SETUP_METHODS = frozenset({"build", "get_config", "from_config", "build_from_config",
                            "get_build_config", "compute_output_shape", "compute_output_spec",
                            "compute_mask", "compile", "get_compile_config",
                            "compile_from_config"})
_DESCRIPTORS = frozenset({"property", "staticmethod", "classmethod", "cached_property",
                          "setter", "getter", "deleter", "abstractmethod"})


def replica_step(fn):
    """What `strategy.run(fn)` runs for a plain function `fn` (host/distribution/replicated.py):
    where `fn` is a function of the files gpe run compiled that `auto` did not wrap (a step
    defined inside `main()`), the sliced function `auto` makes of it, once per function
    object; otherwise `fn`. A function made anew for every call (a step defined inside the
    loop) would be profiled at each call and never built: after MAX_STEPS such functions of
    one code, none built, the code's functions stay plain."""
    if not inspect.isfunction(fn) or fn.__code__.co_filename not in _compiled:
        return fn
    made = fn.__dict__.get(STEP)
    if made is not None:
        return made
    code = fn.__code__
    made_before = _steps.setdefault(code, [])
    if _reads_frames_code(code) or len(made_before) >= MAX_STEPS and not any(
            s is not None and s.stats_.variants for s in (r() for r in made_before)):
        return fn
    made = auto(fn)
    if made is not fn:
        fn.__dict__[STEP] = made  # (a cycle, freed with the function)
        made_before.append(weakref.ref(made))
    return made


def _reads_frames_code(code: types.CodeType) -> bool:
    """`_reads_frames` of a compiled function (`stack` only with `inspect`: tf.stack is not)."""
    names = set(code.co_names)
    return bool(names & (_FRAME_READERS - {"stack"})) or {"inspect", "stack"} <= names


class _AddDecorators(ast.NodeTransformer):
    def visit_Module(self, node: ast.Module) -> ast.Module:
        for stmt in node.body:
            if isinstance(stmt, ast.FunctionDef) and not _reads_frames(stmt):
                self._decorate(stmt)
            elif isinstance(stmt, ast.ClassDef):
                for item in stmt.body:
                    if isinstance(item, ast.FunctionDef) and _does_work(item) and \
                            not _reads_frames(item):
                        self._decorate(item)
        return node

    @staticmethod
    def _decorate(fn: ast.FunctionDef) -> None:
        marker = ast.Name(id=DECORATOR, ctx=ast.Load())
        ast.copy_location(marker, fn)
        fn.decorator_list.append(marker)  # last in the list: applied first, innermost


# what reads the stack of Python frames: under a wrapper, the caller's frame is gpe's
_FRAME_READERS = frozenset({"currentframe", "_getframe", "f_back", "stack", "getouterframes",
                            "getframeinfo", "extract_stack"})


def _reads_frames(fn: ast.FunctionDef) -> bool:
    """A function that looks at its caller's frame (d2l's `save_hyperparameters` reads the
    caller's arguments through `inspect.currentframe().f_back`): wrapped, it would see
    gpe's frame instead, so it is left as it is. `x.stack` counts only as `inspect.stack`
    (a step calling `tf.stack` or `np.stack` was left unwrapped, eager for good)."""
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and n.id in _FRAME_READERS:
            return True
        if isinstance(n, ast.Attribute) and n.attr in _FRAME_READERS and (
                n.attr != "stack" or isinstance(n.value, ast.Name) and n.value.id == "inspect"):
            return True
    return False


def _does_work(method: ast.FunctionDef) -> bool:
    """A method that does the work (`call`, `train_step`, a step), not a constructor,
    special method, property or one of the set-up methods."""
    name = method.name
    if name != "__call__" and name.startswith("__") and name.endswith("__") or \
            name in _SETUP_METHODS:
        return False
    for decorator in method.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        last = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if last in _DESCRIPTORS:
            return False
    return True


def compile_wrapped(source: str | bytes, path: str) -> types.CodeType:
    _compiled.add(path)
    tree = _AddDecorators().visit(ast.parse(source, path))
    return compile(ast.fix_missing_locations(tree), path, "exec", dont_inherit=True)


class _Loader(importlib.machinery.SourceFileLoader):
    def get_code(self, fullname):  # never a cached .pyc: those hold unwrapped code
        return compile_wrapped(self.get_data(self.path), self.path)

    def exec_module(self, module):
        module.__dict__[DECORATOR] = auto
        super().exec_module(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the modules under the script's directory (not installed packages)."""

    def __init__(self, directory: str):
        self.directory = directory + os.sep
        installed = {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib")}
        self.installed = tuple(p + os.sep for p in installed if p) + (sys.prefix + os.sep,)

    def find_spec(self, name, path, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        origin = getattr(spec, "origin", None) or ""
        if (spec is None or not origin.endswith(".py") or not origin.startswith(self.directory)
                or origin.startswith(self.installed)):
            return None
        spec.loader = _Loader(spec.name, origin)
        return spec


def run_script(path: str, argv: list[str]) -> None:
    """Run `path` as __main__ with `argv` as its arguments."""
    path = os.path.abspath(path)
    directory = os.path.dirname(path)
    with open(path, "rb") as f:
        code = compile_wrapped(f.read(), path)
    sys.argv = [path] + list(argv)
    sys.path.insert(0, directory)
    sys.meta_path.insert(0, _Finder(directory))
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=path, __builtins__=__builtins__, __spec__=None,
                         **{DECORATOR: auto})
    sys.modules["__main__"] = main
    replicated.slice_plain_steps(replica_step)
    exec(code, main.__dict__)


def print_script_error(exc: BaseException, path: str) -> None:
    """Print the error that ended script `path` as `python SCRIPT` prints it: gpe's own
    frames left out (those that started the script and those of the sliced functions it
    called, as TensorFlow leaves its frames out of a tf.function's tracebacks); a syntax
    error in the script as Python reports one. An error raised inside gpe itself keeps
    every frame, as does GPE_FULL_TRACEBACK=1."""
    if isinstance(exc, SyntaxError) and exc.filename == os.path.abspath(path):
        traceback.print_exception(type(exc), exc, None)
        return
    told = traceback.TracebackException.from_exception(exc)
    if os.environ.get("GPE_FULL_TRACEBACK", "0") == "0":
        ours = tuple(os.path.dirname(m.__file__) + os.sep
                     for m in (sys.modules[__package__], host, slicer, tfprog))
        _drop_our_frames(told, os.path.abspath(path), ours, set())
    print("".join(told.format()), end="", file=sys.stderr)


def _drop_our_frames(told: traceback.TracebackException, path: str, ours: tuple,
                     seen: set) -> None:
    """From the script's first frame on, without gpe's frames (unless it raised there)."""
    if id(told) in seen:
        return
    seen.add(id(told))
    frames = list(told.stack)
    start = next((i for i, f in enumerate(frames) if f.filename == path), 0)
    # raised outside gpe, or by a TF op of the user's in the graph (gpe raises it)
    graph = any(note.startswith(RAISED_IN_GRAPH) for note in
                getattr(told, "__notes__", None) or ())
    if frames and (graph or not frames[-1].filename.startswith(ours)):
        told.stack = traceback.StackSummary.from_list(
            [f for f in frames[start:] if not f.filename.startswith(ours)])
    for chained in (told.__cause__, told.__context__):
        if chained is not None:
            _drop_our_frames(chained, path, ours, seen)


_EAGER_COUNTS = (  # why a call ran eagerly, besides the fallback notes: every one is told
    ("unpaid_calls", "before building it paid off"),
    ("profile_calls", "profile calls (the values a variant is built on)"),
    ("timed_calls", "timed eagerly against sliced calls (the adaptive choice)"),
    ("chosen_calls", "the adaptive choice ran it eagerly (faster so)"),
    ("refused_calls", "its variant was refused (the reason above)"),
    ("traced_calls", "called while a caller's TF part was traced (its ops are in that graph)"),
)


def _eager_lines(s: dict) -> list[str]:
    lines = [f"      eager x{s[key]}: {why}" for key, why in _EAGER_COUNTS if s[key]]
    return lines + [f"      eager x{count}: {reason}" for reason, count in s["fallbacks"].items()]


def report() -> str:
    """Per sliced function with TF work: calls, sliced calls, eager calls, fallbacks, guard
    failures ("expected X, got Y") and the assumptions of each variant built."""
    wrapped = [f for f in (ref() for ref in _wrapped) if f is not None]
    # a function refused (a `del`, a generator...) runs as plain Python from then on: its
    # reason is listed with the functions that ran sliced
    waiting = [f for f in wrapped if f.payoff.waiting and not f.plain and not f.variants
               and not f.stats()["fallbacks"]]
    # (a function never called is not listed: without the payoff wait, GPE_PAYOFF=0 or a
    # worker of several, it would be a row of zeros)
    rows = [f for f in wrapped if (not f.plain or f.stats()["fallbacks"]) and f not in waiting
            and f.stats_.calls]
    lines = ["gpe report: functions with TF work"]
    if not rows:
        lines.append("  (none)")
    for fn in rows:
        s = fn.stats()
        lines.append(f"  {fn.__qualname__}: {s['calls']} calls, {s['graph_calls']} sliced, "
                     f"{s['eager_calls']} eager, {s['variants']} variant(s)"
                     + (" (not sliced: plain Python from then on)" if fn.plain else "")
                     + _late(s["late"]))
        lines.extend(_eager_lines(s))
        for reason, count in s["guard_failures"].items():
            lines.append(f"      guard failed x{count}: {reason}")
        for i, assumed in enumerate(s["variants_built"], 1):
            lines.append(f"      variant {i}: {assumed}")
    lines.extend(_waiting_lines(waiting))
    plain = sum(1 for f in wrapped if f.plain and f not in rows)
    lines.append(f"  {plain} other function(s) ran as plain Python (no TF work)")
    return "\n".join(lines)


def _waiting_lines(waiting: list) -> list[str]:
    """Functions never built: their plain eager time stayed under the expected cost of a
    build (host/speculation/payoff.py), so whether they have TF work was never looked at."""
    if not waiting:
        return []
    lines = [f"  {len(waiting)} function(s) ran eagerly throughout, waiting to pay off a "
             f"build (expected {payoff.COSTS.expected_s() * 1e3:.0f} ms; GPE_PAYOFF=0: "
             "build at once):"]
    for fn in waiting:
        lines.append(f"    {fn.__qualname__}: {fn.stats()['calls']} calls, "
                     f"{fn.payoff.eager_s * 1e3:.0f} ms eagerly")
    return lines


def _late(late) -> str:
    """The calls of the second half on (from a mark: stats.Stats.late), where known."""
    calls, sliced, ms = late
    if ms is None:
        return ""
    return f"; last {calls} calls: {sliced} sliced, {ms:.2f} ms a call to the end"
