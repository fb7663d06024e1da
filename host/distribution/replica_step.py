"""A per-replica step with host work (`print`, `.numpy()`, Python lists), sliced: the host
part runs once per replica, the TF part is one graph holding every replica's work.

Eagerly, MirroredStrategy (and MultiWorkerMirroredStrategy: `mirrored_run`) runs
`strategy.run(step)` by calling the step once per local replica, each in a thread of its
own, one thread at a time in replica order, each up to its next `merge_call` (an
optimizer's all-reduce) or its end; the merge function runs once all are paused there. So
the step's host effects come segment by segment: every replica's before the first
merge_call, in replica order, then every replica's after it, and so on.

`HostWorkSteps` runs the step's host program (its plan's, as for any sliced call) in those
very threads: `strategy.run` is called as eagerly, with each replica thread running the
host program bound to its replica's channels. The TF part (tfprog/replica_part.py) is
traced under the strategy: one graph function, run by the sink once per step, in which
TensorFlow runs every replica's TF program in its replica context, with the all-reduce.
Where the TF program's replica reaches a merge_call, the host program calls
`merge_call` too (a no-op merge), right after the last gate before it (the host has done
all its work that comes before the merge in program order: a TF effect after host work
waits at a gate); so MirroredStrategy hands over from replica to replica at the same
points as eagerly, and the host effects come in eager's order.

The first calls (3) run eagerly as profile calls (replica 0's observed; every replica's
arguments must give the same call key); then the variant is built. A call whose replicas'
keys differ from the built one runs eagerly (a guard failure). Anything not sliceable
this way (a refusal, a failed trace) leaves the step running eagerly, with its reason.
"""
from __future__ import annotations

import functools
import os

import tensorflow as tf
from tensorflow.python.distribute import distribute_utils
from tensorflow.python.distribute import values as dist_values

from ..variants.stubs import CallContext, EntryGuardFailed, Runtime, to_components
from ..variants.builder import NotBuilt, crossings
from ..variants.variant import Crossings, assemble, bound
from ...slicer import Refusal
from ...slicer.plan import ChannelKind
from ...tfprog.part import Part, PartError
from ...tfprog.replica_part import build_replica_part

PROFILE_CALLS = 3
_REFUSED_KINDS = (ChannelKind.LOOP, ChannelKind.BRANCH)


def _no_merge(strategy, *args):
    return None


class _ReplicaRuntime(Runtime):
    """`_gpe_rt` of replica `replica`'s host program: its channels are the part's
    `replica`-th block; only replica 0 starts the call (the part number)."""

    def __init__(self, variant, callee, replica: int, batons: dict):
        super().__init__(variant, callee)
        self.replica, self.batons = replica, batons
        self.rescuable = False  # a rescue would leave the other replicas' merge waiting
        self.context = functools.partial(_ReplicaContext, self)


class _ReplicaContext(CallContext):
    def begin(self, entry_values) -> None:
        rt = self.rt
        n = len(rt.variant.plan.channels)
        if rt.replica == 0:
            super().begin(entry_values)
        else:  # the call is started: send this replica's entry values only
            self.channels = rt.variant.registration().channels
            if rt.entry is not None:
                channel = self.channels[n * rt.replica + rt.entry]
                components = to_components(entry_values, channel)
                with self.blocking:
                    channel.send(components)
            self.started = True
        self.channels = self.channels[n * rt.replica:n * (rt.replica + 1)]
        self._hand_over(None)

    def gate(self, site: int, values) -> bool:
        result = super().gate(site, values)
        self._hand_over(self.rt.sites[site])
        return result

    def _hand_over(self, gate) -> None:
        """The merge_calls the TF part makes after this gate (None: before any gate)."""
        for _ in range(self.rt.batons.get(gate, 0)):
            tf.distribute.get_replica_context().merge_call(_no_merge)


class _ReplicaParts:
    """What `assemble` makes a per-replica step's variant with: one TF part for every
    local replica, traced under the strategy, and a host program per replica, each
    handing over at the merge_calls its TF program makes (see the module doc)."""

    def __init__(self, values: dict, seen: Crossings, strategy, replicas: int):
        self.values, self.seen, self.strategy, self.replicas = values, seen, strategy, replicas
        self.batons: dict = {}  # gate (None: before any) -> merge_calls the TF part makes

    def tf_part(self, variant) -> Part:
        seen = self.seen
        traced = build_replica_part(variant.plan, variant.tf_factory(),
                                    bound(variant.plan, self.values), seen.specs,
                                    seen.layouts, seen.constants, self.strategy, self.replicas)
        for gate in traced.merges:
            self.batons[gate] = self.batons.get(gate, 0) + 1
        return traced.part

    def runtimes(self, variant) -> list:
        return [_ReplicaRuntime(variant, variant.owner.callee, r, self.batons)
                for r in range(self.replicas)]


class HostWorkSteps:
    """strategy.run(step) for one sliced step (`sliced`, bound to `obj` or not) whose host
    work keeps it out of a replicated trace: profile, build, run (see the module doc)."""

    def __init__(self, strategy, sliced, obj, original):
        self.strategy, self.sliced, self.obj, self.original = strategy, sliced, obj, original
        self.stats = sliced.stats_  # the step's own statistics count these calls
        self.runs: list = []
        self.key = self.plan = self.variant = None
        self.refused: str | None = None

    def _all_args(self, args):
        return args if self.obj is None else (self.obj, *args)

    def __call__(self, args, kwargs):
        self.stats.calls += 1
        return self.run(args, kwargs)

    def run(self, args, kwargs):
        """strategy.run(step) for a call counted already (as the replicated call that
        found the step's host work is)."""
        sliced, stats = self.sliced, self.stats
        local = len(self.strategy.extended.worker_devices)
        if self.refused is None:
            try:
                per = [distribute_utils.select_replica(r, (tuple(args), dict(kwargs)))
                       for r in range(local)]
                keys = {sliced.call_key(self._all_args(a), k) for a, k in per}
            except Exception as exc:  # noqa: BLE001 (arguments it cannot key)
                keys, self.refused = set(), f"its arguments: {exc}"
            if self.refused is None and len(keys) == 1 and (self.key is None
                                                            or keys == {self.key}):
                self.key = next(iter(keys))
                if self.variant is not None:
                    return self._sliced(per, args, kwargs)
                return self._profile(per, args, kwargs, local)
            if self.refused is None:
                stats.guard_failed("the replicas' arguments differ from the built step's")
        stats.eager_calls += 1
        return self.original(self.strategy, self._plain, args, kwargs)

    def _run(self, fn, local: int, args, kwargs):
        """strategy.run(fn) as eagerly, fn given its local replica's index first."""
        index = dist_values.PerReplica(tuple(range(local)))
        return self.original(self.strategy, fn, (index, *args), kwargs)

    def _plain(self, *args, **kwargs):
        return self.sliced.fn(*self._all_args(args), **kwargs)

    def _profile(self, per, args, kwargs, local: int):
        sliced, stats = self.sliced, self.stats
        values = sliced.keys.values(self._all_args(per[0][0]), per[0][1])
        try:
            self.plan = plan = sliced.builder.plan(values)
        except Refusal as exc:
            return self._refuse(str(exc), args, kwargs)
        flow = next((c for c in plan.channels if c.kind in _REFUSED_KINDS), None)
        if flow is not None or plan.nested:
            where = plan.where(flow.lineno) if flow is not None else "a nested sliced call"
            return self._refuse(f"host control flow around TF work ({where}): a merge_call "
                                "cannot be traced inside the TF part's tf.cond or loop",
                                args, kwargs)
        observed = []

        def profiled(replica, *a, **k):
            if replica == 0:
                result, seen = sliced.builder.profile(plan, self._all_args(a), k)
                observed.append(seen)
                return result
            return self._plain(*a, **k)

        stats.profile_calls += 1
        stats.eager_calls += 1
        result = self._run(profiled, local, args, kwargs)
        self.runs += observed
        if len(self.runs) >= PROFILE_CALLS:
            self._build(values, local)
        return result

    def _build(self, values, local: int) -> None:
        sliced, plan = self.sliced, self.plan
        try:
            parts = _ReplicaParts(values, crossings(plan, self.runs, sliced.assumed),
                                  self.strategy, local)
            variant = assemble(sliced, plan, values, parts.seen, parts.tf_part,
                               runtimes=parts.runtimes, adaptive=False)
        except (PartError, Refusal, NotBuilt, Exception) as exc:  # noqa: BLE001 (its reason)
            self.refused = f"{exc}"
            sliced.note(f"strategy.run's step with host work {host_lines(plan)} is not "
                        f"sliced per replica: {exc}")
            return
        self.variant = variant
        sliced.install(None, variant, "per replica: " + ", ".join(f"{n}" for n in values))

    def _refuse(self, reason: str, args, kwargs):
        self.refused = reason
        self.sliced.note(f"strategy.run's step with host work is not sliced per replica: "
                         f"{reason}")
        self.stats.eager_calls += 1
        return self.original(self.strategy, self._plain, args, kwargs)

    def _sliced(self, per, args, kwargs):
        variant, stats = self.variant, self.stats
        session = variant.session
        if not session.enter_call():
            stats.eager_calls += 1
            return self.original(self.strategy, self._plain, args, kwargs)
        try:
            stats.graph_calls += 1

            def host(replica, *a, **k):
                result = variant.host_fns[replica](*self._all_args(a), **k)
                return tf.nest.map_structure(_resolved, result)
            return self._run(host, len(variant.host_fns), args, kwargs)
        except EntryGuardFailed as exc:  # replica 0's begin: nothing was sent
            stats.graph_calls -= 1
            failed = exc
        finally:
            session.exit_call()
        stats.guard_failed(str(failed))
        if failed.name is not None:  # a folded number changed: profile and build again
            self.sliced.assumed.unfold(failed.name)
            self.variant, self.runs, self.key = None, [], None
        stats.eager_calls += 1
        return self.original(self.strategy, self._plain, args, kwargs)


def _resolved(value):
    return value.resolve() if hasattr(value, "_gpe_pending") else value


def host_lines(plan) -> str:
    """"at file:line (`source`: why), ..." for a plan's host statements (up to three, its
    returns aside)."""
    name = os.path.basename(plan.filename)
    lines = [f"{name}:{r.lineno} (`{plan.user_terms(r.source, quote=False)}`: "
             f"{plan.user_terms(r.reason).removeprefix('host: ')})" for r in plan.lines
             if r.place == "host" and r.lineno != plan.lineno and "returns" not in r.reason]
    more = f" and {len(lines) - 3} more" if len(lines) > 3 else ""
    return f"at {', '.join(lines[:3])}{more}" if lines else ""
