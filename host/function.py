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
from dataclasses import dataclass, field
from typing import Any, Callable

import tensorflow as tf

from host import signature
from host.call import EntryGuardFailed, Runtime
from host.loader import load
from host.session import Registration, Session, get_session
from slicer import Refusal, SlicePlan, slice_function
from slicer.plan import ChannelKind
from tfprog.channels import Unsendable, flatten, spec_of
from tfprog.channels import relaxed as relaxed_spec
from tfprog.part import Part, PartError, build_part

log = logging.getLogger("gpe")

MAX_VARIANTS = 16
MAX_INT_VALUES = 4
MAX_RETIRED = 3  # variants of one signature that fell back mid-call before it runs eagerly
MAX_SHAPES = 2  # exact shapes of a tensor argument before its changing dimensions relax
MAX_PATH_VALUES = 2  # values of a number on an object (a flag, a rate) folded before it is sent
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
        self.owner, self.plan, self.bound = owner, plan, bound
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
        # what the TF part captured when traced (held: their ids are in the call key)
        self.held = [signature.resolve(g, bound_values, owner.lookup) for g in plan.captures]

    def build(self, specs, layouts, folded) -> None:
        """folded: {entry leaf position: (name, index in the entry values, constant)}."""
        fn = self.owner.fn
        factory = lambda rt, k: load(self.plan.tf_source, None, fn,  # noqa: E731
                                     {"_gpe_rt": rt, "_gpe_k": k}, signature=False)
        self.folded = list(folded.values())
        self.part = build_part(self.plan, factory, self.bound, specs, layouts,
                               {pos: value for pos, (_, _, value) in folded.items()})
        self.host_fn = load(self.plan.host_source, self.plan.host_tree, fn,
                            {"_gpe_rt": Runtime(self)})

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
        self.plans: dict[tuple, SlicePlan] = {}  # see _plan
        self.refused: dict[tuple, str] = {}
        self.dynamic: set[str] = set()
        self.shapes: dict[str, list] = {}  # a tensor argument's shapes seen
        self.relaxed: dict[str, tuple] = {}  # argument -> dimensions any size may take
        self.exact: set[str] = set()  # arguments whose relaxed variant could not be built
        self.fold_failures: dict[str, int] = {}  # entry values that broke their constant
        self.path_values: dict[str, set] = {}  # values seen of numbers read by paths
        self.dynamic_paths: set[str] = set()   # ...that change too often to be folded
        self.unfolded: set[str] = set()  # entry values never used as constants again
        self.retired: dict[tuple, int] = {}  # variants dropped after a mid-call fallback
        self.last_key: tuple | None = None  # the key of the variant built last
        self.host_only: set[str] = set()  # names seen not to fit a channel (see _build)
        self.int_values: dict[str, set[int]] = {}
        self.guards: tuple[str, ...] = ()  # captured names and paths (union over variants)
        self.stats_ = Stats()
        self.warned: set[str] = set()
        self.last_plan: SlicePlan | None = None
        self._lock = threading.RLock()
        self.__wrapped__ = fn
        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            setattr(self, attr, getattr(fn, attr, None))

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return _BoundSliced(self, obj)

    # calling --------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if self.plain:
            return self.fn(*args, **kwargs)
        stats = self.stats_
        stats.calls += 1
        if not kwargs and len(args) == len(self._positional):  # the common case, fast
            values = dict(zip(self._positional, args))
        else:
            try:
                bound = self.signature.bind(*args, **kwargs)
            except TypeError:
                return self._eager(args, kwargs)  # eager raises the same TypeError
            bound.apply_defaults()
            values = bound.arguments
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
            start = time.perf_counter()
            try:
                stats.graph_calls += 1
                result = variant.host_fn(*args, **kwargs)
            except EntryGuardFailed as failed:  # raised before anything was sent
                stats.graph_calls -= 1
                reason = str(failed)
                stats.guard_failures[reason] = stats.guard_failures.get(reason, 0) + 1
                if failed.name is not None:
                    self._unfold(key, failed.name)
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
            if self._relax(values) and self._key(values) in self.variants:
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

    def _unfold(self, key, name: str) -> None:
        """A value the variant was built with as a constant changed: build again (after new
        profile calls); one that changed twice is sent as a value from then on."""
        count = self.fold_failures[name] = self.fold_failures.get(name, 0) + 1
        if count >= 2:
            self.unfolded.add(name)
        self.variants.pop(key, None)
        self.profiles.pop(key, None)
        log.info("%s: %s changed; slicing again%s", self.__qualname__, name,
                 " (sent as a value from now on)" if count >= 2 else "")

    def _guard_failed(self, key: tuple, values) -> None:
        """Record why `key` matched no variant: the first difference from the last one."""
        last, names = self.last_key, list(values)
        reason = "a new argument signature"
        for i, (old, new) in enumerate(zip(last, key)):
            if old == new:
                continue
            if i < len(names):
                reason = (f"argument {names[i]}: expected {signature.text(old)}, got "
                          f"{signature.text(new)}")
            else:
                guard = self.guards[i - len(names)] if i - len(names) < len(self.guards) else "?"
                if isinstance(old, tuple) and isinstance(new, tuple):  # Python numbers
                    reason = f"{guard}: expected {old[1]!r}, got {new[1]!r}"
                    self._note_path_value(guard, new)
                else:
                    reason = f"{guard}: expected the object seen when sliced, got another one"
            break
        failures = self.stats_.guard_failures
        failures[reason] = failures.get(reason, 0) + 1
        log.info("%s: guard failed: %s", self.__qualname__, reason)

    def _note_path_value(self, path: str, value: tuple) -> None:
        """A Python number read by the TF part when built keeps changing: after
        MAX_PATH_VALUES values it is sent as a value instead (no more variants for it)."""
        seen = self.path_values.setdefault(path, set())
        seen.add(value)
        if len(seen) > MAX_PATH_VALUES:
            self.dynamic_paths.add(path)
            self.guards = tuple(g for g in self.guards if g != path)
            log.info("%s: %s keeps changing; sent as a value from now on",
                     self.__qualname__, path)

    def _relax(self, values) -> bool:
        """A tensor argument that keeps changing shape (same rank; a third shape) is
        described with None in the dimensions that changed (JANUS: (4, 8), (3, 8), (5, 8)
        give (?, 8)); True if any was. Two shapes (a smaller last batch) get an exact
        variant each: exact shapes keep every op's checks static, so the host runs ahead."""
        changed = False
        for name, value in values.items():
            if name in self.exact or not (
                    isinstance(value, tf.Tensor) or hasattr(value, "_gpe_pending")):
                continue
            shape = tuple(value.shape)
            seen = self.shapes.setdefault(name, [])
            if shape not in seen:
                seen.append(shape)
            first = seen[0]
            if len(seen) <= MAX_SHAPES or len(first) != len(shape) or first == shape:
                continue
            old = self.relaxed.get(name, (False,) * len(shape))
            mask = tuple(o or any(s[i] != first[i] for s in seen if len(s) == len(first))
                         for i, o in enumerate(old))
            if mask != old:
                self.relaxed[name], changed = mask, True
                log.info("%s: argument %s changed shape; relaxed to any size in dimension(s) "
                         "%s", self.__qualname__, name,
                         ", ".join(str(i) for i, r in enumerate(mask) if r))
        return changed

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
        total = sum(timing[WARM_CALLS:]) + time.perf_counter() - start
        variant.sliced_s = total / COMPARE_CALLS
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
            if self._relax(values):  # the first shapes are recorded here
                key = self._key(values)
            self._mark_dynamic(key, values)
            try:
                plan = self._plan(key, values)
            except Refusal as refusal:
                self._refuse(key, str(refusal))
                self.plain = self.auto
                return self._eager(args, kwargs)
            if self.auto and not any(line.place == "TF" for line in plan.lines):
                self.plain = True  # no TF work: plain Python from now on
                return self._eager(args, kwargs)
            result, observed = self._profile(plan, args, kwargs)
            runs = self.profiles.setdefault(key, [])
            runs.append(observed)
            if len(runs) >= self.profile_calls:
                self._build(key, plan, values, runs)
            return result

    def _key(self, values) -> tuple:
        """The call's guard: argument descriptions, and the identity of every object a TF
        part captured (a rebound global, another `self`, a replaced layer all differ)."""
        described = self._described(values)
        if not self.guards:
            return described
        lookup = self.lookup
        return described + tuple(_guard_value(signature.resolve(g, values, lookup))
                                 for g in self.guards)

    def _mark_dynamic(self, key, values) -> None:
        """An int argument folded into the TF part as a constant (a loop count, an index)
        gets a variant per value; once it has taken more than MAX_INT_VALUES values it is
        sent as a value instead (loops over it then run on the host)."""
        for name, value in values.items():
            if type(value) is int and name not in self.dynamic:
                seen = self.int_values.setdefault(name, set())
                seen.add(value)
                if len(seen) > MAX_INT_VALUES:
                    self.dynamic.add(name)
                    log.debug("%s: argument %s keeps changing; sent as a value from now on",
                              self.__qualname__, name)

    def _described(self, values) -> tuple:
        relaxed = self.relaxed
        return tuple(signature.describe(v, n in self.dynamic, relaxed.get(n))
                     for n, v in values.items())

    def _plan(self, key, values) -> SlicePlan:
        """The plan for `key`: sliced once, and shared by keys that differ only in tensor
        shapes (the slicer does not look at them: a new batch size is a new variant of the
        same plan)."""
        cached = (_shape_free(key), frozenset(self.host_only), frozenset(self.dynamic_paths))
        plan = self.plans.get(cached)
        if plan is not None:
            self.last_plan = plan
            return plan
        described = self._described(values)
        facts = dataclasses.replace(signature.facts_for(described, values),
                                    host_only=frozenset(self.host_only),
                                    dynamic_paths=frozenset(self.dynamic_paths))
        plan = self.plans[cached] = slice_function(self.fn, facts)
        self.last_plan = plan
        log.debug("sliced %s\n--- host ---\n%s\n--- TF ---\n%s", self.__qualname__,
                  plan.host_source, plan.tf_source)
        return plan

    def _profile(self, plan: SlicePlan, args, kwargs):
        observed: dict[int, list] = {}

        def observe(index, vals):
            observed[index] = list(vals)

        program = load(plan.profile_source, plan.profile_tree, self.fn, {"_gpe_obs": observe})
        self.stats_.profile_calls += 1
        self.stats_.eager_calls += 1
        return program(*args, **kwargs), observed

    def _build(self, key, plan: SlicePlan, values, runs) -> None:
        try:
            specs, layouts = _specs(plan, runs, self.relaxed)
            folded = _stable_entry_values(plan, runs, layouts, self.unfolded)
            variant = Variant(self, plan, {n: values[n] for n in plan.bound}, values)
            variant.build(specs, layouts, folded)
            if not self.adaptive:
                variant.timing = None
        except Unsendable as exc:
            if exc.names and not set(exc.names) <= self.host_only:
                # slice again with TF work reading those names on the host
                self.host_only |= set(exc.names)
                self.profiles.pop(key, None)
                log.info("%s: %s; slicing again", self.__qualname__, exc)
                return
            self._refuse(key, str(exc))
            return
        except (PartError, Refusal) as exc:
            relaxed = [n for n in self.relaxed if n in values]
            if relaxed:  # built for exact shapes instead (a variant per shape)
                self.exact.update(relaxed)
                for name in relaxed:
                    del self.relaxed[name]
                self.profiles.pop(key, None)
                log.info("%s: no variant for any size of %s (%s); one per shape instead",
                         self.__qualname__, ", ".join(relaxed), exc)
                return
            self._refuse(key, str(exc))
            return
        self.guards = tuple(sorted(set(self.guards) | set(plan.captures)))
        for guard in self.guards:
            value = _guard_value(signature.resolve(guard, values, self.lookup))
            if isinstance(value, tuple):
                self.path_values.setdefault(guard, set()).add(value)
        self.last_key = self._key(values)
        self.variants[self.last_key] = variant
        self.stats_.variants += 1
        self.stats_.built.append(", ".join(
            [f"{n}: {signature.text(e)}" for n, e in zip(values, self._described(values))]
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

    def __init__(self, sliced: SlicedFunction, obj):
        self._sliced, self._obj = sliced, obj

    def __call__(self, *args, **kwargs):
        return self._sliced(self._obj, *args, **kwargs)

    def stats(self):
        return self._sliced.stats()


FOLDABLE = (bool, int, float)


def _shape_free(key: tuple) -> tuple:
    """`key` with the shapes of tensors left out (see SlicedFunction._plan)."""
    def strip(entry):
        if isinstance(entry, tuple) and entry and entry[0] == "tensor":
            return entry[:2]
        if isinstance(entry, tuple) and entry and entry[0] == "sequence":
            return entry[:2] + (tuple(strip(e) for e in entry[2]),)
        if isinstance(entry, tuple) and entry and entry[0] == "mapping":
            return (entry[0], tuple((k, strip(e)) for k, e in entry[1]))
        return entry
    return tuple(strip(e) for e in key)


def _guard_value(obj) -> Any:
    """A captured object's part of the call key: its identity, or for a Python number (read
    by the TF part as a constant) its type and value."""
    if type(obj) in FOLDABLE:
        return (type(obj).__name__, obj)
    return id(obj)


def _stable_entry_values(plan: SlicePlan, runs, layouts, unfolded) -> dict:
    """Python numbers sent when the call starts that every profile call saw the same (JANUS:
    a stable value is folded into the graph as a constant, its value guarded):
    {leaf position: (name, index among the entry values, value)}. One profile call cannot
    tell a stable value: nothing is folded then."""
    entry = next((c for c in plan.channels if c.kind == ChannelKind.ENTRY), None)
    if entry is None or len(runs) < 2 or any(entry.index not in run for run in runs):
        return {}
    out, position = {}, 0
    for i, (name, layout) in enumerate(zip(entry.names, layouts[entry.index])):
        if layout is not None:
            position += len(tf.nest.flatten(layout))
            continue
        seen = [run[entry.index][i] for run in runs]
        first = seen[0]
        if (name not in unfolded and type(first) in FOLDABLE and first == first
                and all(type(v) is type(first) and v == first for v in seen)):
            out[position] = (name, i, first)
        position += 1
    return out


def _relax_entry(channel, layouts, found, relaxed) -> list:
    out, i = [], 0
    for name, layout in zip(channel.names, layouts):
        n = 1 if layout is None else len(tf.nest.flatten(layout))
        for spec in found[i:i + n]:
            mask = relaxed.get(name) if layout is None else None
            if mask is not None and spec.shape is not None and len(mask) == len(spec.shape):
                spec = dataclasses.replace(spec, shape=tuple(
                    None if r else d for d, r in zip(spec.shape, mask)))
            out.append(spec)
        i += n
    return out


def _sendable(value) -> bool:
    try:
        spec_of(value)
    except Unsendable:
        return False
    return True


def _specs(plan: SlicePlan, runs: list[dict[int, list]],
           relaxed: dict[str, tuple]) -> tuple[dict, dict]:
    """Channel specs and layouts from what the profile calls saw crossing host->TF (an
    entry value of an argument with relaxed dimensions takes any size there)."""
    specs, layouts = {}, {}
    for channel in plan.channels:
        if not channel.to_tf:
            continue
        seen = runs[-1].get(channel.index)
        if seen is None and not channel.names:
            seen = []  # a gate carrying no values (the profile call left before it)
        if seen is None:
            raise PartError(f"the profile call never reached the crossing at line "
                            f"{channel.lineno}")
        pairs = [flatten(v) for v in seen]
        bad = tuple(name for name, (_, leaves) in zip(channel.names, pairs)
                    if not all(_sendable(leaf) for leaf in leaves))
        if bad:
            raise Unsendable(f"{', '.join(bad)} cannot cross into the TF part (line "
                             f"{channel.lineno})", bad)
        layouts[channel.index] = [layout for layout, _ in pairs]
        found = [spec_of(leaf) for _, leaves in pairs for leaf in leaves]
        if channel.kind == ChannelKind.ENTRY:
            specs[channel.index] = _relax_entry(channel, layouts[channel.index], found, relaxed)
        else:
            specs[channel.index] = [relaxed_spec(s) for s in found]
    return specs, layouts
