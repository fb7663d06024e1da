"""The sink program: one graph function that runs every TF part, in call order.

Each part has a dispatch queue, and a call is one enqueue there: the word RUN and the
call's entry values together (tfprog.sink_template's RUN and STOP). The sink waits on the
dispatch queue of the part it ran last (the control queue names its first), so a
program calling one function after another sends one enqueue per call. A call to
another part first puts that part's number in the last part's dispatch queue (a switch),
then RUN in its own; STOP there ends the sink. A part's wrapper (see `dispatched`) takes
the word and, on RUN, relays the entry values into a queue of the part's own, which it
gives the part's FunctionDef in place of its entry queue (so a nested call, run by its
caller's TF part, and the other replicas of a replicated step still send to the entry
queue: a nested call's values, sent while the graph has not yet relayed those of a call
before it, must not share the queue they are relayed into). The host
runs the sink on one thread for as long as the set of parts stays the same, and starts
a new one when a part is added.

A new sink is not traced again in Python. Each part is called through a small wrapper
(a graph function made once per part, written from the part's signature without tracing
where it can be: see `wrapper` and wrapper_template.py): it takes one resource vector
holding every part's resources (its queue handles, then the variables its function
captured) and the offset of its own, and calls the part with them. The sink itself is a
template (traced once per process, see sink_template.py) whose while-loop body calls a
wrapper by name (one part: a call TensorFlow inlines, as a traced call) or picks one with
a `Case` naming the wrappers (several parts); a sink for a set of parts is the template's
FunctionDefs with the wrapper names put in, registered with the eager context and called
by name. So adding a part traces nothing in Python (the templates are traced once per
process), and a bundle, which carries its wrappers and the templates (see
host/bundle_load), not even those.

Where the parts' resources sit on several devices (a MirroredStrategy's variables) they
cannot be packed in one vector: that sink is traced, a lowered `Case` whose branches each
capture their own (see _traced_sink); so is one whose wrapper captured a tensor of its own
(a large constant: the template passes resources only).
"""
from __future__ import annotations

from typing import Any, Sequence

import tensorflow as tf
from tensorflow.python.eager import context
from tensorflow.python.eager.polymorphic_function import atomic_function
from tensorflow.python.framework import ops
from tensorflow.python.ops import cond_v2, gen_array_ops, gen_data_flow_ops, \
    gen_resource_variable_ops, resource_variable_ops

from . import sink_template as templates, wrapper_template as written
from .exact import exact_arithmetic

RUN, STOP = templates.RUN, templates.STOP
TRACES = templates.TRACES  # {"template": n, "wrapper": n, "sink": n}: Python traces made


def build_sink(control: tf.queue.FIFOQueue, parts: Sequence[tuple[Any, Sequence[Any], tuple]],
               timer: tf.Variable | None = None, acks: tf.queue.FIFOQueue | None = None):
    """`parts`: (function, its queue handles, its dispatch) in part-number order, the
    handles led by the part's dispatch queue's and, where it has an entry, its relay
    queue's; its dispatch (the index among its own queues of its entry queue or None,
    the entry's dtypes: see `dispatched`);
    a function is a ConcreteFunction or one like it (a bundle's: `captured_inputs`,
    `_call_flat`, `function_def`, and `sink_wrapper(count, dispatch)`: its wrapper made
    already, or None). Returns the sink: a callable that runs it to the end.

    acks: a queue into which the sink puts each finished call's part number (the host
    counts them to know when every call it sent has finished).

    timer: a float64 [2] variable; when given, each part's run adds its wall seconds to
    timer[0] and 1 to timer[1] (how busy the graph was, for overlap measurements)."""
    if _several_devices(parts):
        return _traced_sink(control, [_branch(f, h, d) for f, h, d in parts], timer, acks,
                            True)
    wrappers = [wrapper(f, len(h), d) for f, h, d in parts]
    packed, offsets = _packed(parts)
    if any(w.captured_inputs for w in wrappers):  # the template passes resources only
        return _traced_sink(control, [
            (lambda w=w, o=o: _call(w, packed, tf.constant(o, tf.int32)))
            for w, o in zip(wrappers, offsets)], timer, acks, False)
    kind = "one" if len(parts) == 1 else "case"
    names = templates.instantiate(kind, timer is not None, acks is not None,
                                  [w.function_def.signature.name for w in wrappers])
    args = [control.queue_ref] + ([acks.queue_ref] if acks is not None else []) + \
        [packed, tf.constant(offsets, tf.int32)] + ([timer.handle] if timer is not None else [])
    return Sink(names, args, wrappers)


def _call(wrapper, packed, offset) -> tf.Tensor:
    """A wrapper's call inside a traced sink: its own (a traced one, a written one), or,
    for a bundle's (its FunctionDef registered, nothing to call in Python), by name, as
    a traced one's call is made."""
    if callable(wrapper):
        return wrapper(packed, offset)
    attrs = context.context().function_call_options.as_attrs()
    word = atomic_function.partitioned_call_op(
        name=wrapper.function_def.signature.name, args=[packed, offset], is_stateful=True,
        tout=[tf.int32.as_datatype_enum], config=attrs["config_proto"],
        executor_type=attrs["executor_type"]).outputs[0]
    word.set_shape([])  # (the loop's variable: a scalar)
    return word


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
    for function, handles, _ in parts:
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


def dispatched(dispatch, handles: list, entry: int | None, dtypes: Sequence[tf.DType],
               run) -> tf.Tensor:
    """A part's turn in the sink: take the next word from its dispatch queue (`dispatch`,
    a handle) and return it; on RUN, first relay the entry values that came with it into
    `handles[entry]` (the part's relay queue, given to its function in place of its entry
    queue; `dtypes` theirs) and run the call (`run()`). The relay is an enqueue inside
    the graph: the host's one enqueue carries the part number and the values together
    (see the module docstring)."""
    word, *values = gen_data_flow_ops.queue_dequeue_v2(dispatch, [tf.int32, *dtypes])
    word = tf.reshape(word, [])

    def call():
        relayed = [] if entry is None else [
            gen_data_flow_ops.queue_enqueue_v2(handles[entry], values)]
        with tf.control_dependencies(relayed):
            finished = run()
        with tf.control_dependencies([finished]):
            return tf.identity(word)
    return tf.cond(tf.equal(word, RUN), call, lambda: word)


def _own_queues(handles: list, entry: int | None) -> tuple:
    """(the dispatch queue, the queues the part's function takes): `handles` are the
    dispatch queue's, the relay queue's where the part has an entry (`entry`: its entry
    queue's index among the function's), then the function's, whose entry queue the
    relay queue stands in for."""
    if entry is None:
        return handles[0], list(handles[1:])
    own = list(handles[2:])
    own[entry] = handles[1]
    return handles[0], own


def wrapper(function, count: int, dispatch: tuple = (None, ())):
    """The graph function of (packed resources, offset) that takes the part's turn
    (`dispatched`) with the `count` queue handles at `offset` (its dispatch queue's and
    relay queue's first: see `_own_queues`) and calls `function` with the others and its
    captured resources after them (other
    captures, if any, it captures itself). Written from the function's signature
    (wrapper_template.py), traced only where that does not fit (a capture it captures
    itself); once per function and dispatch: kept on it (a cycle the collector frees with
    it; a dictionary keyed by the function would keep it alive)."""
    cache = function.__dict__.setdefault("_gpe_wrappers", {})
    key = (count, dispatch)
    made = cache.get(key)
    if made is None and hasattr(function, "sink_wrapper"):  # made already (a bundle's)
        made = cache[key] = function.sink_wrapper(count, dispatch)
    if made is not None:
        return made
    captures, held = list(function.captured_inputs), _held(function)
    made = cache[key] = written.build(function, count, dispatch, held)  # (not traced)
    if made is not None:
        return made
    entry, dtypes = dispatch

    def call(packed, offset):
        taken = count + sum(1 for h in held if h is not None)
        mine = tf.unstack(packed[offset:offset + taken], num=taken) if taken else []
        queue, handles = _own_queues(mine[:count], entry)
        rest = iter(mine[count:])
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
        return dispatched(queue, handles, entry, dtypes,
                          lambda: function._call_flat(handles, inputs))  # noqa: SLF001

    call.__name__ = f"gpe_call_{function.function_def.signature.name}"
    TRACES["wrapper"] += 1
    with exact_arithmetic():
        made = tf.function(call, input_signature=[_RESOURCES, _OFFSET],
                           autograph=False).get_concrete_function()
    cache[key] = made
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
    for f, _, _ in parts:
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
        first = gen_data_flow_ops.queue_dequeue_v2(control.queue_ref, [tf.int32])[0]
        body = templates.loop_body(run_one, timer.handle if timer is not None else None,
                                   acks.queue_ref if acks is not None else None)
        return tf.while_loop(lambda i: i >= 0, body, [tf.reshape(first, [])],
                             parallel_iterations=1)

    with exact_arithmetic():
        return tf.function(gpe_sink, autograph=False).get_concrete_function()


def _branch(f, handles, dispatch: tuple):
    """A Case branch that takes part `f`'s turn (`dispatched`: handles[0] is its dispatch
    queue's) and runs it (only where the parts' resources sit on several
    devices: a MirroredStrategy's variables; a Case's inputs must all be placed with it, so
    there the Case is lowered and each branch captures its own). A part with call-time
    captures (the instance keys of a MirroredStrategy's collective all-reduce) is given its
    captured values from outside the branch: captured by reference inside a cond branch
    they are left as unfed placeholders (the same TF defect makes tf.function fail on some
    distributed steps). They are taken once, as the sink (traced once, run for the whole
    session) takes a single part's: a part's calls run one after another."""
    queue, handles = _own_queues(handles, dispatch[0])
    if not getattr(getattr(f, "graph", None), "function_captures", None) or \
            not f.graph.function_captures.by_ref_external:
        run = lambda: f(*handles)  # noqa: E731
    else:
        captured = list(f.captured_inputs)
        run = lambda: f._call_flat(handles, captured)  # noqa: SLF001, E731
    return lambda: dispatched(queue, handles, *dispatch, run)


_PLACEHOLDER: list = []


def _placeholder_handle() -> tf.Tensor:
    """A resource handle no part reads (made once; it names no variable)."""
    if not _PLACEHOLDER:
        _PLACEHOLDER.append(gen_resource_variable_ops.var_handle_op(
            dtype=tf.float32, shape=[], shared_name="_gpe_unused_handle"))
    return _PLACEHOLDER[0]
