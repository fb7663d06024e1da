"""The sink program: one graph function that runs every TF part, in call order.

It loops: dequeue a part number from the control queue, run that part (a call by name of
its FunctionDef, with its channels' queue handles), until it dequeues a negative number.
The host runs it on one thread for as long as the set of parts stays the same.
"""
from __future__ import annotations

from typing import Any, Sequence

import tensorflow as tf
from tensorflow.python.ops import gen_data_flow_ops

from tfprog.exact import exact_arithmetic

STOP = -1


def build_sink(control: tf.queue.FIFOQueue, parts: Sequence[tuple[Any, Sequence[Any]]],
               timer: tf.Variable | None = None):
    """`parts`: (concrete function, its queue handles) in part-number order.

    timer: a float64 [2] variable; when given, each part's run adds its wall seconds to
    timer[0] and 1 to timer[1] (how busy the graph was, for overlap measurements)."""

    def run_one(index):
        branches = [(lambda f=f, h=tuple(h): f(*h)) for f, h in parts]
        branches.append(lambda: tf.constant(0, tf.int32))  # STOP and unknown numbers
        return tf.switch_case(index, branches)

    def body(previous):
        index = gen_data_flow_ops.queue_dequeue_v2(control.queue_ref, [tf.int32])[0]
        index = tf.reshape(index, [])
        safe = tf.where(index < 0, len(parts), index)
        if timer is None:
            with tf.control_dependencies([run_one(safe)]):
                return tf.identity(index)
        with tf.control_dependencies([safe]):
            start = tf.timestamp()
        with tf.control_dependencies([start]):
            done = run_one(safe)
        with tf.control_dependencies([done]):
            elapsed = tf.timestamp() - start
        counted = tf.cast(index >= 0, tf.float64)
        with tf.control_dependencies([timer.assign_add(tf.stack([elapsed, 1.0]) * counted)]):
            return tf.identity(index)

    def gpe_sink():
        return tf.while_loop(lambda i: i >= 0, body, [tf.constant(0, tf.int32)],
                             parallel_iterations=1)

    with exact_arithmetic():
        return tf.function(gpe_sink, autograph=False).get_concrete_function()
