"""The sink program: one graph function that runs every TF part, in call order.

It loops: dequeue a part number from the control queue, run that part (a call by name of
its FunctionDef, with its channels' queue handles), until it dequeues a negative number.
With one part there is no dispatch at all; with several, a `Case` picks the part.
The host runs it on one thread for as long as the set of parts stays the same.

The sink is built again each time a part is added, so its cost must stay linear in the
number of parts: every resource a part uses (its queue handles, the variables its function
captured) is packed into one resource vector that every branch of the `Case` takes, and
each part is called through a small wrapper function (traced once per part and position)
that takes its resources out of that vector. A `Case` whose branches each captured their
own handles costs every branch a placeholder for every other branch's inputs: quadratic
in the parts, and 20 parts took seconds to build.
"""
from __future__ import annotations

from typing import Any, Sequence

import tensorflow as tf
from tensorflow.python.ops import (cond_v2, control_flow_util_v2, gen_array_ops,
                                   gen_data_flow_ops, gen_functional_ops)

from gpe.tfprog.exact import exact_arithmetic

STOP = -1


def build_sink(control: tf.queue.FIFOQueue, parts: Sequence[tuple[Any, Sequence[Any]]],
               timer: tf.Variable | None = None, acks: tf.queue.FIFOQueue | None = None):
    """`parts`: (concrete function, its queue handles) in part-number order.

    acks: a queue into which the sink puts each finished call's part number (the host
    counts them to know when every call it sent has finished).

    timer: a float64 [2] variable; when given, each part's run adds its wall seconds to
    timer[0] and 1 to timer[1] (how busy the graph was, for overlap measurements)."""

    several_devices = len(parts) > 1 and _several_devices(parts)
    if len(parts) > 1 and not several_devices:
        packed, wrappers = _packed(parts)

    def run_one(index):
        if len(parts) == 1:  # no dispatch needed (the loop only runs valid numbers)
            f, h = parts[0]
            return f(*h)
        if several_devices:  # resources on several devices cannot be packed in one vector
            return cond_v2.indexed_case(index, [_branch(f, h) for f, h in parts],
                                        lower_using_switch_merge=True)
        return _dispatch(index, packed, wrappers)

    def next_index():
        index = gen_data_flow_ops.queue_dequeue_v2(control.queue_ref, [tf.int32])[0]
        return tf.reshape(index, [])

    def body(index):
        if timer is None:
            finished = run_one(index)
        else:
            with tf.control_dependencies([index]):
                start = tf.timestamp()
            with tf.control_dependencies([start]):
                finished = run_one(index)
            with tf.control_dependencies([finished]):
                elapsed = tf.timestamp() - start
            finished = timer.assign_add(tf.stack([elapsed, tf.constant(1.0, tf.float64)]))
        if acks is not None:
            with tf.control_dependencies([finished]):
                finished = gen_data_flow_ops.queue_enqueue_v2(acks.queue_ref, [tf.reshape(index, [])])
        with tf.control_dependencies([finished]):
            return next_index()

    def gpe_sink():
        return tf.while_loop(lambda i: i >= 0, body, [next_index()], parallel_iterations=1)

    with exact_arithmetic():
        sink = tf.function(gpe_sink, autograph=False).get_concrete_function()
    # it calls its wrappers by name
    sink._gpe_wrappers = wrappers if len(parts) > 1 and not several_devices else []
    return sink


def _branch(f, handles):
    """A Case branch that runs part `f` (only where the parts' resources sit on several
    devices: a MirroredStrategy's variables; a Case's inputs must all be placed with it, so
    there the Case is lowered and each branch captures its own). A part with call-time
    captures (the instance keys of a MirroredStrategy's collective all-reduce) is given its
    captured values from outside the branch: captured by reference inside a cond branch
    they are left as unfed placeholders (the same TF defect makes tf.function fail on some
    distributed steps). They are taken once, as the sink (traced once, run for the whole
    session) takes a single part's: a part's calls run one after another."""
    if not f.graph.function_captures.by_ref_external:
        return lambda: f(*handles)
    captured = list(f.captured_inputs)
    return lambda: f._call_flat(list(handles), captured)  # noqa: SLF001


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


_RESOURCES = tf.TensorSpec([None], tf.resource)


def _packed(parts) -> tuple[tf.Tensor, list]:
    """(one resource vector: each part's queue handles then its captured resources, in
    part order; a wrapper per part that calls it on its slice of that vector)."""
    resources, wrappers = [], []
    for function, handles in parts:
        captured = [c for c in function.captured_inputs if c.dtype == tf.resource]
        # {(offset, handle count): wrapper}, on the function (a cycle the collector frees
        # with it: a dictionary keyed by the function would keep it alive)
        cache = function.__dict__.setdefault("_gpe_wrappers", {})
        where = (len(resources), len(handles))
        if where not in cache:
            cache[where] = _wrapper(function, *where)
        wrappers.append(cache[where])
        resources += list(handles) + captured
    # packed eagerly, by Pack itself (tf.stack converts and checks each handle in Python,
    # 10x slower; packed inside the sink, each handle would be a capture: slower still)
    return gen_array_ops.pack(resources, axis=0), wrappers


def _dispatch(index, packed, wrappers) -> tf.Tensor:
    """Run wrappers[index](packed): a `Case` op naming the wrappers themselves as its
    branches (where none captured anything of its own), else cond_v2's (a branch graph
    per part). Not lowered to Switch/Merge: that costs every call a little for every part."""
    if any(w.captured_inputs for w in wrappers):
        return cond_v2.indexed_case(index, [(lambda w=w: w(packed)) for w in wrappers],
                                    lower_using_switch_merge=False)
    # the wrappers (and the parts they call) are registered with the eager context, where
    # the sink finds them by name: copying them into the sink's own library would cost
    # every build time in the size of every part
    out = gen_functional_ops.case(index, [packed], [tf.int32],
                                  [w.function_def.signature.name for w in wrappers],
                                  output_shapes=[tf.TensorShape([])])
    control_flow_util_v2.maybe_set_lowering_attr(out[0].op, lower_using_switch_merge=False)
    return out[0]


def _wrapper(function, offset: int, count: int):
    """A graph function of the packed resources that calls `function` with the `count`
    handles at `offset` and its captured resources after them (other captures, if any,
    it captures itself)."""
    captures = list(function.captured_inputs)
    taken = count + sum(1 for c in captures if c.dtype == tf.resource)

    def call(packed):
        mine = tf.unstack(packed[offset:offset + taken], num=taken) if taken else []
        handles, rest = mine[:count], iter(mine[count:])
        inputs = [next(rest) if c.dtype == tf.resource else c for c in captures]
        return function._call_flat(handles, inputs)  # noqa: SLF001 (captures passed in)

    call.__name__ = f"gpe_call_{function.function_def.signature.name}"
    with exact_arithmetic():
        return tf.function(call, input_signature=[_RESOURCES],
                           autograph=False).get_concrete_function()
