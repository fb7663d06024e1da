"""The TF part of a per-replica step with host work, for every local replica of a
MirroredStrategy (or MultiWorkerMirroredStrategy) at once.

`build_replica_part(plan, ..., strategy, replicas)` traces one graph function whose body is
`strategy.run(the plan's TF program)`: TensorFlow runs the program once per replica in the
replica context (each replica's ops on its device), with the cross-replica synchronisation
(`merge_call`: an optimizer's all-reduce) inside the graph. Each replica has its own
channels: the function takes the plan's queues once per replica (replica-major: replica r's
channel c is argument `r * len(plan.channels) + c`), and the Part's plan lists them so
(the session makes one queue each).

A gate (a TF effect that follows host work waits for the host) runs the rest of its block
unconditionally here: a `merge_call` cannot be traced inside `tf.cond`. The host cancels
such a gate (it left the call) by sending 0: an assert on the flag then fails the graph
call before the gated effects run (the whole replicated call: every replica's rest and the
all-reduce). Rescues and legacy random ops are refused.

Tracing records where the replicas' `merge_call`s are: `Traced.merges` lists, per merge (in
program order), the last gate channel the TF program passed before it (None: none), which
is where the host part must hand over to the next replica (host/distribution/replica_step.py).
"""
from __future__ import annotations

import contextlib
import dataclasses
import threading

import tensorflow as tf
from tensorflow.python.ops import gen_logging_ops
from tensorflow.python.distribute import mirrored_run
from tensorflow.python.distribute import values as dist_values

from ..slicer.plan import Channel, ChannelKind, SlicePlan
from . import asserts, losses, randomness, recurrent
from .channels import unflatten
from .exact import exact_arithmetic
from .part import Part, PartError, RESOURCE, TraceRuntime

CANCELLED = "gpe: the host left this replicated call"

__all__ = ["CANCELLED", "build_replica_part"]


class _ReplicaTrace(TraceRuntime):
    """The trace runtime, shared by the replica threads TensorFlow traces the program in
    (they run one at a time); it notes each replica's last gate and its merge_calls."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.local = threading.local()
        self.merges: dict[int, list] = {}  # replica thread id -> [last gate per merge]
        self.unordered = False  # a merge_call outside a statement with effects

    @contextlib.contextmanager
    def line(self, lineno: int, effect: bool):
        outer = getattr(self.local, "effect", None)
        self.local.effect = effect
        try:
            with super().line(lineno, effect):
                yield
        finally:
            self.local.effect = outer

    def gate(self, queues, index, segment, carried, rescue=None, live=()):
        with tf.control_dependencies(self._earlier()):
            flag, *leaves = self._receive(queues[index], self.specs[index], [tf.int32])
        values = unflatten(self.layouts[index], leaves)
        self._note_failing_ops()
        self.local.gate = index
        go_on = gen_logging_ops._assert(tf.equal(flag, 1), [tf.constant(CANCELLED)])
        with tf.control_dependencies([go_on]):
            return segment(*values)

    def check(self, queues, index):
        """Every check waits here: whether TF work before it can fail is decided per trace
        of the program, and the replicas' traces interleave (their ops land in one list),
        so replicas could disagree; the host program is one for all."""
        self.waits.add(index)
        self.barrier(queues, index)

    def gate_in_with(self, queues, index, segment):
        """As `gate`, inside a `with` block (its GradientTape records the rest)."""
        return self.gate(queues, index, segment, ())

    def resume(self, index, segment, carried):
        """After a `with` block that held a gate: the rest runs (a cancel failed the
        call at the gate)."""
        return segment()

    def merged(self) -> None:
        """A replica's merge_call, while traced. One outside a statement with effects (an
        `all_reduce` the slicer saw as plain TF work) is not ordered after the host work
        before it (no gate there): the host part could not hand over at it."""
        if not getattr(self.local, "effect", False):
            self.unordered = True
        self.merges.setdefault(threading.get_ident(), []).append(
            getattr(self.local, "gate", None))


@contextlib.contextmanager
def _noting_merges(runtime: _ReplicaTrace):
    context = mirrored_run._MirroredReplicaContext  # noqa: SLF001
    original = context._merge_call  # noqa: SLF001

    def merge_call(self, fn, args, kwargs):
        runtime.merged()
        return original(self, fn, args, kwargs)

    context._merge_call = merge_call  # noqa: SLF001
    try:
        yield
    finally:
        context._merge_call = original  # noqa: SLF001


@dataclasses.dataclass
class Traced:
    part: Part
    merges: tuple  # per merge_call of a replica, in order: the last gate before it


def build_replica_part(plan: SlicePlan, tf_factory, bound: dict, specs: dict, layouts: dict,
                       folded: dict, strategy, replicas: int) -> Traced:
    n = len(plan.channels)
    runtime = _ReplicaTrace(plan, dict(specs), layouts, dict(folded), [], None)
    program = tf_factory(runtime, bound)

    def replica(*queues):
        return program(queues)

    def traced(*queues):
        runtime.random.graph = tf.compat.v1.get_default_graph()
        per_replica = tuple(dist_values.PerReplica(tuple(queues[r * n + c]
                                                         for r in range(replicas)))
                            for c in range(n))
        strategy.run(replica, args=per_replica)
        return tf.constant(0, tf.int32)

    traced.__name__ = f"gpe_{plan.name}_replicas"
    try:
        with exact_arithmetic(), recurrent.unrolled(), asserts.intercept(runtime.uid), \
                randomness.recording(runtime.random), _noting_merges(runtime), \
                losses.recording(losses.Recorder()) as added:
            concrete = tf.function(traced, input_signature=[RESOURCE] * (n * replicas),
                                   autograph=False).get_concrete_function()
        runtime.random.finish()
    except PartError:
        raise
    except Exception as exc:  # tracing user code can raise anything
        raise PartError(f"tracing the replicated TF part failed: {type(exc).__name__}: "
                        f"{plan.user_terms(str(exc))}") from exc
    if added.refused or added.added:
        raise PartError("a layer adds losses (`add_loss`): not sliced per replica")
    if runtime.random.count or randomness.leftover(concrete.graph) is not None:
        raise PartError("the step has random ops (not sliced per replica)")
    if runtime.unordered:
        raise PartError("a merge_call (a cross-replica all-reduce) outside a statement "
                        "with effects: the host part could not hand over to the next "
                        "replica at it in eager's order")
    merges = list(runtime.merges.values())
    if len(merges) != replicas or any(m != merges[0] for m in merges):
        raise PartError("the replicas made different merge_calls when traced")
    for channel in plan.channels:  # rescues are never used here; nor traced
        runtime.specs.setdefault(channel.index, None if channel.kind == ChannelKind.RESCUE
                                 else [])
    channels = tuple(Channel(r * n + c.index, c.kind, c.names, c.lineno)
                     for r in range(replicas) for c in plan.channels)
    spread = lambda d: {r * n + k: v for r in range(replicas)  # noqa: E731
                        for k, v in d.items()}
    part = Part(plan=dataclasses.replace(plan, channels=channels), function=concrete,
                specs=spread(runtime.specs), layouts=spread(layouts),
                waits=frozenset(runtime.waits), uid=runtime.uid, folded=dict(folded))
    return Traced(part, tuple(merges[0]))
