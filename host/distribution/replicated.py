"""`strategy.run(step, args=...)` on a function gpe slices, called eagerly.

MirroredStrategy (and MultiWorkerMirroredStrategy, which runs replicas the same way) runs
`strategy.run(fn)` eagerly by calling `fn` once per replica, each in a thread of its own;
the threads meet at every cross-replica step (`merge_call`: an optimizer's all-reduce). A
`tf.function` given to it is not called so: TensorFlow clones it with a Python function
that runs the replicas (`mirrored_run.call_for_each_replica`), so the whole replicated
step is one graph function, traced under the strategy, with the all-reduce inside it.

gpe does the same for its own functions: `strategy.run(step, ...)` with `step` a sliced
function (or method) calls, instead, a sliced function of its own per strategy and step,
`Replicated.run`, whose body is `self.strategy.run(self.step, args=args)` with the plain
step. That is the distributed step session 4 taught the slicer to slice: its TF part holds
every replica's work and the cross-replica synchronisation, traced by TensorFlow in the
replica context; per-replica inputs cross as their components, and the call key guards
the strategy, the step and the replicas' devices (their number). The step's own
statistics count these calls (one per `strategy.run`).

A step with host work (a `print`, `.numpy()`, a Python list) would run that work once,
when traced: the slicer then leaves `strategy.run` on the host. Under MirroredStrategy and
MultiWorkerMirroredStrategy such a step is sliced per replica instead (host/distribution/replica_step.py:
its host part once per replica in strategy.run's own replica threads, handing over at each
merge_call as eagerly; one TF part for every local replica); where that cannot be done, and
under OneDeviceStrategy, it runs eagerly, once per replica, with a reason naming its host
lines (`host_work`). The replicated call is made from the thread that called
`strategy.run` (cross-replica context), never from a replica thread, so no replica waits on
another through gpe's locks.
"""
from __future__ import annotations

import threading
import types
import weakref
from typing import Any

from tensorflow.python.distribute import distribute_utils, mirrored_run, mirrored_strategy, \
    one_device_strategy
from tensorflow.python.eager.context import executing_eagerly

from ..speculation.payoff import seen_workers
from .replica_step import HostWorkSteps, host_lines

__all__ = ["host_work", "install"]


class Replicated:
    """One step run by one strategy: the object argument of the replicated call (the call
    key guards its `strategy` and `step` by identity, as any object's attributes the TF
    part reads)."""

    def __init__(self, strategy, step):
        self.strategy = strategy
        self.step = step

    def run(self, args):
        return self.strategy.run(self.step, args=args)

    def run_kw(self, args, kwargs):
        return self.strategy.run(self.step, args=args, kwargs=kwargs)


# strategy -> {sliced function -> {id of the bound object (or None): (Replicated, the
# sliced run, the sliced run_kw)}}. A bound step's object stays alive while its strategy
# and its sliced function do (the entry's step holds it), so its id is not reused. As
# TensorFlow's own cache of replicated tf.functions (mirrored_run._cfer_fn_cache), an
# entry refers to its strategy: a strategy that ran a sliced step lives on.
_cache: "weakref.WeakKeyDictionary[Any, weakref.WeakKeyDictionary]" = \
    weakref.WeakKeyDictionary()
_lock = threading.Lock()  # taken by the thread that calls strategy.run, never a replica's
_original = None
_original_one_device = None
_plain_steps = None  # `gpe run`: fn -> the sliced function strategy.run(fn) runs (or fn)
_inside = threading.local()  # depth: replicated calls running in this thread (_run)


def slice_plain_steps(wrap) -> None:
    """`gpe run`: `strategy.run(fn)` of a plain function runs `wrap(fn)` in its place, the
    sliced function gpe run makes of one of the script's functions it did not wrap (a
    per-replica step defined inside `main()`), or `fn` itself."""
    global _plain_steps
    _plain_steps = wrap


def install() -> None:
    """Route eager `strategy.run` calls of sliced functions here (once): MirroredStrategy's
    and MultiWorkerMirroredStrategy's (mirrored_run), and OneDeviceStrategy's, which calls
    the step in its replica context (where a sliced call would run eagerly). The default
    strategy's `run` calls the step in a default replica context: a plain call, sliced."""
    global _original, _original_one_device
    if _original is None:
        _original = mirrored_run.call_for_each_replica
        mirrored_run.call_for_each_replica = _call_for_each_replica
        extended = one_device_strategy.OneDeviceExtended
        _original_one_device = extended._call_for_each_replica  # noqa: SLF001
        extended._call_for_each_replica = _one_device_call  # noqa: SLF001


def _one_device_call(extended, fn, args, kwargs):
    replicated = _replicated(extended._container_strategy(), fn, args, kwargs)  # noqa: SLF001
    if replicated is not None:
        return _run(replicated)
    return _original_one_device(extended, fn, args, kwargs)


def _call_for_each_replica(strategy, fn, args=None, kwargs=None):
    if getattr(strategy.extended, "_num_workers", 1) > 1:  # (MultiWorkerMirroredStrategy)
        seen_workers()
    replicated = _replicated(strategy, fn, args, kwargs, per_replica=True)
    if replicated is not None:
        return _run(replicated)
    return _original(strategy, fn, args, kwargs)


def _run(replicated):
    """A replicated call: its own `strategy.run(step)` (Replicated.run, profiled or run
    eagerly) runs the plain step it holds, never a sliced one made of it again."""
    _inside.depth = getattr(_inside, "depth", 0) + 1
    try:
        return replicated()
    finally:
        _inside.depth -= 1


def _replicated(strategy, fn, args, kwargs, per_replica: bool = False):
    """The replicated sliced call of `strategy.run(fn, ...)` (a thunk), or None where `fn`
    is not a sliced function or the call is not eager. A step with host work
    (`per_replica`: under MirroredStrategy or MultiWorkerMirroredStrategy) runs its host
    part once per replica beside one replicated TF part (host/distribution/replica_step.py)."""
    if executing_eagerly() and _plain_steps is not None and type(fn) is types.FunctionType \
            and not getattr(_inside, "depth", 0):
        fn = _plain_step(fn)
    if executing_eagerly() and getattr(type(fn), "_gpe_sliced", False):
        bound = hasattr(fn, "__func__")  # a sliced method bound to an object
        sliced, obj = (fn.__func__, fn.__self__) if bound else (fn, None)
        if not sliced.plain:
            entry = _entry(strategy, sliced, obj)
            if per_replica and (getattr(entry[1], "host_work", False)
                                or getattr(entry[2], "host_work", False)):
                steps = _host_work_steps(strategy, sliced, obj, entry)
                return lambda: steps(tuple(args or ()), dict(kwargs or {}))
            if kwargs:
                return lambda: entry[2](entry[0], tuple(args or ()), dict(kwargs))
            return lambda: entry[1](entry[0], tuple(args or ()))
    return None


def _plain_step(fn):
    """`_plain_steps` of the function strategy.run was given: eagerly, strategy.run gives
    call_for_each_replica AutoGraph's wrapper of it (an "artifact" that calls it with
    conversion unspecified: as it is, eagerly); a sliced function is no such wrapper's
    target (it is an artifact itself: a decorated step comes here as it is)."""
    target = getattr(fn, "__wrapped__", fn) if hasattr(fn, "autograph_info__") else fn
    if type(target) is not types.FunctionType:
        return fn
    step = _plain_steps(target)
    return fn if step is target else step


def _entry(strategy, sliced, obj) -> tuple:
    with _lock:
        by_fn = _cache.setdefault(strategy, weakref.WeakKeyDictionary())
        by_obj = by_fn.setdefault(sliced, {})
        entry = by_obj.get(id(obj))
        if entry is None:
            step = sliced.fn if obj is None else types.MethodType(sliced.fn, obj)
            entry = by_obj[id(obj)] = (Replicated(strategy, step),
                                       _wrap(sliced, Replicated.run),
                                       _wrap(sliced, Replicated.run_kw))
        return entry


def host_work_steps(wrapper, values: dict):
    """The per-replica runner of the step `wrapper` (a replicated call) runs, found to
    have host work, where strategy.run is MirroredStrategy's or MultiWorkerMirrored's;
    None elsewhere (OneDeviceStrategy: it runs eagerly)."""
    replicated = values.get("self")
    strategy = getattr(replicated, "strategy", None)
    if not isinstance(getattr(strategy, "extended", None), mirrored_strategy.MirroredExtended):
        return None
    obj = getattr(replicated.step, "__self__", None)
    entry = _entry(strategy, wrapper.replica_step, obj)
    return _host_work_steps(strategy, wrapper.replica_step, obj, entry)


def _host_work_steps(strategy, sliced, obj, entry):
    with _lock:
        steps = getattr(entry[1], "per_replica", None)
        if steps is None:
            steps = entry[1].per_replica = HostWorkSteps(strategy, sliced, obj, _original)
        return steps


def _wrap(sliced, method):
    """A sliced function of `method` that counts in `sliced`'s statistics and waits for
    its payoff (gpe run) as `sliced` does."""
    wrapper = type(sliced)(method, profile_calls=sliced.profile_calls, auto=sliced.auto,
                           adaptive=sliced.adaptive)
    wrapper.stats_ = sliced.stats_
    wrapper.payoff = sliced.payoff
    wrapper.replica_step = sliced
    wrapper.__qualname__ = f"{sliced.__qualname__} (strategy.run)"
    sliced.replicated.append(wrapper)
    return wrapper


def host_work(wrapper, values: dict) -> str:
    """Where the step that `wrapper` (a replicated call) runs has host work, from the
    step's own plan for one replica's arguments: "file:line (`source`)" for its host
    statements (up to three, its returns aside), or why it is not sliced at all."""
    step = wrapper.replica_step
    replicated = values.get("self")
    obj = getattr(getattr(replicated, "step", None), "__self__", None)
    try:
        args, kwargs = distribute_utils.select_replica(
            0, (tuple(values.get("args", ())), dict(values.get("kwargs") or {})))
        plan = step.builder.plan(step.keys.values(
            args if obj is None else (obj, *args), kwargs))
    except Exception as exc:  # noqa: BLE001 (a refusal, or arguments it cannot take)
        return f"({exc})"
    return host_lines(plan)

