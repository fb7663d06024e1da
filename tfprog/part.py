"""Build a sliced function's TF part into a graph function (one FunctionDef).

`build_part(plan, tf_factory, bound, specs)` traces the plan's TF program with
TensorFlow's own function machinery. The function takes one resource argument per
channel (the queue handles, so the FunctionDef does not depend on which queues it is run
with) and captures the variables it uses by handle. Tracing also finds the dtype of
every TF->host value.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import re
from dataclasses import dataclass
from typing import Any, Callable

import tensorflow as tf
from tensorflow.python.ops import gen_data_flow_ops

from ..slicer import recursion
from ..slicer.plan import ChannelKind, SlicePlan
from .channels import NONE_SPEC, ValueSpec, any_size, flatten, read_variable, unflatten
from .exact import exact_arithmetic
from .hostvalue import HostValue, Speculated, constant, python_leaf_spec
from . import asserts, iterations, losses, randomness, recurrent, rows, usercalls
from .failing import can_fail
from .unreached import Unreached, untraced

RESOURCE = tf.TensorSpec([], tf.resource)
_PY_NUMBERS = frozenset({"bool", "int", "float"})  # host values that come back as sent


class PartError(Exception):
    """The TF part could not be built (the function then runs eagerly)."""


def _check_returnable(leaf, name: str) -> None:
    """A value the TF part sends to the host must come back as the host would have had it:
    a NumPy value the host sent, given back unchanged, a Python string (a name a TF `if`
    not taken keeps), or a tensor's Keras mask (Masking, mask_zero), would come back lost."""
    if isinstance(leaf, HostValue) and leaf._spec.type_name not in _PY_NUMBERS:
        what = f"the {leaf._spec.type_name} the host sent"
    elif getattr(leaf, "_keras_mask", None) is not None:  # (a layer on the host reads it)
        what = "a tensor with its Keras mask"
    elif isinstance(leaf, (str, bytes)):
        what = f"the {type(leaf).__name__} it holds"
    else:
        return
    raise PartError(f"{name} would come back from the TF part a tensor, not {what}")


class NeedsEntry(PartError):
    """The part has random ops but no entry channel to carry their seeds: slice it again
    with one (the arguments are all folded, or there are none)."""


@dataclass
class Part:
    """A traced TF part: the concrete function and the specs of every channel."""

    plan: SlicePlan
    function: Any                      # tf ConcreteFunction(queue handles...) -> int32
    specs: dict[int, list[ValueSpec]]  # channel index -> component (leaf) specs
    layouts: dict[int, list] = dataclasses.field(default_factory=dict)  # see channels.flatten
    waits: frozenset[int] = frozenset()  # CHECK channels the host must wait on
    uid: int = 0                         # names its ops' scopes (see LINE_SCOPE)
    folded: dict = dataclasses.field(default_factory=dict)  # entry leaf -> constant used
    # per nested call site: the callee's Part this part runs there (its channels' queues
    # are passed after this part's own), or None
    nested: list = dataclasses.field(default_factory=list)
    seeds: int = 0  # legacy random ops: rows of seeds its entry carries (randomness.py)
    losses: list = dataclasses.field(default_factory=list)  # Keras losses added (losses.py)

    @property
    def queue_count(self) -> int:
        """How many queues its function takes: its channels', then each nested part's (a
        callee's own nested calls included: main -> h1 -> h0, fuzz seed 12901)."""
        return len(self.plan.channels) + sum(p.queue_count for p in self.nested
                                             if p is not None)

    @property
    def dispatch(self) -> tuple:
        """(the index of its entry channel or None, that channel's dtypes): what its
        dispatch queue carries after the word (tfprog/sink.py)."""
        entry = next((c.index for c in self.plan.channels if c.kind == ChannelKind.ENTRY),
                     None)
        return entry, tuple(self.dtypes(entry)) if entry is not None else ()

    @property
    def function_name(self) -> str:
        return self.function.function_def.signature.name

    def dtypes(self, index: int) -> list[tf.DType]:
        kind = self.plan.channel(index).kind
        if kind in (ChannelKind.LOOP, ChannelKind.BRANCH, ChannelKind.GATE):
            return [tf.int32] + [s.dtype for s in self.specs[index]]
        if kind == ChannelKind.RESCUE and self.specs[index] is None:
            return [tf.bool]  # no rescue possible there (never used)
        flag = [tf.bool] if kind in (ChannelKind.BARRIER, ChannelKind.CHECK) else []
        seeds = [tf.uint64] if kind == ChannelKind.ENTRY and self.seeds else []
        return flag + [s.dtype for s in self.specs[index]] + seeds


class TraceRuntime:
    """What the TF program calls as `_gpe_rt` while it is traced."""
    read_variable = staticmethod(read_variable)  # (slicer/hoist.py: _read_value)

    def __init__(self, plan: SlicePlan, specs: dict[int, list[ValueSpec]],
                 layouts: dict[int, list], folded: dict[int, Any], nested: list,
                 seeds: int | None = None):
        self.plan, self.specs, self.layouts, self.folded = plan, specs, layouts, folded
        self.nested = nested
        self.uid = next(_part_ids)
        self.random = randomness.Recorder(plan, self.uid, seeds)
        self.losses = losses.Recorder()  # Keras losses its layers add (losses.py)
        self.callees, self.iterations = {}, iterations.Iterations()  # (loop bodies traced)
        self.waits: set[int] = set()
        self.unchecked: list = []  # ops that can fail at run time, not yet waited for
        self.flags: dict[int, tf.Tensor] = {}  # a with-block gate's decision (gate_in_with)

    @contextlib.contextmanager
    def line(self, lineno: int, effect: bool):
        """Name the statement's ops after its line; an effect waits for ops that can fail."""
        self._note_failing_ops()
        deps = list(self.unchecked) if effect else []
        with tf.name_scope(f"gpe{self.uid}_L{lineno}"), tf.control_dependencies(deps):
            yield
        self._note_failing_ops()

    def _note_failing_ops(self) -> None:
        graph = tf.compat.v1.get_default_graph()
        ops = graph.get_operations()
        if getattr(graph, "_gpe_seen", 0) > len(ops):
            graph._gpe_seen = 0
        new = ops[getattr(graph, "_gpe_seen", 0):]
        graph._gpe_seen = len(ops)
        self.unchecked += [op for op in new if can_fail(op)]

    def check(self, queues, index):
        """The host waits here only if TF work since the last wait can fail at run time."""
        self._note_failing_ops()
        self.specs[index] = []
        if not self.unchecked:  # (in a loop, the iteration before may leave some)
            return self.iterations.pending(index, _stateful_ops())
        self.waits.add(index)
        self.barrier(queues, index)

    def entry(self, queues, index):
        """The values sent when the call starts; a Python number the profile calls always
        saw the same is used as that constant instead (the host guards its value)."""
        specs = self.specs[index] + self.random.specs
        # (an entry for random ops' seeds only has nothing to receive while they are counted)
        leaves = self._receive(queues[index], specs, []) if specs else []
        self.random.received(leaves)
        for position, value in self.folded.items():
            leaves[position] = value
        return unflatten(self.layouts[index], leaves)

    def gate(self, queues, index, segment: Callable, carried: tuple, rescue: int | None = None,
             live: tuple = ()):
        """Wait for the host; run the rest of the block (`segment`) only if it says go on
        (1). 0 cancels the rest of the call; 2 (a rescue) also hands the `live` values to the
        host on channel `rescue`, which finishes the call eagerly. Returns (going on, the
        carried values), like every block of the TF program."""
        with tf.control_dependencies(self._earlier()):
            flag, *leaves = self._receive(queues[index], self.specs[index], [tf.int32])
        values = unflatten(self.layouts[index], leaves)
        self._note_failing_ops()
        # the rest runs after them (the cond's control inputs), but the host has not waited
        # for them: they stay unchecked in it, so its next check waits for them
        outer = list(self.unchecked)

        def stop():
            return self.end(carried, False)
        otherwise = stop
        if rescue is not None:
            otherwise = self._rescue(queues[rescue], rescue, live, flag, stop)
        with tf.control_dependencies(_stateful_ops() + outer):
            if type(self.specs[index]) is Unreached:  # the host never goes on here: what
                return otherwise()  # follows is not traced (tfprog/unreached.py)
            return tf.cond(tf.equal(flag, 1), self.random.onward(self.losses.onward(
                lambda: segment(*values)), not self.specs[index]), otherwise)

    def gate_in_with(self, queues, index, segment: Callable):
        """A gate inside a `with` block (a GradientTape): wait for the host; the rest of the
        block (`segment`) runs only if it says go on, inside the block, so the tape records
        it; its results come out of the `tf.cond` (zeros when cancelled: the statements
        after the block then do not run, see resume)."""
        with tf.control_dependencies(self._earlier()):
            flag, *leaves = self._receive(queues[index], self.specs[index], [tf.int32])
        values = unflatten(self.layouts[index], leaves)
        self._note_failing_ops()
        outer, self.unchecked = self.unchecked, []
        self.flags[index] = flag
        traced: list = []

        def go_on():  # its tensors come out of the cond; Python values (a loop's `t`) are
            # the trace's, as an unrolled loop's are (cancelled, nothing after runs)
            results = segment(*values)
            traced.extend([results, tf.nest.flatten(results)])
            return [leaf for leaf in traced[1] if _through_cond(leaf)]

        def cancelled():  # same structure as go_on's (traced first by tf.cond)
            return [tf.zeros([0 if d is None else d for d in t.shape], t.dtype)
                    for t in traced[1] if _through_cond(t)]
        with tf.control_dependencies(_stateful_ops() + outer):
            out = iter(tf.cond(tf.equal(flag, 1),
                               self.random.onward(self.losses.onward(go_on),
                                                  not self.specs[index]), cancelled))
        return tf.nest.pack_sequence_as(traced[0], [
            next(out) if _through_cond(leaf) else leaf for leaf in traced[1]])

    def resume(self, index, segment: Callable, carried: tuple):
        """After a `with` block that held the gate on channel `index`: the rest of the
        block runs only if the host said go on there."""
        return tf.cond(tf.equal(self.flags[index], 1),
                       self.random.onward(self.losses.onward(segment), not self.specs[index]),
                       lambda: self.end(carried, False))

    def _rescue(self, queue, index, live: tuple, flag, stop: Callable) -> Callable:
        """The cancel branch of a gate that can hand its live values to the host (only
        tensors and structures of tensors can; else the host cannot take over there)."""
        layouts, leaves = [], []
        for value in live:
            layout, flat = flatten(value)
            layouts.append(layout)
            leaves += flat
        if not all(isinstance(v, tf.Tensor) for v in leaves):
            self.specs[index] = None
            return stop
        self.specs[index] = [ValueSpec(v.dtype, None if v.shape.rank is None
                                       else tuple(v.shape.as_list())) for v in leaves]
        self.layouts[index] = layouts

        def hand_over():
            gen_data_flow_ops.queue_enqueue_v2(queue, leaves)
            return stop()
        return lambda: tf.cond(tf.equal(flag, 2), hand_over, stop)

    def loop(self, queues, index, body: Callable, carried: tuple, rescue: int | None = None,
             live: Callable | None = None):
        """A loop the host decides: before each iteration the host sends 1 (one more), 0
        (done), -1 (cancel) or 2 (a rescue: the values no longer fit; the TF values
        `live(*carried)` go to the host on channel `rescue`), with the values the
        iteration starts with. `body(*values, *carried)` returns (going on, carried)."""
        specs = self.specs[index]
        if not self.plan.rescuable or live is not None and not all(
                isinstance(v, tf.Tensor) for value in live(*carried) for v in flatten(value)[1]):
            # no rescue here: the iteration values take any shape of the rank profiled
            # (unknown, tf.matmul traces BatchMatMulV2, whose floats differ from MatMul's)
            specs = self.specs[index] = [any_size(s) for s in specs]
        def receive():  # the flag and values an iteration starts with
            return self._receive(queues[index], specs, [tf.int32], wrap=False)
        with tf.control_dependencies(self._earlier()):
            first = receive()
        outer, self.unchecked = self.unchecked, []
        n = len(specs)

        def stop():  # (values shaped as the channel's: the loop keeps their known dims)
            return [tf.constant(-1)] + [tf.zeros([], s.dtype) if s.shape is None else
                                        tf.zeros([d or 0 for d in s.shape], s.dtype)
                                        for s in specs]

        def step(*state):
            raw, values = state[1:n + 1], state[n + 1:]
            wrapped = [HostValue(t, s) if s.python else t for t, s in zip(raw, specs)]
            with self.iterations.body(self, queues, state[0]) as left:
                alive, *values = body(*unflatten(self.layouts[index], wrapped), *values)
            with tf.control_dependencies(left):  # (the next iteration waits for them)
                following = receive() if _always(alive) else tf.cond(alive, receive, stop)
            return (*following, *values)

        start = (*first, *carried)
        try:
            out = tf.while_loop(lambda flag, *_: tf.equal(flag, 1), step, start,
                                parallel_iterations=1)
        except ValueError as exc:  # a loop variable changes shape from one iteration on
            if "shape_invariants" not in str(exc):
                raise
            self.unchecked = []
            invariants = tuple(tf.TensorShape(None) if i > n else t.shape
                               for i, t in enumerate(start))
            out = tf.while_loop(lambda flag, *_: tf.equal(flag, 1), step, start,
                                shape_invariants=invariants, parallel_iterations=1)
        self.unchecked = outer
        self._note_failing_ops()  # the While: it fails where its body can
        flag, *values = out if isinstance(out, (list, tuple)) else (out,)
        carried_out = values[n:]
        if rescue is not None:
            hand_over = self._rescue(queues[rescue], rescue, live(*carried_out), flag,
                                     lambda: tf.constant(False))
            hand_over()
        return (tf.equal(flag, 0), *carried_out)

    def branch(self, queues, index, then: Callable, orelse: Callable, carried: tuple):
        """An `if` the host decides: it sends 1 (the body), 0 (else) or -1 (cancel)."""
        with tf.control_dependencies(self._earlier()):
            flag = self._flag(queues, index)
        outer, self.unchecked = self.unchecked, []
        out = tf.switch_case(flag + 1, [lambda: self.end(carried, False),
                                        lambda: orelse(*carried), lambda: then(*carried)])
        self.unchecked = outer
        self._note_failing_ops()  # the Case: it fails where a branch can
        return tuple(out)

    def proceed(self, alive, rest: Callable, carried: tuple):
        """Run the rest of a block after a loop or `if` unless the host cancelled inside."""
        if _always(alive):
            return rest()
        return tf.cond(alive, self.random.onward(self.losses.onward(rest), True),
                       lambda: self.end(carried, False))

    @staticmethod
    def rows(tensor):
        """`for row in t` over a tensor of known length, unrolled."""
        return tf.unstack(tensor)

    def end(self, carried: tuple, alive: bool = True):
        """A block's result. Ops of this block that can fail run before it: in a loop body
        or a branch, one whose value nothing reads (`s = x[i]`, never used) would else be
        pruned from the body's function, and its error (eager's) never raised (seed
        29733)."""
        self._note_failing_ops()
        graph = tf.compat.v1.get_default_graph()
        with tf.control_dependencies([op for op in self.unchecked if op.graph is graph]):
            return (tf.constant(alive), *carried)

    @staticmethod
    def _flag(queues, index):
        return tf.reshape(gen_data_flow_ops.queue_dequeue_v2(queues[index], [tf.int32])[0], [])

    def output(self, queues, index, value):
        """Send `value` to the host: a tensor, or a list/tuple/dict of them (sent leaf by
        leaf; the host rebuilds it: never packed into one tensor). A Python bool, int or
        float (one the TF part computed while traced, or the host sent) goes with a Python
        spec: the host gets it back as that Python type."""
        layout, leaves = flatten(value)
        tensors, specs = [], []
        for leaf in leaves:
            _check_returnable(leaf, self.plan.channel(index).names[0])
            spec = python_leaf_spec(leaf) if leaf is not None else NONE_SPEC
            try:
                tensor = (tf.convert_to_tensor(leaf) if spec is None else
                          tf.constant(False) if leaf is None else
                          tf.cast(leaf._tensor, spec.dtype) if isinstance(leaf, HostValue)
                          else tf.constant(leaf, spec.dtype))
            except (TypeError, ValueError) as exc:
                raise PartError(f"{self.plan.channel(index).names[0]} is not a tensor: {exc}")
            tensors.append(tensor)
            specs.append(spec or ValueSpec(tensor.dtype, tuple(tensor.shape.as_list())
                                           if tensor.shape.rank is not None else None))
        if not tensors:  # nothing to send (an empty list): a queue needs one component,
            tensors, specs = [tf.constant(False)], [NONE_SPEC]  # so a None goes, unread
        self.specs[index] = specs
        self.layouts[index] = [layout]
        gen_data_flow_ops.queue_enqueue_v2(queues[index], tensors)

    def _earlier(self) -> list:
        """What a host decision (a gate, loop or branch flag) is received after: every
        earlier effect and op that can fail in this graph. Everything inside the block
        depends on the flag, so it runs after them (a barrier or a nested call inside it
        would otherwise not be ordered after the enclosing graph's earlier writes)."""
        self._note_failing_ops()
        return _stateful_ops() + self.unchecked

    def barrier(self, queues, index):
        self._note_failing_ops()
        self.specs[index] = []
        with tf.control_dependencies(_stateful_ops() + self.unchecked + self.iterations.after()):
            gen_data_flow_ops.queue_enqueue_v2(queues[index], [tf.constant(True)])
        self.unchecked = []

    def invoke(self, queues, slot: int):
        """Run the TF part of the callee at nested call site `slot` (a call of its
        FunctionDef, with its queues: they follow this part's own)."""
        callee = self.nested[slot]
        if callee is None:
            return  # the host never says to here: it calls the function eagerly
        start = len(self.plan.channels) + sum(
            p.queue_count for p in self.nested[:slot] if p is not None)
        callee.function(*queues[start:start + callee.queue_count])

    @staticmethod
    def speculate(value, seen):
        """A number the host sends (a HostValue) that the callee it is given branches on:
        `seen` is the value its path holds now, when the part is traced (see Speculated)."""
        if not isinstance(value, HostValue) or type(seen) not in (bool, int, float):
            raise PartError("a number a callee branches on was not sent by the host")
        return Speculated(value, seen)

    def call(self, fn, *args, **kwargs):
        """A sliced callee: a call of its own FunctionDef (traced once per part build); one
        given a number the host sends is traced here, inline (a FunctionDef's arguments
        are tensors: the number's Python conversions would be lost)."""
        if any(isinstance(a, HostValue) for a in (*args, *kwargs.values())):
            return usercalls.plain(fn)(*args, **kwargs)
        return self.random.call(self.callees, fn, usercalls.plain, args, kwargs)

    @staticmethod
    def inline(fn, *args, **kwargs):  # a callee returning TF objects: the caller gets them
        return usercalls.plain(fn)(*args, **kwargs)

    @staticmethod
    def unrolled(fn, *args):
        """A recursion over a tree (slicer/recursion.py): its TF half, traced on the TF
        part's copy of the tree, unrolls for the tree's shape."""
        both, owner = recursion.halves(fn)
        return both.tf(owner, *args) if owner is not None else both.tf(*args)

    constant = staticmethod(constant)  # tf.constant on values the host sent
    call_exactly = staticmethod(usercalls.call_exactly)  # a layer's *args left empty
    known = staticmethod(usercalls.known)  # static dimensions a callee reads

    def done(self, status=None):
        return tf.constant(0, tf.int32)

    @staticmethod
    def _receive(queue, specs: list[ValueSpec], flag: list, wrap: bool = True):
        dtypes = flag + [s.dtype for s in specs]
        parts = gen_data_flow_ops.queue_dequeue_v2(queue, dtypes)
        out = [tf.reshape(parts[0], [])] if flag else []
        for tensor, spec in zip(parts[len(flag):], specs):
            if spec.shape is not None:
                tensor.set_shape(spec.shape)
            out.append(HostValue(tensor, spec) if spec.python and wrap else tensor)
        return out


LINE_SCOPE = re.compile(r"gpe(\d+)_L(\d+)")  # ops of part N from user line L: gpeN_LL/...
_part_ids = itertools.count(1)


def _always(alive) -> bool:
    """`alive` is True when the TF part is built (no cancel can happen there)."""
    value = tf.get_static_value(alive)
    return value is not None and bool(value)


def _through_cond(value) -> bool:
    return isinstance(value, (tf.Tensor, tf.Variable)) or tf.is_tensor(value)


def _stateful_ops() -> list:
    graph = tf.compat.v1.get_default_graph()
    return [op for op in graph.get_operations()
            if op.op_def is not None and op.op_def.is_stateful and op.type != "Placeholder"]


def build_part(plan: SlicePlan, tf_factory: Callable[..., Callable], bound: dict[str, Any],
               specs: dict[int, list[ValueSpec]], layouts: dict[int, list],
               folded: dict[int, Any] | None = None, nested: list | None = None) -> Part:
    """Trace the TF program. `tf_factory(runtime, bound)` returns the `_gpe_tf` function.
    folded: entry leaf position -> the Python number the TF part uses there."""
    folded, nested = dict(folded or {}), list(nested or [])
    runtime = _trace(plan, tf_factory, bound, specs, layouts, folded, nested, None)
    seeds = runtime.random.count
    if seeds:  # traced again, its random ops reading the seeds its entry carries
        runtime = _trace(plan, tf_factory, bound, specs, layouts, folded, nested, seeds)
    untraced(plan, runtime.specs)
    return Part(plan=plan, function=runtime.concrete, specs=runtime.specs, layouts=layouts,
                waits=frozenset(runtime.waits), uid=runtime.uid, folded=folded, nested=nested,
                seeds=seeds, losses=runtime.losses.events if runtime.losses.added else [])


def _trace(plan, tf_factory, bound, specs, layouts, folded, nested, seeds) -> TraceRuntime:
    runtime = TraceRuntime(plan, dict(specs), layouts, folded, nested, seeds)
    program = tf_factory(runtime, bound)

    def traced(*queues):
        runtime.random.graph = runtime.losses.graph = tf.compat.v1.get_default_graph()
        return program(queues)

    traced.__name__ = f"gpe_{plan.name}"
    rows.install()
    signature = [RESOURCE] * (len(plan.channels) + sum(
        p.queue_count for p in nested if p is not None))
    try:
        with exact_arithmetic(), recurrent.unrolled(), asserts.intercept(runtime.uid), \
                randomness.recording(runtime.random), losses.recording(runtime.losses):
            runtime.concrete = tf.function(traced, input_signature=signature,
                                           autograph=False).get_concrete_function()
        runtime.random.finish()
        leftover = randomness.leftover(runtime.concrete.graph)
    except PartError:
        raise
    except randomness.NoEntry as exc:
        raise NeedsEntry(str(exc)) from None
    except randomness.Refused as exc:
        raise PartError(str(exc)) from None
    except Exception as exc:  # tracing user code can raise anything
        raise PartError(f"tracing the TF part failed: {type(exc).__name__}: "
                        f"{plan.user_terms(str(exc))}") from exc
    refused = losses.refusal(runtime.losses, plan, nested)
    if refused:
        raise PartError(refused)
    if leftover is not None:
        raise PartError(f"the TF part has a {leftover} op (a stateful random op that a graph "
                        "cannot run as eagerly)")
    return runtime
