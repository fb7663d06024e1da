"""The sink program: one graph function that runs every TF part, in call order.

It loops: dequeue a part number from the control queue, run that part (a call by name of
its FunctionDef, with its channels' queue handles), until it dequeues a negative number.
With one part there is no dispatch at all; with several, a `Case` picks the part.
The host runs it on one thread for as long as the set of parts stays the same.
"""
from __future__ import annotations

from typing import Any, Sequence

import tensorflow as tf
from tensorflow.python.ops import cond_v2, gen_data_flow_ops

from gpe.tfprog.exact import exact_arithmetic

STOP = -1


def _branch(f, handles):
    """A Case branch that runs part `f`. A part with call-time captures (the instance keys
    of a MirroredStrategy's collective all-reduce) is given its captured values from
    outside the branch: captured by reference inside a cond branch they are left as
    unfed placeholders (the same TF defect makes tf.function fail on some distributed
    steps). They are taken once, as the sink (traced once, run for the whole session)
    takes a single part's: a part's calls run one after another, never overlapping."""
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


def build_sink(control: tf.queue.FIFOQueue, parts: Sequence[tuple[Any, Sequence[Any]]],
               timer: tf.Variable | None = None, acks: tf.queue.FIFOQueue | None = None):
    """`parts`: (concrete function, its queue handles) in part-number order.

    acks: a queue into which the sink puts each finished call's part number (the host
    counts them to know when every call it sent has finished).

    timer: a float64 [2] variable; when given, each part's run adds its wall seconds to
    timer[0] and 1 to timer[1] (how busy the graph was, for overlap measurements)."""

    def run_one(index):
        if len(parts) == 1:  # no dispatch needed (the loop only runs valid numbers)
            f, h = parts[0]
            return f(*h)
        branches = [_branch(f, h) for f, h in parts]
        # not lowered to Switch/Merge: that costs every call a little for every part; but
        # a Case cannot take resources on several devices (a MirroredStrategy's variables)
        return cond_v2.indexed_case(index, branches,
                                    lower_using_switch_merge=_several_devices(parts))

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
        return tf.function(gpe_sink, autograph=False).get_concrete_function()
