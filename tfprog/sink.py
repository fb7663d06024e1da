"""The sink program: one graph function that runs every TF part, in call order.

It loops: dequeue a part number from the control queue, run that part, until it dequeues
a negative number. The host runs it on one thread for as long as the set of parts stays
the same, and starts a new one when a part is added.

A new sink is not traced again in Python. Each part is called through a small wrapper
(a graph function traced once per part, see `wrapper`): it takes one resource vector
holding every part's resources (its queue handles, then the variables its function
captured) and the offset of its own, and calls the part with them. The sink itself is a
template (traced once per process, see sink_template.py) whose while-loop body calls a
wrapper by name (one part: a call TensorFlow inlines, as a traced call) or picks one with
a `Case` naming the wrappers (several parts); a sink for a set of parts is the template's
FunctionDefs with the wrapper names put in, registered with the eager context and called
by name. So adding a part costs one wrapper trace, and a bundle, which carries its
wrappers and the templates (see host/bundle_load), traces nothing.

Where the parts' resources sit on several devices (a MirroredStrategy's variables) they
cannot be packed in one vector: that sink is traced, a lowered `Case` whose branches each
capture their own (see _traced_sink); so is one whose wrapper captured a tensor of its own
(a large constant: the template passes resources only).
"""
from __future__ import annotations

from typing import Any, Sequence

import tensorflow as tf
from tensorflow.python.eager import context
from tensorflow.python.framework import ops
from tensorflow.python.ops import cond_v2, gen_array_ops, gen_data_flow_ops, \
    gen_resource_variable_ops, resource_variable_ops

from . import sink_template as templates
from .exact import exact_arithmetic

STOP = -1
TRACES = templates.TRACES  # {"template": n, "wrapper": n, "sink": n}: Python traces made


def build_sink(control: tf.queue.FIFOQueue, parts: Sequence[tuple[Any, Sequence[Any]]],
               timer: tf.Variable | None = None, acks: tf.queue.FIFOQueue | None = None):
    """`parts`: (function, its queue handles) in part-number order; a function is a
    ConcreteFunction or one like it (a bundle's: `captured_inputs`, `_call_flat`,
    `function_def`, and `sink_wrapper(count)`: its wrapper made already, or None).
    Returns the sink: a callable that runs it to the end.

    acks: a queue into which the sink puts each finished call's part number (the host
    counts them to know when every call it sent has finished).

    timer: a float64 [2] variable; when given, each part's run adds its wall seconds to
    timer[0] and 1 to timer[1] (how busy the graph was, for overlap measurements)."""
    if _several_devices(parts):
        return _traced_sink(control, [_branch(f, h) for f, h in parts], timer, acks, True)
    wrappers = [wrapper(f, len(h)) for f, h in parts]
    packed, offsets = _packed(parts)
    if any(w.captured_inputs for w in wrappers):  # the template passes resources only
        return _traced_sink(control, [
            (lambda w=w, o=o: w(packed, tf.constant(o, tf.int32)))
            for w, o in zip(wrappers, offsets)], timer, acks, False)
    kind = "one" if len(parts) == 1 else "case"
    names = templates.instantiate(kind, timer is not None, acks is not None,
                                  [w.function_def.signature.name for w in wrappers])
    args = [control.queue_ref] + ([acks.queue_ref] if acks is not None else []) + \
        [packed, tf.constant(offsets, tf.int32)] + ([timer.handle] if timer is not None else [])
    return Sink(names, args, wrappers)


_HOLDABLE = frozenset({tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int8, tf.int16,
                       tf.int32, tf.int64, tf.uint8, tf.bool, tf.complex64, tf.complex128})


def _held(function) -> list:
    """Per captured value of `function`, how the packed vector carries it: a resource as
    itself (True); a tensor (a large constant the part captured by value when traced) by
    a variable's handle made here once, holding it, which the wrapper reads (so that the
    wrapper captures nothing and a template can call it); None where it is not carried
    (the wrapper captures it: a value taken at each call, or a dtype no variable holds)."""
    held = function.__dict__.get("_gpe_held")
    if held is not None:
        return held
    captures = getattr(getattr(function, "graph", None), "function_captures", None)
    by_value = not (captures is not None and captures.by_ref_external)
    held = []
    for c in function.captured_inputs:
        if c.dtype == tf.resource:
            held.append(True)
        elif by_value and c.dtype in _HOLDABLE and isinstance(c, ops.EagerTensor):
            with tf.device(c.device):
                handle = gen_resource_variable_ops.var_handle_op(
                    dtype=c.dtype, shape=c.shape, shared_name=context.anonymous_name())
                gen_resource_variable_ops.assign_variable_op(handle, c)
            held.append((handle, resource_variable_ops.EagerResourceDeleter(
                handle, c.device)))
        else:
            held.append(None)
    function.__dict__["_gpe_held"] = held
    return held


def _packed(parts) -> tuple[tf.Tensor, list[int]]:
    """(one resource vector: each part's queue handles then its captured resources, in
    part order; each part's offset in it)."""
    resources, offsets = [], []
    for function, handles in parts:
        offsets.append(len(resources))
        resources += list(handles)
        for c, h in zip(function.captured_inputs, _held(function)):
            if h is not None:
                resources.append(c if h is True else h[0])
    # packed eagerly, by Pack itself (tf.stack converts and checks each handle in Python,
    # 10x slower; packed inside the sink, each handle would be a capture: slower still)
    if not resources:  # no part holds a handle (a part of composite values only): TF
        # cannot make an empty resource vector, so one unused handle stands in
        resources = [_placeholder_handle()]
    return gen_array_ops.pack(resources, axis=0), offsets


class Sink:
    """A sink made from a template: its FunctionDefs are in the eager context while it
    may run, and are removed once it has run (a sink runs once)."""

    def __init__(self, names: list[str], args: list, keep: list):
        self.names, self.args = names, args
        self._keep = keep  # the wrappers it calls by name: registered while it lives

    def __call__(self):
        try:
            return context.context().call_function(self.names[-1].encode(), self.args, 1)
        finally:
            self.release()

    @staticmethod
    def stop_for_prepare(stop: tf.queue.FIFOQueue) -> None:
        """Give `stop` the STOP that one `prepare` of a sink on it will take."""
        gen_data_flow_ops.queue_enqueue_v2(stop.queue_ref, [tf.constant(STOP, tf.int32)])

    def prepare(self, stop: tf.queue.FIFOQueue) -> None:
        """Have TensorFlow instantiate this sink on the calling thread, running no call:
        run it once on `stop` (a queue like the control queue, given one STOP by
        `stop_for_prepare`) in place of its control queue. The eager context keeps the
        instantiated function in its kernel cache, so the sink's own run, on its thread,
        starts at once."""
        context.context().call_function(self.names[-1].encode(),
                                        [stop.queue_ref] + self.args[1:], 1)

    def release(self) -> None:
        names, self.names = self.names, []
        for name in reversed(names):
            try:
                context.context().remove_function(name)
            except Exception:  # noqa: BLE001 (the interpreter is shutting down)
                pass

    def __del__(self):
        if self.names:
            self.release()


_RESOURCES = tf.TensorSpec([None], tf.resource)
_OFFSET = tf.TensorSpec([], tf.int32)


def wrapper(function, count: int):
    """The graph function of (packed resources, offset) that calls `function` with the
    `count` queue handles at `offset` and its captured resources after them (other
    captures, if any, it captures itself). Traced once per function: kept on it (a cycle
    the collector frees with it; a dictionary keyed by the function would keep it alive)."""
    cache = function.__dict__.setdefault("_gpe_wrappers", {})
    made = cache.get(count)
    if made is None and hasattr(function, "sink_wrapper"):  # made already (a bundle's)
        made = cache[count] = function.sink_wrapper(count)
    if made is not None:
        return made
    captures, held = list(function.captured_inputs), _held(function)

    def call(packed, offset):
        taken = count + sum(1 for h in held if h is not None)
        mine = tf.unstack(packed[offset:offset + taken], num=taken) if taken else []
        handles, rest = mine[:count], iter(mine[count:])
        inputs = []
        for c, h in zip(captures, held):
            if h is None:  # captured by the wrapper itself
                inputs.append(c)
            elif c.dtype == tf.resource:
                inputs.append(next(rest))
            else:  # the value a variable holds for it (see _held)
                value = gen_resource_variable_ops.read_variable_op(next(rest), c.dtype)
                value.set_shape(c.shape)
                inputs.append(value)
        return function._call_flat(handles, inputs)  # noqa: SLF001 (captures passed in)

    call.__name__ = f"gpe_call_{function.function_def.signature.name}"
    TRACES["wrapper"] += 1
    with exact_arithmetic():
        made = tf.function(call, input_signature=[_RESOURCES, _OFFSET],
                           autograph=False).get_concrete_function()
    cache[count] = made
    return made


def reachable(name: str) -> set[str]:
    """The names of the functions registered function `name` calls, directly or not (what
    TensorFlow copies and looks into when it instantiates `name`): a count of the work a
    new sink costs, independent of the machine's load."""
    ctx, seen, todo = context.context(), set(), [name]
    while todo:
        current = todo.pop()
        if current in seen or not ctx.has_function(current):
            continue
        seen.add(current)
        fdef = ctx.get_function_def(current)
        for node in fdef.node_def:
            for value in node.attr.values():
                if value.HasField("func"):
                    todo.append(value.func.name)
                elif value.HasField("list"):
                    todo += [f.name for f in value.list.func]
    return seen


def _several_devices(parts) -> bool:
    """Whether the parts capture resources on more than one device (a Case's inputs must
    all be placed with it; the lowered form places each branch's ops on its own)."""
    devices = set()
    for f, _ in parts:
        for value in getattr(f, "captured_inputs", ()):
            if value.dtype == tf.resource:
                devices.add(tf.DeviceSpec.from_string(value.device or "").replace(
                    job=None, replica=None, task=None).to_string())
    return len(devices) > 1


def _traced_sink(control, branches: list, timer, acks, lowered: bool):
    """A sink traced in Python, calling `branches` (each a function of no arguments);
    with several, through a `Case`, lowered to Switch/Merge where the parts' resources sit
    on several devices (each branch's ops are then placed on their own)."""
    TRACES["sink"] += 1

    def run_one(index):
        if len(branches) == 1:  # no dispatch needed (the loop only runs valid numbers)
            return branches[0]()
        return cond_v2.indexed_case(index, branches, lower_using_switch_merge=lowered)

    def gpe_sink():
        next_index = lambda: tf.reshape(  # noqa: E731
            gen_data_flow_ops.queue_dequeue_v2(control.queue_ref, [tf.int32])[0], [])
        body = templates.loop_body(run_one, next_index,
                                   timer.handle if timer is not None else None,
                                   acks.queue_ref if acks is not None else None)
        return tf.while_loop(lambda i: i >= 0, body, [next_index()], parallel_iterations=1)

    with exact_arithmetic():
        return tf.function(gpe_sink, autograph=False).get_concrete_function()


def _branch(f, handles):
    """A Case branch that runs part `f` (only where the parts' resources sit on several
    devices: a MirroredStrategy's variables; a Case's inputs must all be placed with it, so
    there the Case is lowered and each branch captures its own). A part with call-time
    captures (the instance keys of a MirroredStrategy's collective all-reduce) is given its
    captured values from outside the branch: captured by reference inside a cond branch
    they are left as unfed placeholders (the same TF defect makes tf.function fail on some
    distributed steps). They are taken once, as the sink (traced once, run for the whole
    session) takes a single part's: a part's calls run one after another."""
    if not getattr(getattr(f, "graph", None), "function_captures", None) or \
            not f.graph.function_captures.by_ref_external:
        return lambda: f(*handles)
    captured = list(f.captured_inputs)
    return lambda: f._call_flat(list(handles), captured)  # noqa: SLF001


_PLACEHOLDER: list = []


def _placeholder_handle() -> tf.Tensor:
    """A resource handle no part reads (made once; it names no variable)."""
    if not _PLACEHOLDER:
        _PLACEHOLDER.append(gen_resource_variable_ops.var_handle_op(
            dtype=tf.float32, shape=[], shared_name="_gpe_unused_handle"))
    return _PLACEHOLDER[0]
