"""The public API: `gpe.function` and `gpe.explain` (`gpe.load`: gpe/bundles.py)."""
from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

from .host.call.function import SlicedFunction
from .host.facts.oracle import classify
from . import slicer  # (its passes: loaded when a function is first sliced)
from .slicer import ArgFact, Facts, Kind, Refusal, SlicePlan


def function(fn: Callable | None = None, *, profile_calls: int = 3, adaptive: bool = True,
             input_signature: Sequence[Any] | None = None):
    """Slice `fn` into a host part and a TF part; use as `@gpe.function` or `@gpe.function()`.

    profile_calls: how many calls per argument signature run eagerly, observed, before
    the sliced version is built (their results are eager's).
    adaptive: time the first sliced calls against the eager profile call and run the
    function eagerly if that is faster (a tiny function costs less than gpe's crossing).
    input_signature: a `tf.TensorSpec` per parameter: the argument types `gpe extract`
    slices the function for ahead of time (a bundle). Unlike tf.function's, it does not
    restrict calls: a call with other arguments runs as any gpe call does.
    """
    def wrap(f: Callable) -> SlicedFunction:
        if isinstance(f, SlicedFunction) or getattr(f, "_gpe_sliced", False):
            return f
        if inspect.ismethod(f):  # `gpe.function(model.train_step)`: slice the function,
            return wrap(f.__func__).__get__(f.__self__)  # bound to the same object
        sliced = SlicedFunction(f, profile_calls=profile_calls, adaptive=adaptive)
        if input_signature is not None:
            sliced.input_signature = tuple(input_signature)
        return sliced
    return wrap(fn) if fn is not None else wrap


def plan_for(fn: Callable) -> SlicePlan:
    """The plan gpe uses for `fn`: its last sliced variant, else one assuming tensor args
    (and, for a method bound to an object, that object as `self`)."""
    obj = None
    if inspect.ismethod(fn) or (getattr(fn, "_gpe_sliced", False) and
                                isinstance(getattr(fn, "__func__", None), SlicedFunction)):
        fn, obj = fn.__func__, fn.__self__  # `gpe.function(trainer.step)`, `model.step`
    if isinstance(fn, SlicedFunction) and fn.last_plan is not None:
        return fn.last_plan
    target = fn.fn if isinstance(fn, SlicedFunction) else inspect.unwrap(fn)
    params = list(inspect.signature(target).parameters)
    args = {name: ArgFact(Kind.TENSOR) for name in params}
    objects = {}
    if obj is not None and params:
        args[params[0]] = ArgFact(Kind.HOST, python_type=type(obj).__qualname__,
                                  constant=True, value=obj)
        objects = {params[0]: obj}
    facts = Facts(args=args, classify=classify, objects=objects,
                  assumed="not called yet: every argument is assumed to be a tensor")
    return slicer.slice_function(target, facts)


def explain(fn: Callable, file: Any = None) -> str:
    """Print (to `file`, default stdout) and return where each line of `fn` runs."""
    import sys
    try:
        text = format_plan(plan_for(fn))
    except Refusal as refusal:
        text = f"{getattr(fn, '__qualname__', fn)}: not sliced, runs eagerly\n  {refusal}\n"
    print(text, end="", file=file or sys.stdout)
    return text


def format_plan(plan: SlicePlan) -> str:
    lines = [f"{plan.qualname} ({plan.filename}:{plan.lineno})"]
    lines += [f"  assumed: {a}" for a in plan.assumptions]
    width = max((len(r.source) for r in plan.lines), default=10)
    width = min(width, 48)
    for report in plan.lines:
        source = plan.user_terms(report.source, quote=False)  # no `_gpe_h0`: what it holds
        source = source if len(source) <= width else source[:width - 3] + "..."
        lines.append(f"  {report.lineno:>4}  {report.place:<4}  {source:<{width}}  "
                     f"{plan.user_terms(report.reason)}")
        for crossing in report.crossings:
            lines.append(f"  {'':>4}  {'':<4}  {'':<{width}}    -> {plan.user_terms(crossing)}")
    channels = len(plan.channels)
    lines.append(f"  {channels} channel{'s' if channels != 1 else ''}; the TF part is one "
                 f"FunctionDef (a sliced callee has its own)")
    return "\n".join(lines) + "\n"
