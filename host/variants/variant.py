"""Variants: the sliced versions of a function, one per call key, and their cache.

A `Variant` holds one plan's built TF part (registered with the session when first run)
and its loaded host program; `assemble` is the one way one is put together (a built
key's, a bundle's, a replicated step's). `Variants` holds a function's variants by call
key, with the profile runs, refusals and retirements of the keys not (or no longer) built.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import time
import weakref
from typing import Any, Callable

from ..facts import signature
from ..speculation.adaptive import AdaptiveTimer
from ..speculation.payoff import COSTS, lockstep, progress
from .stubs import Runtime
from .loader import load
from ..runtime.losses import Replay
from ..runtime.session import Registration, Session, get_session
from ..runtime.trace import TRACER
from ...slicer import SlicePlan
from ...slicer.plan import ChannelKind
from ...tfprog.losses import Added
from ...tfprog.part import Part, build_part

log = logging.getLogger("gpe")

MAX_VARIANTS = 16
MAX_RETIRED = 3  # variants of one key that fell back mid-call before it runs eagerly
MAX_LEARNED = 8  # ...and that were built again knowing a gate no profile call reached
PLAN = ("plan",)  # in a profile run: the plan it was made with (Variants.profiled)


@dataclasses.dataclass(frozen=True)
class Crossings:
    """What a variant's channels carry, as its TF part is built for them: the component
    specs and layouts by channel, and the entry values folded into constants ({entry leaf
    position: (name, index in the entry values, constant)})."""

    specs: dict
    layouts: dict
    folded: dict = dataclasses.field(default_factory=dict)

    @property
    def constants(self) -> dict:
        """{entry leaf position: the constant the TF part uses there}."""
        return {pos: value for pos, (_, _, value) in self.folded.items()}


def assemble(owner, plan: SlicePlan, values: dict[str, Any], crossings: Crossings,
             tf_part: Callable[[Variant], Part] | None = None, *,
             runtimes: Callable[[Variant], list] | None = None, host: tuple | None = None,
             adaptive: bool = True, sibling: Variant | None = None,
             prior: list[float] | None = None, nested: list = ()) -> Variant:
    """The one way a Variant is put together, for `owner` (its SlicedFunction) and a
    call's `values`: by the builder, for a replicated step and from a bundle. Its TF part
    is `tf_part(variant)` (a bundle's; a replicated step's), else traced from the plan for
    `crossings`, running the callee variants `nested` (per nested call site, or None).
    Then its host program is loaded once per runtime of `runtimes(variant)` (a replicated
    step's: one per replica), else once with a `Runtime`; from `host`, (source, tree),
    where that is not the plan's (a bundle's). sibling: the variant of the same plan whose
    verdict against eager it shares; prior: the owner's plain calls' times (payoff.py)."""
    variant = Variant(owner, plan, values, adaptive,
                      sibling.timer if sibling is not None else None, prior)
    variant.folded = list(crossings.folded.values())
    variant.nested = list(nested)
    if tf_part is None:
        tf_part = functools.partial(traced, values=values, crossings=crossings)
    variant.part = tf_part(variant)
    made = runtimes(variant) if runtimes is not None else [Runtime(variant, owner.callee)]
    source, tree = host if host is not None else (None, plan.host)
    variant.host_fns = [load(source, tree, owner.fn, {"_gpe_rt": rt}) for rt in made]
    variant.host_fn = variant.host_fns[0]
    return variant


def traced(variant: Variant, values: dict, crossings: Crossings) -> Part:
    """The variant's TF part traced for `crossings` (not registered: a part of its own)."""
    return build_part(variant.plan, variant.tf_factory(), bound(variant.plan, values),
                      crossings.specs, crossings.layouts, crossings.constants,
                      [v.part if v is not None else None for v in variant.nested])


def bound(plan: SlicePlan, values: dict[str, Any]) -> dict[str, Any]:
    """The arguments bound into the TF part when it is traced."""
    return {n: values[n] for n in plan.bound}


class Variant:
    """One sliced version of a function, for one call key (made by `assemble`)."""

    def __init__(self, owner, plan: SlicePlan, bound_values: dict[str, Any],
                 adaptive: bool = True, sibling_timer=None, prior: list[float] | None = None):
        # the owner weakly (it holds its variants): a dropped function's parts leave the sink
        if not isinstance(owner, weakref.ProxyTypes):
            owner = weakref.proxy(owner)
        self.owner, self.plan = owner, plan
        self.session: Session = get_session()
        self.part: Part | None = None
        self._registration: Registration | None = None
        self.replay: Replay | None = None  # Keras losses its TF part adds (host/runtime/losses.py)
        self.host_fn = None
        self.host_fns: list = []  # its host programs: one, or one per replica (host_fn first)
        # prior: the function's plain eager calls before it was built (payoff.py)
        # (not timed in a worker of several: payoff.lockstep)
        self.timer = AdaptiveTimer(adaptive and not lockstep(), sibling=sibling_timer,
                                   prior=prior, disturbed=self.session.sink_started_since,
                                   fenced=self.session.fence_waited)
        self.folded: list = []  # entry values used as constants: (name, index, value)
        self.stale = False  # a call fell back mid-call: build again (see fell_back)
        self.reused = False  # a call ran it after the one it was built for (function.CHURN)
        self.nested: list = []  # per nested call site: the callee's variant its TF part runs
        self.runs: list = []  # the profile observations it was built from
        # a call reached a gate no profile call had (unreached.reached): runs[-1] with
        # what it sent there, to build it again from
        self.learned: dict | None = None
        # what the TF part captured when traced (held: their ids are in the call key)
        self.held = [signature.resolve(g, bound_values, owner.keys.lookup)
                     for g in plan.captures]

    @property
    def eager_faster(self) -> bool:
        return self.timer.eager_faster

    def tf_factory(self) -> Callable:
        """`tf_factory(runtime, bound)` of tfprog's part builders: the plan's TF program."""
        fn, program = self.owner.fn, self.plan.tf
        return lambda rt, k: load(None, program, fn, {"_gpe_rt": rt, "_gpe_k": k},
                                  signature=False)

    def fell_back(self, reason: str, channel: int) -> None:
        """A value computed mid-call did not fit its channel; the host finished that call
        eagerly. The variant is built again from new profile calls after it, but where it
        was built for one shape of a loop's values that vary (Assumptions.exact_loops: a
        last smaller batch is handed back, every call)."""
        self.owner.stats_.guard_failed(reason)
        self.stale = not (self.owner.assumed.exact_loops and
                          self.plan.channel(channel).kind == ChannelKind.LOOP)
        log.info("%s: %s; the call goes on eagerly", self.owner.__qualname__, reason)

    def registration(self) -> Registration:
        """The part's registration with the session's current sink (registered now, in an
        atomic step of its own, where it is not: building the sink is gpe's own set-up)."""
        session = self.session
        reg = self._registration
        if reg is not None and reg.generation == session.generation and not session.failed:
            return reg  # every call's path
        with session.blocking:
            return self._register()

    def _register(self) -> Registration:
        session = self.session
        if session.failed:
            session.ensure_healthy()
        reg = self._registration
        if reg is None or reg.generation != session.generation:
            started = time.perf_counter()
            with TRACER.build("instantiate", self.owner):
                reg = self._registration = session.register(self.part, self)
            if any(isinstance(e, Added) for e in self.part.losses):
                self.replay = Replay(self.part.losses, session)
            seconds = time.perf_counter() - started
            COSTS.add(seconds, built=False)
            progress("starting the graph for", self.owner.__qualname__, self.owner.where,
                     seconds)
        return reg


def callee_variant(seen) -> Variant | None:
    """The variant a nested call site runs in the TF part: the one the callee built for
    the arguments the profile call saw, if it runs sliced."""
    if seen is None:
        return None
    sliced, key = seen
    variant = sliced.variants.get(key)
    if variant is None or variant.eager_faster or variant.part is None:
        return None
    return variant


class Variants:
    """A function's variants by call key, and what is known of keys without one."""

    def __init__(self):
        self.built: dict[tuple, Variant] = {}
        self.profiles: dict[tuple, list] = {}  # key -> observations of its profile calls
        self.refused: dict[tuple, str] = {}    # key -> why it runs eagerly
        self.retired: dict[tuple, int] = {}    # key -> variants dropped after a fallback
        self.learned: dict[tuple, int] = {}    # ...after a gate no profile call reached
        self.plans: dict[tuple, SlicePlan] = {}  # key -> its plan, while it is profiled
        # get(key): the variant of a key, or None (the dict's own: on every call's path)
        self.get: Callable[[tuple], Variant | None] = self.built.get

    def profiled(self, key: tuple, plan: SlicePlan, observed: dict) -> list:
        """Note a profile run of `key` made with `plan`; the key's runs made with it (the
        calls of one key may take other plans: objects of one class whose attributes
        differ in type, d2l's Residual blocks with and without a 1x1 convolution, whose
        runs would give the channels of one plan the other's specs)."""
        observed[PLAN] = plan
        runs = self.profiles.setdefault(key, [])
        runs.append(observed)
        return [run for run in runs if run.get(PLAN, plan) == plan]

    def pooled(self, key: tuple, plan: SlicePlan) -> list:
        """Profile runs of other keys with the same plan (trees of other shapes: see
        Builder.reshaped), and note this key's plan."""
        self.plans[key] = plan
        return [run for other, runs in self.profiles.items() if other != key
                and self.plans.get(other) == plan for run in runs
                if run.get(PLAN, plan) == plan]

    def add(self, key: tuple, variant: Variant) -> None:
        self.built[key] = variant

    @property
    def full(self) -> bool:
        return len(self.built) >= MAX_VARIANTS

    def all_eager(self) -> bool:
        return all(v.eager_faster for v in self.built.values())

    def sibling(self, plan: SlicePlan) -> Variant | None:
        """A variant already built from the same plan (its key differed only in tensor
        shapes): a new one needs one profile call, folds what it folded, and keeps its
        verdict against eager."""
        return next((v for v in self.built.values() if v.plan == plan), None)

    def forget(self, key: tuple) -> None:
        """Build this key again from new profile calls."""
        self.built.pop(key, None)
        self.profiles.pop(key, None)
        self.plans.pop(key, None)

    def retire(self, key: tuple, variant: Variant) -> bool:
        """Drop a variant that fell back mid-call (new profile calls see the new values);
        True when its key's variants keep doing so (the key should run eagerly). One
        that fell back at a gate no profile call reached is built again at the next
        call, from its profile runs and what the call sent there."""
        if self.built.get(key) is variant:
            del self.built[key]
        learned = self.learned[key] = self.learned.get(key, 0) + (variant.learned is not None)
        if variant.learned is not None and learned <= MAX_LEARNED:
            self.profiles[key] = variant.runs + [variant.learned]
            return False
        self.profiles.pop(key, None)
        self.retired[key] = self.retired.get(key, 0) + 1
        return self.retired[key] >= MAX_RETIRED
