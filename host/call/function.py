"""`SlicedFunction`: what `@gpe.function` returns, and the life of a call.

A call is counted once, then goes through its phases (`_phases`): where it is made from
(a trace, a replica thread, before its payoff), its call key (callkey.py), the key's
variant, then for a new key profile and build (variants/builder.py: its first calls run
eagerly with observation, their results are eager's), for a built one timing against
eager (adaptive.py) or the sliced call. A phase that makes a variant the call can take
(a bundle's installed, a relaxed key's, one another thread built) answers AGAIN, and the
call goes through the phases once more. Anything that cannot be sliced or built runs
eagerly, counted with its reason and warned about once (stats.py).

Bundles and replicated steps make their variants as the builder does
(variants.variant.assemble) and give them to the function with `install`.
"""
from __future__ import annotations

import logging
import threading
import time
import types
import weakref
from typing import Any, Callable

from tensorflow.python.autograph.core.ag_ctx import control_status_ctx
from tensorflow.python.autograph.impl.api import tf_convert
from tensorflow.python import pywrap_tfe

from ..bundles.bundle_load import installed
from ..variants.builder import Builder, NotBuilt
from ..distribution.distribute import in_replica_context
from ..distribution import replicated
from ..variants.stubs import EntryGuardFailed, eager_now
from .bound import BoundSliced, by_name
from .callkey import CallKeys
from ..facts.oracle import keras_layer_class
from ..speculation.payoff import COSTS, Budget, Building, Payoff, progress
from ..facts.signature import text
from ..speculation.speculation import Assumptions, profiled_before, refolded
from ..diagnostics.stats import GpeWarning, Stats
from ..variants.variant import MAX_VARIANTS, Variant, Variants
from ...slicer import Refusal, SlicePlan

__all__ = ["GpeWarning", "SlicedFunction"]
log = logging.getLogger("gpe")
replicated.install()  # strategy.run(a sliced function) runs one replicated call

# a call phase's answer: the call goes through its phases again (SlicedFunction._phases)
AGAIN = object()
# new keys in a row, no variant running a second call, before it runs eagerly for good
# (a shape or a number relaxes within two or three; this is a key that never repeats)
CHURN = 8
USER_FRAMES = 1  # _sliced's warning names the caller of __call__ (_phases between)
WHOLE_FUNCTION_REFUSALS = frozenset({"generator", "no-source", "unsupported-function",
                                     "unsupported-statement"})


_tapes_empty = pywrap_tfe.TFE_Py_TapeSetIsEmpty  # TF's could_possibly_record, negated


class SlicedFunction:
    """A function run sliced. auto=True (as `gpe run` wraps every function): a function
    with no TF work, or one that cannot be sliced, becomes plain Python for good, and
    fallbacks are logged rather than warned about.

    What the packages below use of it (bundles, replicated steps, variants' runtimes):
    `fn`, `keys` and `lookup`, `assumed`, `builder`, `stats_`, `callee`, `call_key`,
    `guarded_key` and `install` (a variant made by variants.assemble), `note` (a
    fallback), `nested_call` and `nested_started`, `bundle_entry`/`bundle_done`."""

    _gpe_sliced = True  # what host.oracle classifies as Kind.SLICED_FN
    # AutoGraph calls an "artifact" of its own as it is: it does not convert gpe's code
    # when a tf.function traces a call (`_traced` converts the user's function, as eager)
    autograph_info__: dict = {}

    def __init__(self, fn: Callable, profile_calls: int = 3, auto: bool = False,
                 adaptive: bool = True, payoff: bool = False):
        self.fn = fn
        self.auto = auto
        # payoff: run plainly until its eager time pays for building it (payoff.py)
        self.payoff = Payoff(payoff)
        self.budget = Budget()  # what slicing may cost before a call runs sliced
        self.profile_times: list[float] = []  # the last profile calls' seconds (adaptive.py)
        self._plan_s = 0.0  # the time slicing took, for the progress line
        self.adaptive = adaptive  # run eagerly a variant that is slower sliced than eager
        self.plain = False  # decided it is plain Python: calls go straight to fn
        self.unsliced_keys = 0  # new keys met since a variant last ran twice (CHURN)
        self.profile_calls = max(1, profile_calls)
        self.assumed = Assumptions(getattr(fn, "__qualname__", repr(fn)))
        self.keys = CallKeys(fn, self.assumed)
        self.cache = Variants()
        self.builder = Builder(self)
        self.stats_ = Stats()
        self.bundled = True  # look for a bundle shipped next to fn's module (first call)
        self.bundle_entry = None  # a method's (bundle, entry: gpe.load), the objects tried:
        self.bundle_done: set[int] = set()  # see bundle_load.method_call
        self._lock = threading.RLock()
        self.replicated: list[SlicedFunction] = []  # its calls by strategy.run (replicated.py)
        self.replica_step: SlicedFunction | None = None  # (one of those: the step it runs)
        self.__wrapped__ = fn
        self.__signature__ = self.keys.signature
        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            setattr(self, attr, getattr(fn, attr, None))

    def __call__(self, *args, **kwargs):
        stats = self.stats_  # counted as _count does (inline: on every call's path)
        stats.calls += 1
        if stats.calls == stats.mark:
            stats.checkpoint()
        result = self._phases(args, kwargs)
        while result is AGAIN:  # a phase made a variant it takes: through them again
            result = self._phases(args, kwargs)
        return result

    def _count(self) -> None:
        self.stats_.calls += 1
        if self.stats_.calls == self.stats_.mark:  # now and then: for the report's later
            self.stats_.checkpoint()               # calls (stats.Stats.late)

    def _phases(self, args, kwargs):
        """One pass of a counted call: where it is made from, its key, the key's variant,
        then profile and build (a new key), time against eager, or run sliced. AGAIN where
        a phase made a variant the call can take (installed, relaxed, built meanwhile)."""
        if not eager_now():  # inside a graph being traced: plain TF
            return self._traced(args, kwargs)
        if self.plain:
            return self._eager(args, kwargs)
        if in_replica_context():  # one of a strategy's replica threads (strategy.run)
            return self._replica(args, kwargs)
        if self.payoff.waiting:
            return self._unpaid(args, kwargs)
        start = time.perf_counter()  # a sliced call's cost includes finding its variant
        key, values = self.keys.of_call(args, kwargs)
        if key is None:  # they do not bind: eager raises the same TypeError
            return self._eager(args, kwargs)
        variant = self.cache.get(key)
        if variant is None:
            if key in self.cache.refused:  # refused for good: straight to the function
                self.stats_.refused_calls += 1
                return self._eager(args, kwargs)
            # profile calls run eagerly: a tape sees their ops
            return self._new_key(key, self.keys.bound(args, kwargs) if values is None
                                 else values, args, kwargs)
        if not _tapes_empty():  # a tape watches: it must see this call's ops
            self.note("called while a GradientTape is recording", warn=False)
            return self._eager(args, kwargs)
        if not variant.timer.steady:  # still timed against eager, or runs eagerly
            if variant.eager_faster:
                self.stats_.chosen_calls += 1
                return self._eager(args, kwargs)
            if variant.timer.timing_eager:
                return self._timed_eager(variant, start, args, kwargs)
        return self._sliced(key, variant, start, args, kwargs)

    # a call of a built variant -------------------------------------------------------
    def _sliced(self, key, variant: Variant, start: float, args, kwargs):
        session = variant.session
        if not session.enter_call():
            self.note("in a forked child process (TF's thread pools did not survive the "
                       "fork)" if session.forked else "called while another sliced call "
                       "was running (nested, or from another thread)",
                       frames=USER_FRAMES)
            return self._eager(args, kwargs)
        failed = None
        if variant.reused:  # a key met again: not one that changes every call
            self.unsliced_keys = 0
        else:
            variant.reused = True
            self.budget.counting = False
        try:
            self.stats_.graph_calls += 1
            result = variant.host_fn(*args, **kwargs)
        except EntryGuardFailed as guard:  # raised before anything was sent
            self.stats_.graph_calls -= 1
            failed = guard
        finally:
            session.exit_call()
            if variant.stale and self.cache.retire(key, variant):
                self._refuse(key, "values computed during the call keep changing type")
        if failed is not None:
            # eagerly once the session is let go: its variable reads and writes then wait
            # for the calls sent before it (in the call's own thread they would not: see
            # Session.fence_target), and an error it raises has no gpe error as context
            self._entry_guard_failed(key, failed)
            return self._eager(args, kwargs)
        if not variant.timer.steady:
            verdict = variant.timer.sliced_call(start, session.fence)
            if verdict is not None:  # settled on eager (adaptive: slower than profiled)
                self.note(verdict, warn=False)
                self.plain = self.cache.all_eager()
        return result

    def _unpaid(self, args, kwargs):
        """A call before the function has paid off its build: plain, timed (payoff.py)."""
        self.stats_.unpaid_calls += 1
        start = time.perf_counter()
        try:
            return self._eager(args, kwargs)
        finally:
            if self.payoff.eager_call(time.perf_counter() - start):
                log.info("%s: %d calls took %.0f ms eagerly, more than building it is "
                         "expected to cost: slicing it", self.__qualname__,
                         self.payoff.calls, self.payoff.eager_s * 1e3)

    def _entry_guard_failed(self, key, failed: EntryGuardFailed) -> None:
        self.stats_.guard_failed(str(failed))
        if failed.name is not None:  # a folded value changed: build again
            self.assumed.unfold(failed.name)
            self.cache.forget(key)
        else:
            self.note(str(failed))

    def _timed_eager(self, variant: Variant, start: float, args, kwargs):
        self.stats_.timed_calls += 1
        try:
            return self._eager(args, kwargs)
        finally:
            verdict = variant.timer.eager_call(start)
            if verdict is not None:  # this call is counted with the verdict's note
                self.stats_.timed_calls -= 1
                self.note(verdict, warn=False)  # a choice for speed, not a failure
                self.plain = self.cache.all_eager()

    def nested_call(self, variant: Variant, args, kwargs):
        """Run `variant` inside a sliced call of another function, whose TF part runs this
        one's. The call counts when it begins (its entry sent: `nested_started`); where its
        entry does not fit (EntryGuardFailed: nothing was sent), the caller calls the
        function instead, as any call, and it counts there."""
        return variant.host_fn(*args, **kwargs)

    def nested_started(self) -> None:
        """A nested call's begin (see nested_call): counted, as one that runs sliced."""
        self._count()
        self.stats_.graph_calls += 1

    # a key without a variant ---------------------------------------------------------
    def _new_key(self, key, values, args, kwargs):
        if installed(self, values):
            return AGAIN
        if key in self.cache.refused:
            return self._eager(args, kwargs)
        if self.cache.built and key not in self.cache.profiles:
            reason = self.keys.missed(key, values, self.cache.built)
            self.stats_.guard_failed(reason)
            log.info("%s: guard failed: %s", self.__qualname__, reason)
            if self.assumed.relax(values) and self.keys.key(values) in self.cache.built:
                return AGAIN  # the relaxed variant takes this call
        with self._lock:  # another thread may have built (or refused) it meanwhile
            key = self.keys.key(values)
            if self.cache.get(key) is not None or key in self.cache.refused:
                return AGAIN
            if key not in self.cache.profiles:  # a key not met before
                self.unsliced_keys += 1
            if self.unsliced_keys > CHURN:
                return self._churned(args, kwargs)
            return self._profile_and_build(key, dict(values), args, kwargs)

    def _churned(self, args, kwargs):
        """A new key on call after call, none running sliced (a counter in a dict argument,
        a tensor an object keeps from the last call): each would be profiled or built and
        run eagerly, slower than eager. The function runs eagerly from now on."""
        last = next(reversed(self.stats_.guard_failures), None)
        return self._give_up(f"{CHURN} new argument signatures in a row, none met again"
                             + (f" (the last guard failed: {last})" if last else "")
                             + "; it runs eagerly from now on", args, kwargs)

    def _give_up(self, reason: str, args, kwargs):
        """Plain Python from now on, for `reason` (from a new key's phase: churn, budget)."""
        self.plain = True
        self.note(reason, frames=USER_FRAMES + 2)
        return self._eager(args, kwargs)

    def _profile_and_build(self, key, values, args, kwargs):
        if self.cache.full:
            self._refuse(key, f"more than {MAX_VARIANTS} argument signatures")
            return self._eager(args, kwargs)
        if self.budget.exhausted():
            return self._give_up(self.budget.describe(self.stats_.calls), args, kwargs)
        if self.assumed.relax(values) | self.assumed.note_appended(self.fn, values):
            key = self.keys.key(values)  # (the first shapes are recorded here)
        if self.assumed.note_ints(values):  # a step counter: this call profiles the
            key = self.keys.key(values)     # variant that sends it
        plan = None  # (eager calls below, outside the except: an error raised by the
        try:         # function has no gpe error as its context)
            plan = self._plan(values)
        except NotBuilt as not_yet:  # sliced again at the next call (a Keras layer it
            # calls is built by this call: the first profile call, without observations)
            log.info("%s: %s; runs eagerly", self.__qualname__, not_yet)
            self.stats_.profile_calls += 1
            if not_yet.plan is not None:  # its training loops' bodies sliced on the way
                self.stats_.eager_calls += 1
                return self.builder.profile(not_yet.plan, args, kwargs)[0]
        except Refusal as refusal:
            self._refuse(key, str(refusal))
            # no signature can change these: the function is plain Python from now on
            self.plain = self.auto or refusal.kind in WHOLE_FUNCTION_REFUSALS
        if plan is None:
            return self._eager(args, kwargs)
        if (self.auto or self.replica_step) and self.builder.nothing_for_graph(plan):
            return self._no_tf_work(values, args, kwargs, plan)
        sibling = self.cache.sibling(plan)
        reshaped = self.builder.reshaped(plan, values, sibling)
        if reshaped is None and sibling is not None:  # a folded number's new value
            reshaped = refolded(plan, values, key, self.cache.built)
        if reshaped is not None:  # a tree of another shape: no eager call needed
            self._build(key, plan, values, [reshaped], sibling)
            if self.cache.get(self.keys.key(values)) is not None:
                return AGAIN
        self.stats_.profile_calls += 1
        self.stats_.eager_calls += 1
        started = time.perf_counter()
        result, observed = self.builder.profile(plan, args, kwargs)
        seconds = time.perf_counter() - started
        self.budget.calls_s += seconds
        self.profile_times = self.profile_times[-7:] + [seconds]
        runs = self.cache.profiled(key, plan, observed)
        if reshaped is not None or self.builder.reshaped(plan, values, runs[-1:]) is not None:
            # trees of other shapes, same plan: their profile calls count for this one
            runs = self.cache.pooled(key, plan) + runs
        # a call that ran eagerly to let Keras build a layer it judged (Builder._unbuilt)
        # stands in for a profile call (folding needs two)
        needed = max(min(2, self.profile_calls),
                     self.profile_calls - self.builder.unbuilt_tries)
        if len(runs) >= (1 if sibling is not None or profiled_before(
                key, len(values), self.cache.built) else needed):
            self._build(key, plan, values, runs, sibling)
        return result

    def _no_tf_work(self, values, args, kwargs, plan: SlicePlan):
        """A plan with no TF work: plain Python from now on; where TF ops are inside host
        statements, the first says why (counted: `gpe run --report` lists it). A replicated
        call's step runs its host part once per replica where it can (replicated.py)."""
        inside = next((line for line in plan.lines if line.eager_inside), None)
        if inside is not None and not self.replica_step:
            self.note(plan.user_terms(
                f"its TF work runs on the host, eagerly: line {inside.lineno} "
                f"`{inside.source}`: {inside.reason.removeprefix('host: ')}", quote=False))
        if self.replica_step:
            self.host_work = True
            steps = replicated.host_work_steps(self, values)
            if steps is not None:
                self.plain = True
                return steps.run(tuple(values["args"]), dict(values.get("kwargs") or {}))
            self.note(f"strategy.run's step has host work "
                       f"{replicated.host_work(self, values)} (it would run once, when "
                       "traced): it runs eagerly, once per replica", warn=not self.auto)
        self.plain = True
        return self._eager(args, kwargs)

    def _plan(self, values) -> SlicePlan:
        started = time.perf_counter()
        try:
            with Building("slicing", self.__qualname__, self.where):
                return self.builder.plan(values)
        finally:
            self._plan_s = time.perf_counter() - started
            self.budget.spend(self._plan_s)
            COSTS.add(self._plan_s, built=False, slicing=True)

    def _build(self, key, plan: SlicePlan, values, runs, sibling) -> None:
        if not self.builder.current(plan):
            # what these arguments are assumed to be changed while profiling (a recursive
            # call made an int sent): built now, the variant would be stored under a key
            # the plan does not fit (an int folded in it matched any int); the next call
            # slices again
            log.info("%s: assumptions changed while profiling; slicing again",
                     self.__qualname__)
            return
        started, failed = time.perf_counter(), None
        try:
            with Building("building", self.__qualname__, self.where):
                variant = self.builder.build(plan, values, runs, sibling, self.adaptive)
        except NotBuilt as exc:
            failed = exc
        finally:
            seconds = time.perf_counter() - started
            self.budget.spend(seconds)
            COSTS.add(seconds, True, self.payoff.call_s(), self._plan_s)
            progress("slicing and building", self.__qualname__, self.where,
                     self._plan_s + seconds)
        if failed is not None:
            if failed.keep_runs:
                log.info("%s: %s; profiling one more call", self.__qualname__, failed)
            elif failed.retry:
                self.cache.profiles.pop(key, None)
            else:
                self._refuse(key, str(failed))
            return
        self.budget.attempt_ended()
        key = self.guarded_key(plan.captures, values, plan.tests)
        described = self.assumed.describe(values)
        self.install(key, variant, ", ".join(
            [f"{n}: {text(e)}" for n, e in zip(values, described)]
            + [f"{name} = {value!r}" for name, _, value in variant.folded]))

    # what bundles and replicated steps build variants through -----------------------
    def guarded_key(self, captures: tuple, values: dict, tests: tuple = ()) -> tuple:
        """The key a variant that captured `captures` is stored under, for the call of
        `values`; its captures are guarded from now on (callkey.CallKeys.add_guards)."""
        return self.keys.add_guards(captures, values, tests)

    def install(self, key: tuple | None, variant: Variant, built: str) -> None:
        """Take `variant` (made by variants.assemble) for the calls of `key` (None: its
        maker runs it, a replicated step), `built` describing it in the statistics."""
        if key is not None:
            self.cache.add(key, variant)
        self.stats_.variants += 1
        self.stats_.built.append(built)

    def _replica(self, args, kwargs):
        """A call from inside `strategy.run` (a replica's thread, meeting the others at each
        `merge_call`): eagerly, never waiting on another replica's (profiling holds a lock).
        `strategy.run(this)` does not come here (host/distribution/replicated.py)."""
        self.note("called in a tf.distribute replica context (inside strategy.run, from "
                   "a function that is not sliced)", warn=False)
        return self._eager(args, kwargs)

    # eager calls and notes -----------------------------------------------------------
    def _eager(self, args, kwargs):
        self.stats_.eager_calls += 1
        if self.budget.counting and not self.plain:  # (timed: see Budget)
            return self.budget.timed(self.fn, args, kwargs)
        return self.fn(*args, **kwargs)

    def _traced(self, args, kwargs):
        """Called while a graph is traced: the user's function, converted by AutoGraph
        when the trace converts (as a plain function called there would be)."""
        self.stats_.eager_calls += 1
        self.stats_.traced_calls += 1
        return tf_convert(self.fn, control_status_ctx())(*args, **kwargs)

    def _refuse(self, key, reason: str) -> None:
        self.cache.refused[key] = reason
        self.budget.attempt_ended()
        self.note(reason)

    def note(self, reason: str, warn: bool = True, frames: int = 0) -> None:
        """Count a fallback for `reason`, warned about once (`warn`; logged where auto);
        the warning names the code `frames` callers further out than its default."""
        self.stats_.fallback(self.__qualname__, reason, warn and not self.auto,
                             stacklevel=5 + frames)

    # introspection -------------------------------------------------------------------
    @property
    def where(self) -> str:
        code = getattr(self.fn, "__code__", None)
        return f"{code.co_filename}:{code.co_firstlineno}" if code is not None else "?"

    @property
    def variants(self) -> dict[tuple, Variant]:
        return self.cache.built

    @property
    def last_plan(self) -> SlicePlan | None:
        return self.builder.last_plan

    def key_for(self, args: tuple, kwargs: dict) -> tuple | None:
        return self.keys.key_for(args, kwargs)

    def call_key(self, args: tuple, kwargs: dict) -> tuple:
        """The key of these arguments (TypeError where they do not bind)."""
        return self.keys.key(self.keys.values(args, kwargs))

    def lookup(self, name: str) -> Any:
        return self.keys.lookup(name)

    def stats(self) -> dict[str, Any]:
        return self.stats_.as_dict()

    @staticmethod
    def callee(fn, args) -> tuple:
        """See `callee` below (static: the variants' runtimes must not hold their owner)."""
        return callee(fn, args)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        if self.auto and self.__name__ == "__call__" and keras_layer_class(type(obj)):
            return types.MethodType(self.fn, obj)  # Keras's __call__ machinery: as Python
        return BoundSliced(self, obj)

    def __reduce__(self):
        return by_name(self)


_wrappers: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def callee(fn, args) -> tuple:
    """(its SlicedFunction, the arguments it gets) for the callee of a nested call: a
    sliced function, a sliced method bound to an object, or a plain function of the user's
    (wrapped once, as `gpe run` wraps functions: plain Python after one call if it has no
    TF work)."""
    if isinstance(fn, BoundSliced):
        return fn._sliced, (fn._obj,) + tuple(args)
    if isinstance(fn, SlicedFunction):
        return fn, tuple(args)
    wrapper = _wrappers.get(fn)
    if wrapper is None:
        wrapper = _wrappers[fn] = SlicedFunction(fn, auto=True)
    return wrapper, tuple(args)
