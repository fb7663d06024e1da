"""From a new call key to a built variant: plan, profile, build.

`Builder` (one per SlicedFunction) slices the function for a call's arguments (plans are
shared by keys that differ only in tensor shapes), runs the profile program eagerly with
observation points, and builds a variant from the profile runs: what crosses (`crossings`:
channel specs, folded constants, as a replicated step's build reads them too), then the
TF part and the host program (variant.assemble).
"""
from __future__ import annotations

import dataclasses
import logging
import types
import weakref

import tensorflow as tf

from ..facts import oracle, signature
from .elements import with_given
from .loader import load
from .stubs import Raised
from .outlined import Outlined
from .relaxed import differs as relaxed_differs, loops_vary
from ..runtime.trace import TRACER
from ..speculation.speculation import Assumptions
from ..speculation.specs import (NotObserved, channel_specs, leaf_shapes, sent_numbers,
                                 stable_entry_values, unreachable)
from .unreached import handed_over, kind, snapshot, unreached_lines
from .variant import Crossings, Variant, assemble, callee_variant
from ... import slicer  # (its passes: loaded at the first slicing)
from ...slicer import Refusal, SlicePlan
from ...slicer.plan import ChannelKind
from ...tfprog.channels import Unsendable, ValueSpec, read_variable, structure_of
from ...tfprog.hostvalue import SentDecides
from ...tfprog.part import NeedsEntry, PartError


def slice_function(fn, facts):
    """The slicer's pipeline, loaded at the first slicing (a program that only runs
    bundles never imports its passes)."""
    return slicer.slice_function(fn, facts)


log = logging.getLogger("gpe")
# `_gpe_rt` of a profile program: only what the user's statements call on it (a variable
# read: slicer/hoist.py's _read_value), run eagerly as the host program runs it
_PROFILING = types.SimpleNamespace(read_variable=read_variable, raised=Raised)

MAX_UNBUILT_TRIES = 3  # calls run eagerly waiting for a user's Keras layer to be built
MAX_PROFILE_RUNS = 16  # profile calls kept waiting for one to reach every crossing


class NotBuilt(Exception):
    """A variant could not be built. retry: profile this key again (the assumptions
    changed, so the next build may succeed); else the key runs eagerly, for `reason`."""

    def __init__(self, reason: str, retry: bool, keep_runs: bool = False, plan=None):
        super().__init__(reason)
        self.retry = retry
        self.keep_runs = keep_runs  # profile one more call, keeping the runs seen so far
        # a plan this call may be profiled with all the same, for its training loops'
        # bodies (outlined: sliced once the call has built its layers); its runs unused
        self.plan = plan


def _with_tf_work(plan: SlicePlan) -> SlicePlan:
    """`plan`, unless its only TF work is in training loops' bodies it outlines: then
    NotBuilt (the call is profiled with it: those bodies run sliced from their loop's
    fourth pass; a variant would run them eagerly)."""
    if plan.outlined_only:
        raise NotBuilt("its only TF work is in the training loops' bodies its profile "
                       "calls run sliced", retry=False, plan=plan)
    return plan


class Builder:
    def __init__(self, owner):
        self.owner = weakref.proxy(owner)  # the SlicedFunction (it holds this builder)
        self.plans: dict[tuple, list] = {}  # see plan: [(plan, types of its captures)]
        self.last_plan: SlicePlan | None = None
        self.taken_under: dict[int, tuple] = {}  # id(plan) -> assumptions when last taken
        self.refusals: dict[tuple, Refusal] = {}  # plan key -> the slicer's refusal
        self.iterables: dict[int, dict] = {}  # id(plan) -> its Facts.iterables
        self.unbuilt_tries = 0
        self.outlined = Outlined(self.owner)  # training loops' bodies (slicer/outline.py)
        self.unguessed: set[int] = set()  # id(plan) of plans not to speculate on (_guessed)

    def plan(self, values: dict) -> SlicePlan:
        """The plan for these arguments: sliced once, and shared by calls whose arguments
        differ only in tensor shapes and whose captured objects (`self.w`, `self.rate`)
        have the same types (the slicer looks at neither their identity nor their value:
        the TF part reads those when it is built). A refusal is kept as plans are: the
        slicer does not look at what differs between the calls that share it."""
        assumed = self.owner.assumed
        described = assumed.describe(values)
        plan_key = assumed.plan_key(described)
        if plan_key in self.refusals:
            raise self.refusals[plan_key]
        candidates = self.plans.setdefault(plan_key, [])
        for plan, captured in candidates:
            if captured == self._capture_types(plan, values):
                self.last_plan = plan
                self.taken_under[id(plan)] = assumed.plan_state()
                return _with_tf_work(plan)
        facts = signature.facts_for(described, values)
        facts = dataclasses.replace(facts, **assumed.facts(), reads=oracle.reads,
                                    iterables=assumed.iterables_for(facts.objects))
        with oracle.unbuilt as unbuilt, slicer.callees.Recording() as judged, \
                TRACER.build("slice", self.owner):  # a profile's event (runtime/trace.py)
            try:
                plan = slice_function(self.owner.fn, facts)
            except Refusal as refusal:
                self._unbuilt(unbuilt, judged)
                self.refusals[plan_key] = refusal
                raise
            except Exception as exc:  # a slicer defect: the call runs eagerly, with why
                log.debug("slicing %s failed", self.owner.__qualname__, exc_info=True)
                refusal = self.refusals[plan_key] = Refusal(
                    "slicer-error", f"the slicer failed: {type(exc).__name__}: {exc}")
                raise refusal from exc
        self._unbuilt(unbuilt, judged, plan)
        self.iterables[id(plan)] = dict(facts.iterables)
        owner = self.owner
        if self.nothing_for_graph(plan) and not (owner.auto or owner.replica_step):
            # a variant would run every statement on the host, behind gpe's crossings
            # (gpe run's functions and replicated steps: SlicedFunction._no_tf_work)
            refusal = self.refusals[plan_key] = Refusal(
                "no-tf-work", "no TF work: no statement of it runs in the graph (each is "
                "host work: see explain)", "", plan.filename, plan.lineno)
            raise refusal
        candidates.append((plan, self._capture_types(plan, values)))
        self.last_plan = plan
        self.taken_under[id(plan)] = assumed.plan_state()
        if log.isEnabledFor(logging.DEBUG):  # the sources are unparsed only for this
            log.debug("sliced %s\n--- host ---\n%s\n--- TF ---\n%s", self.owner.__qualname__,
                      plan.host_source, plan.tf_source)
        return _with_tf_work(plan)

    def nothing_for_graph(self, plan: SlicePlan) -> bool:
        """Nothing of `plan` runs in the graph, and no loop over an object remains that
        the profile calls may yet see give tensors (it is speculated on first)."""
        told, refused = self.iterables.get(id(plan), {}), self.owner.assumed.not_iterated
        return plan.host_only_work and all(p in told or p in refused for p in plan.iterated)

    def current(self, plan: SlicePlan) -> bool:
        """Whether what the slicer is told about arguments (ints sent, not folded; names
        that cannot cross; numbers on objects sent) is still what it was when `plan` was
        taken for a call: a recursive call profiled meanwhile may have changed it."""
        return self.taken_under.get(id(plan)) == self.owner.assumed.plan_state()

    def _unbuilt(self, layers: list, judged: list, plan: SlicePlan | None = None) -> None:
        """A user's Keras layer not built yet (its first call builds it) was judged: slice
        again at the next call rather than keep a plan that runs it on the host, and
        judge again the callees judged meanwhile (`self.forward(x)` calling the model)."""
        if layers:
            slicer.callees.forget(judged)
        if layers and self.unbuilt_tries < MAX_UNBUILT_TRIES:
            self.unbuilt_tries += 1
            raise NotBuilt(f"{type(layers[0]).__name__} is not built yet", retry=True,
                           plan=plan if plan is not None and plan.outlines else None)

    def _capture_types(self, plan: SlicePlan, values) -> tuple:
        """What a plan depends on of what it captured: their types, and the values of the
        flags it took one branch on (plan.folds)."""
        lookup = self.owner.keys.lookup
        return tuple(oracle.plan_type(signature.resolve(g, values, lookup))
                     for g in plan.captures) + tuple(
            _flag(signature.resolve(path, values, lookup)) for path in plan.folds)

    def profile(self, plan: SlicePlan, args, kwargs):
        """Run the function eagerly with observation points: (its result, what crossed)."""
        observed: dict = {}
        callee = self.owner.callee

        def observe(index, vals):
            if type(index) is tuple and index[0] == "iterated" and index[2] == 0 and \
                    type(vals[0]) is tuple and vals[0]:  # `for batch in loader`: a tuple
                index, vals = (*index[:2], len(vals[0])), vals[0]  # as `for x, y in ...`
            observed[index] = [snapshot(v) for v in vals]
            kinds = observed.setdefault(("kinds", index), [set() for _ in vals])
            shapes = observed.setdefault(("shapes", index), [set() for _ in vals])
            for seen, shaped, value in zip(kinds, shapes, vals):
                seen.add(kind(value))
                shaped.add(leaf_shapes(value))

        def observe_call(slot, fn, *call_args, **call_kwargs):
            """A call of a function gpe slices too: which of its variants this call takes
            (its key, looked up once the caller is built)."""
            sliced, all_args = callee(fn, call_args)
            result = sliced(*all_args, **call_kwargs)  # profiled and built as any call
            # the key after the call: building a variant can add guards to it
            observed[("call", slot)] = (sliced, sliced.key_for(all_args, call_kwargs))
            return result

        program = load(None, plan.profile, self.owner.fn,
                       {"_gpe_obs": observe, "_gpe_obs_call": observe_call,
                        "_gpe_rt": _PROFILING,
                        "_gpe_obs_outlined": self.outlined.taker(plan.outlines)})
        return program(*args, **kwargs), observed

    def _exact_loops(self, exc: Exception, plan: SlicePlan, runs: list) -> None:
        """A part whose loops take values of any size failed to trace: build it with
        each loop's values at the largest shape seen, the others handed back to the host
        (a last smaller batch, every call). Raises NotBuilt where that is new."""
        assumed = self.owner.assumed
        if not assumed.exact_loops and loops_vary(plan, runs, assumed.relaxed):
            assumed.exact_loops = True
            log.info("%s: no variant for a loop's values of any size (%s); one for the "
                     "largest seen instead", self.owner.__qualname__, exc)
            raise NotBuilt(str(exc), retry=True, keep_runs=True) from None

    def _fold_or_send(self, exc: PartError, plan: SlicePlan, runs: list) -> None:
        """The trace decided on a number the host sends: with one profile call (which folds
        nothing: speculation.py) profile one more; numbers that changed while profiling are
        sent from now on, sliced again (nothing traced as if they were fixed for the call,
        a callee given one); else the key runs eagerly. Raises NotBuilt."""
        assumed = self.owner.assumed
        if len(runs) < 2:
            raise NotBuilt(str(exc), retry=True, keep_runs=True) from None
        changing = sent_numbers(plan, runs) - assumed.unfolded
        if not changing:
            raise NotBuilt(str(exc), retry=False) from None
        assumed.unfolded |= changing
        log.info("%s: %s; slicing again with %s sent", self.owner.__qualname__, exc,
                 ", ".join(sorted(changing)))
        raise NotBuilt(str(exc), retry=True) from None

    def _speculated(self, plan: SlicePlan, runs: list, values: dict) -> set[str]:
        """The iterated objects `plan` was sliced speculating on (Facts.iterables), checked
        against what the profile `runs` saw: each gave tensors, or the function is sliced
        again without that speculation (NotBuilt); an object the runs saw give tensors and
        not speculated on yet is from now on (sliced again)."""
        assumed = self.owner.assumed
        seen, mixed = _iterated_kinds(runs)
        told = self.iterables.get(id(plan), {})
        wrong = {p for p in plan.iterated if p in told and (p in mixed or p not in seen)}
        if wrong:
            self._unspeculate(wrong, "iterating it did not give tensors in every profile "
                                     "call")
        new = {p: seen[p] for p in plan.iterated if p in seen and p not in mixed
               and p not in told and p not in assumed.not_iterated}
        if new:  # JANUS: speculate that iterating these objects gives such tensors
            assumed.iterables.update(new)
            log.info("%s: iterating %s gave tensors in the profile calls; slicing again "
                     "with them", self.owner.__qualname__, ", ".join(sorted(new)))
            raise NotBuilt("iterated objects gave tensors", retry=True)
        speculated = {p for p in plan.iterated if p in told}
        lookup = self.owner.keys.lookup
        misfits = {p for p in speculated  # (a steady dataset gives no misfit to hand back)
                   if not steady_dataset(signature.resolve(p, values, lookup))}
        if misfits and not plan.rescuable:
            self._unspeculate(misfits, "the plan cannot hand a misfit back")
        return misfits

    def _unspeculate(self, paths: set[str], why: str) -> None:
        """Give up the speculation on what iterating `paths` gives (an element that does not
        fit could not be handed back to the host mid-call, or was not a tensor): sliced
        again without it."""
        assumed = self.owner.assumed
        assumed.not_iterated |= paths
        for path in paths:
            assumed.iterables.pop(path, None)
        log.info("%s: %s: %s; slicing again without speculating on it",
                 self.owner.__qualname__, ", ".join(sorted(paths)), why)
        raise NotBuilt(why, retry=True)

    @staticmethod
    def reshaped(plan: SlicePlan, values: dict, sibling) -> dict | None:
        """For arguments that differ from a sibling variant's (same plan) only in the shape
        of a tree of data objects (a new Structure: JANUS's variant per structure), the
        observations to build from without an eager profile call (`sibling` may be a
        list of profile runs: then None where they are not of such arguments): the sibling's last
        profile call's, with this call's entry values; only where nothing else crosses
        host->TF (no value the host computes mid-call, whose type or shape may depend on
        the tree). Else None."""
        runs = sibling if isinstance(sibling, list) else getattr(sibling, "runs", None)
        if not runs or not any(structure_of(v)[0] is not None for v in values.values()):
            return None
        entry = next((c for c in plan.channels if c.kind == ChannelKind.ENTRY), None)
        if entry is None or any(name not in values for name in entry.names):
            return None
        if any(c.to_tf and c.names and c.kind != ChannelKind.ENTRY for c in plan.channels):
            return None  # values sent mid-call: only a profile call of this shape shows them
        run = dict(runs[-1])
        run[entry.index] = [values[name] for name in entry.names]
        return run

    def build(self, plan: SlicePlan, values: dict, runs: list, sibling: Variant | None,
              adaptive: bool, speculate: bool = True) -> Variant:
        """A variant from the profile runs of its key (raises NotBuilt). speculate: once
        the key had its profile calls, a gate none of them reached is built as never
        reached (host/variants/unreached.py); not for a bundle (built with no calls)."""
        owner, assumed = self.owner, self.owner.assumed
        speculated = self._speculated(plan, runs, values)
        guess = speculate and id(plan) not in self.unguessed and (sibling is not None or len(
            runs) >= max(1, owner.profile_calls - self.unbuilt_tries))
        try:
            seen = crossings(plan, runs, assumed, sibling, guess)
            given, held = with_given(plan, seen.specs, seen.layouts, values,
                                     owner.keys.lookup)
            seen = dataclasses.replace(seen, specs=given)
            guess = guess and bool(unreached_lines(plan, seen.specs))  # (speculated)
            # as fast as its sibling (the first of the two to settle gives the other its verdict)
            with TRACER.build("trace", owner):  # a profile's event (runtime/trace.py)
                variant = assemble(owner, plan, values, seen, adaptive=adaptive,
                                   sibling=sibling, prior=owner.payoff.times,
                                   nested=[callee_variant(runs[-1].get(("call", slot)))
                                           for slot in range(len(plan.nested))])
            variant.runs = list(runs)  # a sibling built for a tree of another shape uses them
            variant.timer.profiled = list(owner.profile_times)
            if speculated and not _hands_back(plan, variant):
                self._unspeculate(speculated, "a loop of its TF part cannot hand a misfit "
                                              "back")
            self._checked(plan, variant, values, runs, seen, guess)
            if any(variant.part.specs.get(k) != given[k] for k in held):
                # a loop took its values any size but what their dataset gives: the key
                # holds that dataset (an argument's, its element_spec, already does)
                owner.keys.add_guards(tuple(set(held.values())), values)
            return variant
        except Unsendable as exc:
            if exc.names and not set(exc.names) <= assumed.host_only:
                # slice again with TF work reading those names on the host
                assumed.host_only |= set(exc.names)
                log.info("%s: %s; slicing again", owner.__qualname__, exc)
                raise NotBuilt(str(exc), retry=True) from None
            raise NotBuilt(str(exc), retry=False) from None
        except NotObserved as exc:
            self._not_observed(exc, plan, runs, guess)
        except NeedsEntry as exc:
            if assumed.entry_always:
                raise NotBuilt(str(exc), retry=False) from None
            assumed.entry_always = True  # an entry that carries only the seeds
            log.info("%s: %s; slicing again with an entry", owner.__qualname__, exc)
            raise NotBuilt(str(exc), retry=True) from None
        except (PartError, Refusal) as exc:
            if guess:  # perhaps the speculation's doing: not speculated on again
                self.unguessed.add(id(plan))
                raise NotBuilt(str(exc), retry=True, keep_runs=True) from None
            if isinstance(exc.__cause__, SentDecides):  # Python deciding on a sent number
                self._fold_or_send(exc, plan, runs)
            self._exact_loops(exc, plan, runs)
            relaxed = assumed.unrelax(values)
            if relaxed:  # built for exact shapes instead (a variant per shape)
                log.info("%s: no variant for any size of %s (%s); one per shape instead",
                         owner.__qualname__, ", ".join(relaxed), exc)
                raise NotBuilt(str(exc), retry=True) from None
            raise NotBuilt(str(exc), retry=False) from None

    def _checked(self, plan: SlicePlan, variant: Variant, values: dict, runs: list,
                 seen: Crossings, guess: bool) -> None:
        """A variant built for any size of an argument that computes otherwise than for
        the call's own sizes is not kept: a variant per shape instead (as where a relaxed
        part fails to trace; host/variants/relaxed.py). Then `_guessed`."""
        assumed = self.owner.assumed
        why = relaxed_differs(variant, plan, values, runs, seen, assumed, guess)
        if why:
            log.info("%s: %s; one variant per shape of %s instead", self.owner.__qualname__,
                     why, ", ".join(assumed.unrelax(values)))
            raise NotBuilt(why, retry=True)
        self._guessed(plan, variant)

    def _guessed(self, plan: SlicePlan, variant: Variant) -> None:
        """A variant built speculating that no call reaches some gates (Unreached) is kept
        only where a call that does can be handed over to the host there; else the plan
        is not speculated on again (NotObserved: its key profiles more calls)."""
        lines = unreached_lines(plan, variant.part.specs)
        if not lines:
            return
        if not handed_over(plan, variant.part):
            self.unguessed.add(id(plan))
            raise NotObserved(f"no profile call reached line {lines}, where the TF part "
                              "could not hand the call over to the host")
        log.info("%s: no profile call reached line %s; built speculating that no call does "
                 "(one that does runs eagerly from there, and it is built again)",
                 self.owner.__qualname__, lines)

    def _not_observed(self, exc: NotObserved, plan: SlicePlan, runs: list, guess: bool):
        """No profile call reached a crossing that could not be speculated on: raises
        NotBuilt (slice again, profile one more call, or run eagerly)."""
        assumed = self.owner.assumed
        names = _never_iterated(plan, runs, guess)
        if names and not names <= assumed.host_only:
            # a loop the host decides never iterated in the profile calls (`for e in
            # extra` over an empty list): slice again with the TF work that reads what
            # its iterations would send on the host (it runs there as eager does)
            assumed.host_only |= names
            log.info("%s: %s; slicing again with the TF work reading %s on the host",
                     self.owner.__qualname__, exc, ", ".join(sorted(names)))
            raise NotBuilt(str(exc), retry=True) from None
        if len(runs) < MAX_PROFILE_RUNS:  # e.g. an early return on the first calls
            raise NotBuilt(str(exc), retry=True, keep_runs=True) from None
        raise NotBuilt(f"{exc} in {len(runs)} calls", retry=False) from None


def _flag(value):
    """A folded flag as a plan depends on it: a number by value, an object by its type."""
    return (type(value), value) if type(value) in (bool, int, float) or value is None \
        else oracle.plan_type(value)


def steady_dataset(obj) -> bool:
    """A tf.data.Dataset that gives the same shapes each time it is iterated, as the
    profile calls saw: of known cardinality (no filter), its tensors' shapes known but
    the batch dimension (d2l's loaders: `from_tensor_slices(...).batch(n)`, a smaller
    last batch at the same place each epoch)."""
    if not isinstance(obj, tf.data.Dataset):
        return False
    specs = tf.nest.flatten(obj.element_spec)
    return int(obj.cardinality()) >= 0 and all(
        isinstance(s, tf.TensorSpec) and s.shape.rank is not None and
        all(d is not None for d in s.shape.as_list()[1:]) for s in specs)


def _iterated_kinds(runs: list) -> tuple[dict[str, int], set[str]]:
    """What the profile `runs` saw iterating objects (partition.py's `iterated`
    observations): ({path: tensors per element} where every iteration gave tensors of one
    dtype per position, the paths where one did not)."""
    seen: dict[str, int] = {}
    mixed: set[str] = set()
    for run in runs:
        for index, kinds in run.items():
            if not (type(index) is tuple and index[0] == "kinds" and type(index[1]) is tuple
                    and index[1][0] == "iterated"):
                continue
            _, path, count = index[1]
            if all(len(k) == 1 and isinstance(s := next(iter(k)), ValueSpec) and not s.python
                   for k in kinds):
                seen[path] = count
            else:
                mixed.add(path)
    return seen, mixed


def _hands_back(plan: SlicePlan, variant: Variant) -> bool:
    """Where the values sent with an iteration of a loop the host decides do not fit, the
    host can finish the call eagerly: the plan is rescuable, and each loop that carries TF
    values hands them back (a loop carrying none just stops)."""
    rescues = dict(plan.rescues)
    return plan.rescuable and all(
        c.index not in rescues or variant.part.specs.get(rescues[c.index]) is not None
        for c in plan.channels if c.kind == ChannelKind.LOOP and c.to_tf and c.names)


def _never_iterated(plan: SlicePlan, runs: list, guess: bool = False) -> set:
    """The names host loops' iterations would send the TF part, where the only crossings
    into it that no profile call reached are such loops' flags (they never iterated),
    besides the gates speculated on (`guess`: specs.unreachable); else an empty set
    (another crossing was not reached)."""
    channels = [c for c in plan.channels if c.to_tf and c.names
                and not any(c.index in run for run in runs)
                and not (guess and unreachable(plan, c))]
    if not channels or any(c.kind != ChannelKind.LOOP for c in channels):
        return set()
    return {n for c in channels for n in c.names}


def crossings(plan: SlicePlan, runs: list, assumed: Assumptions, sibling: Variant | None = None,
              speculate: bool = False) -> Crossings:
    """What the profile `runs` say a variant of `plan` carries across, under what is
    `assumed` of the arguments (a sibling's folded values stay folded; `speculate`: see
    channel_specs). Raises Unsendable, NotObserved, NotBuilt (host_values_only)."""
    specs, layouts = channel_specs(plan, runs, assumed.relaxed, speculate,
                                   assumed.exact_loops)
    host_values_only(plan, runs)
    folded = stable_entry_values(plan, runs, layouts, assumed.unfolded,
                                 sibling.folded if sibling is not None else ())
    return Crossings(specs, layouts, folded)


def host_values_only(plan: SlicePlan, runs: list) -> None:
    """A gate inside a TF `with` block takes only Python and NumPy values from host code in
    the block: a tensor made there would reach the TF part's GradientTape as a constant,
    where eager's tape sees how it was computed."""
    for k, inside in plan.with_gates:
        channel = plan.channel(k)
        for run in runs:
            for name, value in zip(channel.names, run.get(k, ())):
                if name in inside and any(_is_tensor(leaf) for leaf in tf.nest.flatten(value)):
                    what = plan.spell(name)
                    raise NotBuilt(f"{what} ({plan.where(channel.lineno)}): a tensor made by "
                                   "host code inside a `with` block cannot cross into it (its "
                                   "GradientTape would not see how it was computed; compute "
                                   "it with TF work only, or before the block)"
                                   + plan.made_by(name), retry=False)



def _is_tensor(value) -> bool:
    return isinstance(value, (tf.Tensor, tf.Variable)) or hasattr(value, "_gpe_pending")
