"""`SlicedFunction`: what `@gpe.function` returns.

Each call is matched to a variant by its argument signature (a host-side guard). A new
signature is sliced, then run once eagerly with observation (the profile call, whose result
is eager's), then its TF part is built and registered with the session; later calls with
that signature run sliced. Anything that cannot be sliced or built runs eagerly, counted
with its reason and warned about once per function.
"""
from __future__ import annotations

import builtins
import dataclasses
import inspect
import logging
import statistics
import threading
import time
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable


from gpe.host import signature
from gpe.host.call import EntryGuardFailed, Runtime
from gpe.host.loader import load
from gpe.host.session import Registration, Session, get_session
from gpe.host.speculation import (Assumptions, channel_specs, guard_value,
                              stable_entry_values)
from gpe.slicer import Refusal, SlicePlan, slice_function
from gpe.tfprog.channels import Unsendable
from gpe.tfprog.part import Part, PartError, build_part

log = logging.getLogger("gpe")

MAX_VARIANTS = 16
WHOLE_FUNCTION_REFUSALS = frozenset({"generator", "no-source", "unsupported-function",
                                     "unsupported-statement"})
MAX_RETIRED = 3  # variants of one signature that fell back mid-call before it runs eagerly
COMPARE_CALLS = 16  # sliced calls timed against the eager profile call
WARM_CALLS = 2      # sliced calls before the timing starts
SLICED_MARGIN = 0.9  # a variant stays sliced only if clearly faster than eager (noise)


class GpeWarning(UserWarning):
    """gpe runs (part of) a function eagerly; the message says why."""


@dataclass
class Stats:
    calls: int = 0
    graph_calls: int = 0
    eager_calls: int = 0
    profile_calls: int = 0
    variants: int = 0
    fallbacks: dict[str, int] = field(default_factory=dict)
    guard_failures: dict[str, int] = field(default_factory=dict)  # "expected X, got Y"
    built: list[str] = field(default_factory=list)  # the assumptions of each variant

    def as_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "graph_calls": self.graph_calls,
                "eager_calls": self.eager_calls, "profile_calls": self.profile_calls,
                "variants": self.variants, "fallbacks": dict(self.fallbacks),
                "guard_failures": dict(self.guard_failures),
                "variants_built": list(self.built)}


class Variant:
    """One sliced version of a function, for one argument signature."""

    def __init__(self, owner: "SlicedFunction", plan: SlicePlan, bound: dict[str, Any],
                 bound_values: dict[str, Any]):
        # the owner weakly (it holds its variants): a dropped function's parts leave the sink
        self.owner, self.plan, self.bound = weakref.proxy(owner), plan, bound
        self.session: Session = get_session()
        self.part: Part | None = None
        self._registration: Registration | None = None
        self.host_fn = None
        self.timing: list | None = []  # start times of the first sliced calls (then None)
        self.sliced_s = 0.0
        self.eager_runs: list | None = None  # eager call times, while measuring them
        self.eager_faster = False
        self.folded: list = []  # entry values used as constants: (name, index, value)
        self.stale = False  # a call fell back mid-call: build again (see fell_back)
        self.nested: list = []  # per nested call site: the callee's variant its TF part runs
        # what the TF part captured when traced (held: their ids are in the call key)
        self.held = [signature.resolve(g, bound_values, owner.lookup) for g in plan.captures]

    def build(self, specs, layouts, folded) -> None:
        """folded: {entry leaf position: (name, index in the entry values, constant)}."""
        fn = self.owner.fn
        factory = lambda rt, k: load(self.plan.tf_source, None, fn,  # noqa: E731
                                     {"_gpe_rt": rt, "_gpe_k": k}, signature=False)
        self.folded = list(folded.values())
        self.part = build_part(self.plan, factory, self.bound, specs, layouts,
                               {pos: value for pos, (_, _, value) in folded.items()},
                               [v.part if v is not None else None for v in self.nested])
        self.host_fn = load(self.plan.host_source, self.plan.host_tree, fn,
                            {"_gpe_rt": Runtime(self, callee)})

    def fell_back(self, reason: str) -> None:
        """A value computed mid-call did not fit its channel; the host finished that call
        eagerly. The variant is built again from new profile calls after it."""
        failures = self.owner.stats_.guard_failures
        failures[reason] = failures.get(reason, 0) + 1
        self.stale = True
        log.info("%s: %s; the call goes on eagerly", self.owner.__qualname__, reason)

    def registration(self) -> Registration:
        session = self.session
        if session.failed:
            session.ensure_healthy()
        reg = self._registration
        if reg is None or reg.generation != session.generation:
            reg = self._registration = session.register(self.part, self)
        return reg


_wrappers: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def callee(fn, args) -> tuple:
    """(its SlicedFunction, the arguments it gets) for the callee of a nested call: a
    sliced function, a sliced method bound to an object, or a plain function of the user's
    (wrapped once, as `gpe run` wraps functions: plain Python after one call if it has no
    TF work)."""
    if isinstance(fn, _BoundSliced):
        return fn._sliced, (fn._obj,) + tuple(args)
    if isinstance(fn, SlicedFunction):
        return fn, tuple(args)
    wrapper = _wrappers.get(fn)
    if wrapper is None:
        wrapper = _wrappers[fn] = SlicedFunction(fn, auto=True)
    return wrapper, tuple(args)


def _callee_variant(seen) -> "Variant | None":
    """The variant a nested call site runs in the TF part: the one the callee built for
    the arguments the profile call saw, if it runs sliced."""
    if seen is None:
        return None
    sliced, key = seen
    variant = sliced.variants.get(key)
    if variant is None or variant.eager_faster or variant.part is None:
        return None
    return variant


class SlicedFunction:
    """A function run sliced. auto=True (as `gpe run` wraps every function): a function
    with no TF work, or one that cannot be sliced, becomes plain Python for good, and
    fallbacks are logged rather than warned about."""

    def __init__(self, fn: Callable, profile_calls: int = 3, auto: bool = False,
                 adaptive: bool = True):
        self.fn = fn
        self.auto = auto
        self.adaptive = adaptive  # run eagerly a variant that is slower sliced than eager
        self.plain = False  # auto mode: decided it is plain Python; calls go straight to fn
        self.profile_calls = max(1, profile_calls)
        self.signature = inspect.signature(fn)
        params = list(self.signature.parameters.values())
        # names of the parameters, when every one is plainly positional (else: bind)
        self._positional = tuple(p.name for p in params) if all(
            p.kind == p.POSITIONAL_OR_KEYWORD for p in params) else ()
        self.variants: dict[tuple, Variant] = {}
        self.profiles: dict[tuple, list] = {}
        self.plans: dict[tuple, list] = {}  # see _plan: [(plan, types of its captures)]
        self.refused: dict[tuple, str] = {}
        self.assumed = Assumptions(getattr(fn, "__qualname__", repr(fn)))
        self.retired: dict[tuple, int] = {}  # variants dropped after a mid-call fallback
        self.last_key: tuple | None = None  # the key of the variant built last
        self.guards: tuple[str, ...] = ()  # captured names and paths (union over variants)
        self.stats_ = Stats()
        self.warned: set[str] = set()
        self.last_plan: SlicePlan | None = None
        self._lock = threading.RLock()
        self.__wrapped__ = fn
        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            setattr(self, attr, getattr(fn, attr, None))

    _gpe_sliced = True  # what host.oracle classifies as Kind.SLICED_FN

    def key_for(self, args: tuple, kwargs: dict) -> tuple | None:
        """The call key of these arguments (None where they do not bind)."""
        try:
            return self._key(self._values(args, kwargs))
        except TypeError:
            return None

    def _values(self, args, kwargs) -> dict:
        """The arguments by parameter name, defaults applied (TypeError if they do not
        bind, as the function would raise)."""
        if not kwargs and len(args) == len(self._positional):  # the common case, fast
            return dict(zip(self._positional, args))
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.arguments

    def nested_call(self, variant: "Variant", args, kwargs):
        """Run `variant` inside a sliced call of another function (whose TF part runs
        this one's); its begin() tells the caller's TF part to go on (session.nested_start)."""
        self.stats_.calls += 1
        self.stats_.graph_calls += 1
        try:
            return variant.host_fn(*args, **kwargs)
        except EntryGuardFailed:
            self.stats_.calls -= 1  # the caller runs it eagerly instead (counted there)
            self.stats_.graph_calls -= 1
            raise

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return _BoundSliced(self, obj)

    # calling --------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        stats = self.stats_
        stats.calls += 1
        if self.plain:
            stats.eager_calls += 1
            return self.fn(*args, **kwargs)
        start = time.perf_counter()  # a sliced call's cost includes finding its variant
        try:
            values = self._values(args, kwargs)
        except TypeError:
            return self._eager(args, kwargs)  # eager raises the same TypeError
        key = self._key(values)
        variant = self.variants.get(key)
        if variant is not None:
            if variant.eager_faster:
                return self._eager(args, kwargs)
            if variant.eager_runs is not None:  # measuring what eager costs
                return self._time_eager(key, variant, args, kwargs)
            session = variant.session
            if not session.enter_call():
                self._note(key, "called while another sliced call was running (nested, or "
                                "from another thread)")
                return self._eager(args, kwargs)
            try:
                stats.graph_calls += 1
                result = variant.host_fn(*args, **kwargs)
            except EntryGuardFailed as failed:  # raised before anything was sent
                stats.graph_calls -= 1
                reason = str(failed)
                stats.guard_failures[reason] = stats.guard_failures.get(reason, 0) + 1
                if failed.name is not None:  # a folded value changed: build again
                    self.assumed.unfold(failed.name)
                    self.variants.pop(key, None)
                    self.profiles.pop(key, None)
                else:
                    self._note(key, reason)
                return self._eager(args, kwargs)
            finally:
                session.exit_call()
                if variant.stale:
                    self._retire(key, variant)
            if variant.timing is not None:
                self._compare_with_eager(variant, time.perf_counter() - start)
            return result
        if key in self.refused:
            return self._eager(args, kwargs)
        if self.variants and key not in self.profiles:
            self._guard_failed(key, values)
            if self.assumed.relax(values) and self._key(values) in self.variants:
                stats.calls -= 1
                return self(*args, **kwargs)  # the relaxed variant takes this call
        return self._first_calls(self._key(values), dict(values), args, kwargs)

    def _retire(self, key, variant: "Variant") -> None:
        """Drop a variant that fell back mid-call (new profile calls see the new values);
        a signature whose variants keep doing so runs eagerly."""
        if self.variants.get(key) is variant:
            del self.variants[key]
        self.profiles.pop(key, None)
        self.retired[key] = self.retired.get(key, 0) + 1
        if self.retired[key] >= MAX_RETIRED:
            self._refuse(key, "values computed during the call keep changing type")

    def _guard_failed(self, key: tuple, values) -> None:
        reason = self.assumed.miss(self.last_key, key, list(values), self.guards)
        dynamic = self.assumed.dynamic_paths
        self.guards = tuple(g for g in self.guards if g not in dynamic)
        failures = self.stats_.guard_failures
        failures[reason] = failures.get(reason, 0) + 1
        log.info("%s: guard failed: %s", self.__qualname__, reason)

    def _compare_with_eager(self, variant: "Variant", seconds: float) -> None:
        """Time COMPARE_CALLS sliced calls: the host's time inside them plus the wait for the
        graph to finish them (work between calls overlaps the graph and is not counted).
        The next COMPARE_CALLS calls then run eagerly and are timed too (_time_eager). A
        variant faster eagerly (gpe's per-call cost can exceed a tiny function's whole eager
        cost) runs eagerly from then on; a function whose every variant does becomes plain."""
        timing = variant.timing
        timing.append(seconds)
        if len(timing) == WARM_CALLS:  # the graph's first runs (instantiation) are done
            variant.session.fence()
        if len(timing) < WARM_CALLS + COMPARE_CALLS:
            return
        start = time.perf_counter()
        variant.session.fence()
        timed = timing[WARM_CALLS:]
        # the slowest call left out: one stall (a collection, the OS) is not the function's
        total = sum(timed) - max(timed) + time.perf_counter() - start
        variant.sliced_s = total / (COMPARE_CALLS - 1)
        variant.timing = None
        variant.eager_runs = []  # the next calls run eagerly, timed

    def _time_eager(self, key, variant: "Variant", args, kwargs):
        start = time.perf_counter()
        try:
            return self._eager(args, kwargs)
        finally:
            variant.eager_runs.append(time.perf_counter() - start)
            if len(variant.eager_runs) >= COMPARE_CALLS:
                eager_s = statistics.median(variant.eager_runs)
                variant.eager_runs = None
                if variant.sliced_s > eager_s * SLICED_MARGIN:
                    variant.eager_faster = True
                    self._note(key, f"eager is faster ({eager_s * 1e6:.0f} us a call) than "
                                    f"sliced ({variant.sliced_s * 1e6:.0f} us a call)",
                               warn=False)  # a choice for speed, not a failure: logged
                    self.plain = all(v.eager_faster for v in self.variants.values())

    def _eager(self, args, kwargs):
        self.stats_.eager_calls += 1
        return self.fn(*args, **kwargs)

    def _first_calls(self, key, values, args, kwargs):
        with self._lock:
            if len(self.variants) >= MAX_VARIANTS:
                self._refuse(key, f"more than {MAX_VARIANTS} argument signatures")
                return self._eager(args, kwargs)
            if self.assumed.relax(values):  # the first shapes are recorded here
                key = self._key(values)
            self.assumed.note_ints(values)
            try:
                plan = self._plan(key, values)
            except Refusal as refusal:
                self._refuse(key, str(refusal))
                # no signature can change these: the function is plain Python from now on
                self.plain = self.auto or refusal.kind in WHOLE_FUNCTION_REFUSALS
                return self._eager(args, kwargs)
            if self.auto and not any(line.place == "TF" for line in plan.lines):
                self.plain = True  # no TF work: plain Python from now on
                return self._eager(args, kwargs)
            result, observed = self._profile(plan, args, kwargs)
            runs = self.profiles.setdefault(key, [])
            runs.append(observed)
            sibling = self._sibling(plan)
            if len(runs) >= (1 if sibling is not None else self.profile_calls):
                self._build(key, plan, values, runs, sibling)
            return result

    def _sibling(self, plan: SlicePlan) -> "Variant | None":
        """A variant already built from the same plan (its key differed only in tensor
        shapes): a new one needs one profile call, folds what it folded, and keeps its
        verdict against eager."""
        return next((v for v in self.variants.values() if v.plan == plan), None)

    def _key(self, values) -> tuple:
        """The call's guard: argument descriptions, and the identity of every object a TF
        part captured (a rebound global, another `self`, a replaced layer all differ)."""
        described = self.assumed.describe(values)
        if not self.guards:
            return described
        lookup = self.lookup
        return described + tuple(guard_value(signature.resolve(g, values, lookup))
                                 for g in self.guards)

    def _plan(self, key, values) -> SlicePlan:
        """The plan for these arguments: sliced once, and shared by calls whose arguments
        differ only in tensor shapes and whose captured objects (`self.w`, `self.rate`)
        have the same types (the slicer looks at neither their identity nor their value:
        the TF part reads those when it is built)."""
        candidates = self.plans.setdefault(
            self.assumed.plan_key(self.assumed.describe(values)), [])
        for plan, types in candidates:
            if types == self._capture_types(plan, values):
                self.last_plan = plan
                return plan
        facts = dataclasses.replace(
            signature.facts_for(self.assumed.describe(values), values), **self.assumed.facts())
        plan = slice_function(self.fn, facts)
        candidates.append((plan, self._capture_types(plan, values)))
        self.last_plan = plan
        log.debug("sliced %s\n--- host ---\n%s\n--- TF ---\n%s", self.__qualname__,
                  plan.host_source, plan.tf_source)
        return plan

    def _capture_types(self, plan: SlicePlan, values) -> tuple:
        return tuple(type(signature.resolve(g, values, self.lookup)) for g in plan.captures)

    def _profile(self, plan: SlicePlan, args, kwargs):
        observed: dict = {}

        def observe(index, vals):
            observed[index] = list(vals)

        def observe_call(slot, fn, *call_args, **call_kwargs):
            """A call of a function gpe slices too: which of its variants this call takes
            (its key, looked up once the caller is built)."""
            sliced, all_args = callee(fn, call_args)
            result = sliced(*all_args, **call_kwargs)  # profiled and built as any call
            # the key after the call: building a variant can add guards to it
            observed[("call", slot)] = (sliced, sliced.key_for(all_args, call_kwargs))
            return result

        program = load(plan.profile_source, plan.profile_tree, self.fn,
                       {"_gpe_obs": observe, "_gpe_obs_call": observe_call})
        self.stats_.profile_calls += 1
        self.stats_.eager_calls += 1
        return program(*args, **kwargs), observed

    def _build(self, key, plan: SlicePlan, values, runs, sibling=None) -> None:
        try:
            specs, layouts = channel_specs(plan, runs, self.assumed.relaxed)
            folded = stable_entry_values(plan, runs, layouts, self.assumed.unfolded,
                                         sibling.folded if sibling is not None else ())
            variant = Variant(self, plan, {n: values[n] for n in plan.bound}, values)
            variant.nested = [_callee_variant(runs[-1].get(("call", slot)))
                              for slot in range(len(plan.nested))]
            variant.build(specs, layouts, folded)
            if not self.adaptive or (sibling is not None and sibling.timing is None
                                     and sibling.eager_runs is None):
                variant.timing = None  # as fast as its sibling, measured
        except Unsendable as exc:
            if exc.names and not set(exc.names) <= self.assumed.host_only:
                # slice again with TF work reading those names on the host
                self.assumed.host_only |= set(exc.names)
                self.profiles.pop(key, None)
                log.info("%s: %s; slicing again", self.__qualname__, exc)
                return
            self._refuse(key, str(exc))
            return
        except (PartError, Refusal) as exc:
            relaxed = self.assumed.unrelax(values)
            if relaxed:  # built for exact shapes instead (a variant per shape)
                self.profiles.pop(key, None)
                log.info("%s: no variant for any size of %s (%s); one per shape instead",
                         self.__qualname__, ", ".join(relaxed), exc)
                return
            self._refuse(key, str(exc))
            return
        self.guards = tuple(sorted(set(self.guards) | set(plan.captures)))
        for guard in self.guards:
            value = guard_value(signature.resolve(guard, values, self.lookup))
            if isinstance(value, tuple):
                self.assumed.note_path_value(guard, value)
        self.last_key = self._key(values)
        self.variants[self.last_key] = variant
        self.stats_.variants += 1
        self.stats_.built.append(", ".join(
            [f"{n}: {signature.text(e)}" for n, e in zip(values, self.assumed.describe(values))]
            + [f"{name} = {value!r}" for name, _, value in variant.folded]))

    def _refuse(self, key, reason: str) -> None:
        self.refused[key] = reason
        self._note(key, reason)

    def _note(self, key, reason: str, warn: bool = True) -> None:
        self.stats_.fallbacks[reason] = self.stats_.fallbacks.get(reason, 0) + 1
        if self.auto or not warn:
            log.info("%s runs eagerly: %s", self.__qualname__, reason)
        elif reason not in self.warned:
            self.warned.add(reason)
            warnings.warn(f"gpe: {self.__qualname__} runs eagerly: {reason}", GpeWarning,
                          stacklevel=4)

    # introspection ----------------------------------------------------------------------
    def lookup(self, name: str):
        code = self.fn.__code__
        if self.fn.__closure__ and name in code.co_freevars:
            try:
                return self.fn.__closure__[code.co_freevars.index(name)].cell_contents
            except ValueError:  # an empty cell
                return None
        if name in self.fn.__globals__:
            return self.fn.__globals__[name]
        return getattr(builtins, name, None)

    def stats(self) -> dict[str, Any]:
        return self.stats_.as_dict()


class _BoundSliced:
    """A sliced method bound to an instance (the instance is an ordinary host argument)."""

    _gpe_sliced = True

    def __init__(self, sliced: SlicedFunction, obj):
        self._sliced, self._obj = sliced, obj

    def __call__(self, *args, **kwargs):
        return self._sliced(self._obj, *args, **kwargs)

    def stats(self):
        return self._sliced.stats()
