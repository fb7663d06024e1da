"""`gpe bench`: the cost of crossing between the host and the graph, in one run.

Each figure is the median over --repeats runs of --calls operations, in microseconds per
operation (the rows measured round-robin, once per repeat each); pipelined figures
include the final wait for the graph to finish. Beside the
wall time: its ratio to an eager op's (the ratio holds across loads of a shared machine,
the microseconds do not) and the host thread's CPU time. The floor rows feed the running
sink with the bare queue operations of a call (no gpe Python at all): a call's one
enqueue (its part number and entry values together) and, for a round trip, the dequeue
of its result: what the queue operations and the graph's side cost by themselves. The
ratio lines give a call's time over its floor's, per repeat (the median of those).
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import numpy as np
import tensorflow as tf
from tensorflow.python.ops import gen_data_flow_ops

from .api import function as gpe_function
from .slicer.plan import ChannelKind
from .tfprog.sink import RUN

_state = tf.Variable(0.0)


def _send_only(x):
    _state.assign(x)


def _empty(x):
    return tf.identity(x)  # (a function with no TF work runs eagerly)


def _part_number_only():
    _state.assign_add(1.0)


def _plus_one(x):
    return x + 1.0


def _once_us(run: Callable[[int], None], calls: int) -> tuple[float, float]:
    """(wall, host thread CPU) of `calls` operations, in microseconds per operation."""
    start, start_cpu = time.perf_counter(), time.thread_time()
    run(calls)
    return ((time.perf_counter() - start) / calls * 1e6,
            (time.thread_time() - start_cpu) / calls * 1e6)


def _waited_on(sliced, x=None):
    """The dispatch queue of sliced's (one) variant's part, after a call of it (so that
    its sink waits on that queue: tfprog/sink.py; its result read through gpe), and the
    variant."""
    result = sliced(x) if x is not None else sliced()
    if result is not None:
        float(result)
    variant = next(iter(sliced.variants.values()))
    return variant.registration().dispatch.queue_ref, variant


def _floors(x, send_only, plus_one, no_entry):
    """The sink fed by bare queue operations, as gpe's host code sends them, less gpe: a
    call's one enqueue (RUN and its entry value) into the dispatch queue the sink waits
    on (and, round trip, the dequeue of its result); and RUN alone, to a part with no
    entry values."""
    run = tf.constant(RUN, tf.int32)

    def sent(session, n):  # the session counts the calls it sent (its fence waits for them)
        with session.blocking:
            session.sent += n
        session.fence()

    def send(n):
        dispatch, variant = _waited_on(send_only, x)
        for _ in range(n):
            gen_data_flow_ops.queue_enqueue_v2(dispatch, [run, x])
        sent(variant.session, n)

    def round_trip(n):
        dispatch, variant = _waited_on(plus_one, x)
        index = next(c.index for c in variant.plan.channels if c.kind == ChannelKind.OUTPUT)
        result = variant.registration().channels[index].handle
        for _ in range(n):
            gen_data_flow_ops.queue_enqueue_v2(dispatch, [run, x])
            float(gen_data_flow_ops.queue_dequeue_v2(result, [tf.float32])[0])
        sent(variant.session, n)

    def part_number(n):
        dispatch, variant = _waited_on(no_entry)
        for _ in range(n):
            gen_data_flow_ops.queue_enqueue_v2(dispatch, [run])
        sent(variant.session, n)
    return send, round_trip, part_number


def _warm(x, send_only, empty, plus_one, no_entry) -> None:
    """Profile calls, then the build and the first graph runs of each function."""
    for f in (send_only, empty, plus_one):
        for _ in range(5):
            f(x)
    for _ in range(5):
        no_entry()
    float(plus_one(x))
    float(empty(x))


def _references(x) -> tuple:
    """Runners of n eager ops, n tf.function calls, n bare enqueues and n dequeues."""
    queue = tf.queue.FIFOQueue(-1, [tf.float32])
    eager_fn = tf.function(_plus_one, autograph=False)

    def eager(n):
        for _ in range(n):
            _plus_one(x)

    def graph(n):
        for _ in range(n):
            eager_fn(x)

    def enqueue(n):
        for _ in range(n):
            gen_data_flow_ops.queue_enqueue_v2(queue.queue_ref, [x])

    def dequeue(n):
        for _ in range(n):
            gen_data_flow_ops.queue_dequeue_v2(queue.queue_ref, [tf.float32])
    return eager, graph, enqueue, dequeue


def crossing(calls: int = 2000, repeats: int = 5) -> tuple[list, list]:
    """(rows: (name, (wall, host CPU) medians in us per operation, note), ratios: (name,
    the median over repeats of a call's wall time over its floor's in the same repeat))."""
    x = tf.constant(1.0)
    send_only, empty, plus_one = (gpe_function(f, adaptive=False)  # measure the sliced path
                                  for f in (_send_only, _empty, _plus_one))
    no_entry = gpe_function(_part_number_only, adaptive=False)
    _warm(x, send_only, empty, plus_one, no_entry)
    eager, graph, enqueue, dequeue = _references(x)

    def pipelined(f):
        def run(n):
            for _ in range(n):
                r = f(x)
            float(plus_one(x)) if r is None else float(r)
        return run

    def round_trip(n):
        for _ in range(n):
            float(plus_one(x))

    floor_send, floor_round_trip, floor_one = _floors(x, send_only, plus_one, no_entry)
    rows = [
        ("eager op (x + 1.0)", eager, "reference"),
        ("tf.function call (x + 1.0)", graph, "reference"),
        ("queue enqueue, eager (the host's send primitive)", enqueue, ""),
        ("queue dequeue of a ready value (the host's receive primitive)", dequeue, ""),
        ("host->TF send, pipelined (sliced call that only sends)", pipelined(send_only),
         "target <= 1.1x floor"),
        ("  floor: its 1 bare enqueue into the running sink", floor_send, ""),
        ("  floor: 1 bare enqueue to a part with no entry value", floor_one, ""),
        ("empty sliced call, pipelined (x in, x out, not read)", pipelined(empty), ""),
        ("TF->host receive, round trip (float(f(x)) each call)", round_trip,
         "target <= 1.1x floor"),
        ("  floor: its 1 bare enqueue and 1 dequeue, sink between", floor_round_trip, ""),
    ]
    # round-robin: each repeat measures every row once, so that a change in the machine's
    # load meets every row alike; each call's ratio to its floor is taken per repeat
    measured = [[_once_us(run, calls) for _, run, _ in rows] for _ in range(repeats)]
    out = [(name, tuple(statistics.median(m[i][k] for m in measured) for k in (0, 1)), note)
           for i, (name, _, note) in enumerate(rows)]
    ratios = [(f"{rows[call][0].split(' (')[0]} / its floor",
               statistics.median(m[call][0] / m[floor][0] for m in measured))
              for call, floor in ((4, 5), (8, 9))]
    return out, ratios


def format_rows(rows, ratios=()) -> str:
    width = max(len(name) for name, _, _ in rows)
    eager_us = rows[0][1][0]
    lines = [f"{'operation':<{width}}  {'us/op':>8}  {'x eager op':>10}  {'host CPU us':>11}"]
    lines += [f"{name:<{width}}  {wall:8.1f}  {wall / eager_us:10.2f}  {cpu:11.1f}  {note}"
              for name, (wall, cpu), note in rows]
    lines += [f"ratio: {name}: {ratio:.2f}x (median of the repeats' ratios)"
              for name, ratio in ratios]
    return "\n".join(lines)


def main(calls: int, repeats: int) -> str:
    np.random.seed(0)
    text = format_rows(*crossing(calls, repeats))
    print(text)
    return text
