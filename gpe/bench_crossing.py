"""`gpe bench`: the cost of crossing between the host and the graph, in one run.

Each figure is the median over --repeats runs of --calls operations, in microseconds per
operation; pipelined figures include the final wait for the graph to finish. Beside the
wall time: its ratio to an eager op's (the ratio holds across loads of a shared machine,
the microseconds do not) and the host thread's CPU time. The two floor rows feed the
running sink with the bare queue operations of a call (no gpe Python at all): what the
queue operations and the graph's side cost by themselves.
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

_state = tf.Variable(0.0)


def _send_only(x):
    _state.assign(x)


def _empty(x):
    return x


def _part_number_only():
    _state.assign_add(1.0)


def _plus_one(x):
    return x + 1.0


def _median_us(run: Callable[[int], None], calls: int, repeats: int) -> tuple[float, float]:
    """(wall, host thread CPU): medians in microseconds per operation."""
    times, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.thread_time()
        run(calls)
        cpu.append((time.thread_time() - start_cpu) / calls)
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times) * 1e6, statistics.median(cpu) * 1e6


def _channel(sliced, kind: ChannelKind):
    """The host end of the channel of `kind` of sliced's (one) variant, and that variant."""
    variant = next(iter(sliced.variants.values()))
    registration = variant.registration()
    index = next(c.index for c in variant.plan.channels if c.kind == kind)
    return registration.channels[index].handle, registration.index, variant.session


def _floors(x, send_only, plus_one, no_entry):
    """The sink fed by bare queue operations: a call's entry value and part number (and,
    round trip, the dequeue of its result), as gpe's host code sends them, less gpe; and
    a part number alone, to a part with no entry values (what one queue operation per call,
    the entry values and the part number sent together, could cost at best)."""
    entry, part, session = _channel(send_only, ChannelKind.ENTRY)
    only = next(iter(no_entry.variants.values())).registration().index
    rt_entry, rt_part, _ = _channel(plus_one, ChannelKind.ENTRY)
    result, _, _ = _channel(plus_one, ChannelKind.OUTPUT)
    # each part's sink (host/runtime/sinks.py): its control queue and its slot there
    _, control, part = session.routes[part]
    _, rt_control, rt_part = session.routes[rt_part]
    _, only_control, only = session.routes[only]

    def sent(n):  # the session counts the calls it sent (its fence waits for them)
        with session.blocking:
            session.sent += n
        session.fence()

    def send(n):
        for _ in range(n):
            gen_data_flow_ops.queue_enqueue_v2(entry, [x])
            gen_data_flow_ops.queue_enqueue_v2(control, [part])
        sent(n)

    def round_trip(n):
        for _ in range(n):
            gen_data_flow_ops.queue_enqueue_v2(rt_entry, [x])
            gen_data_flow_ops.queue_enqueue_v2(rt_control, [rt_part])
            float(gen_data_flow_ops.queue_dequeue_v2(result, [tf.float32])[0])
        sent(n)

    def part_number(n):
        for _ in range(n):
            gen_data_flow_ops.queue_enqueue_v2(only_control, [only])
        sent(n)
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


def crossing(calls: int = 2000, repeats: int = 5) -> list[tuple[str, float, str]]:
    x = tf.constant(1.0)
    queue = tf.queue.FIFOQueue(-1, [tf.float32])
    eager_fn = tf.function(_plus_one, autograph=False)
    send_only, empty, plus_one = (gpe_function(f, adaptive=False)  # measure the sliced path
                                  for f in (_send_only, _empty, _plus_one))
    no_entry = gpe_function(_part_number_only, adaptive=False)
    _warm(x, send_only, empty, plus_one, no_entry)

    def enqueue(n):
        for _ in range(n):
            gen_data_flow_ops.queue_enqueue_v2(queue.queue_ref, [x])

    def dequeue(n):
        for _ in range(n):
            gen_data_flow_ops.queue_dequeue_v2(queue.queue_ref, [tf.float32])

    def pipelined(f):
        def run(n):
            for _ in range(n):
                r = f(x)
            float(plus_one(x)) if r is None else float(r)
        return run

    def round_trip(n):
        for _ in range(n):
            float(plus_one(x))

    def eager(n):
        for _ in range(n):
            _plus_one(x)

    def graph(n):
        for _ in range(n):
            eager_fn(x)

    floor_send, floor_round_trip, floor_one = _floors(x, send_only, plus_one, no_entry)
    rows = [
        ("eager op (x + 1.0)", _median_us(eager, calls, repeats), "reference"),
        ("tf.function call (x + 1.0)", _median_us(graph, calls, repeats), "reference"),
        ("queue enqueue, eager (the host's send primitive)",
         _median_us(enqueue, calls, repeats), ""),
        ("queue dequeue of a ready value (the host's receive primitive)",
         _median_us(dequeue, calls, repeats), ""),
        ("host->TF send, pipelined (sliced call that only sends)",
         _median_us(pipelined(send_only), calls, repeats), "target < 25"),
        ("  floor: its 2 bare enqueues into the running sink",
         _median_us(floor_send, calls, repeats), ""),
        ("  floor: 1 bare enqueue (a part number alone, no entry value)",
         _median_us(floor_one, calls, repeats), ""),
        ("empty sliced call, pipelined (x in, x out, not read)",
         _median_us(pipelined(empty), calls, repeats), ""),
        ("TF->host receive, round trip (float(f(x)) each call)",
         _median_us(round_trip, calls, repeats), "target < 100"),
        ("  floor: its 2 bare enqueues and 1 dequeue, sink between",
         _median_us(floor_round_trip, calls, repeats), ""),
    ]
    return rows


def format_rows(rows) -> str:
    width = max(len(name) for name, _, _ in rows)
    eager_us = rows[0][1][0]
    lines = [f"{'operation':<{width}}  {'us/op':>8}  {'x eager op':>10}  {'host CPU us':>11}"]
    lines += [f"{name:<{width}}  {wall:8.1f}  {wall / eager_us:10.2f}  {cpu:11.1f}  {note}"
              for name, (wall, cpu), note in rows]
    return "\n".join(lines)


def main(calls: int, repeats: int) -> str:
    np.random.seed(0)
    text = format_rows(crossing(calls, repeats))
    print(text)
    return text
