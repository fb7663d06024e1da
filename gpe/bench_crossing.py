"""`gpe bench`: the cost of crossing between the host and the graph, in one run.

Each figure is the median over --repeats runs of --calls operations, in microseconds per
operation; pipelined figures include the final wait for the graph to finish.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import numpy as np
import tensorflow as tf
from tensorflow.python.ops import gen_data_flow_ops

import gpe

_state = tf.Variable(0.0)


def _send_only(x):
    _state.assign(x)


def _empty(x):
    return x


def _plus_one(x):
    return x + 1.0


def _median_us(run: Callable[[int], None], calls: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(calls)
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times) * 1e6


def crossing(calls: int = 2000, repeats: int = 5) -> list[tuple[str, float, str]]:
    x = tf.constant(1.0)
    queue = tf.queue.FIFOQueue(-1, [tf.float32])
    eager_fn = tf.function(_plus_one, autograph=False)
    send_only, empty, plus_one = (gpe.function(f, adaptive=False)  # measure the sliced path
                                  for f in (_send_only, _empty, _plus_one))
    for f in (send_only, empty, plus_one):  # profile call, then build and first graph run
        f(x)
        f(x)
    float(plus_one(x))
    float(empty(x))

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

    rows = [
        ("eager op (x + 1.0)", _median_us(eager, calls, repeats), "reference"),
        ("tf.function call (x + 1.0)", _median_us(graph, calls, repeats), "reference"),
        ("queue enqueue, eager (the host's send primitive)",
         _median_us(enqueue, calls, repeats), ""),
        ("queue dequeue of a ready value (the host's receive primitive)",
         _median_us(dequeue, calls, repeats), ""),
        ("host->TF send, pipelined (sliced call that only sends)",
         _median_us(pipelined(send_only), calls, repeats), "target < 25"),
        ("empty sliced call, pipelined (x in, x out, not read)",
         _median_us(pipelined(empty), calls, repeats), ""),
        ("TF->host receive, round trip (float(f(x)) each call)",
         _median_us(round_trip, calls, repeats), "target < 100"),
    ]
    return rows


def format_rows(rows) -> str:
    width = max(len(name) for name, _, _ in rows)
    lines = [f"{'operation':<{width}}  {'us/op':>8}"]
    lines += [f"{name:<{width}}  {value:8.1f}  {note}" for name, value, note in rows]
    return "\n".join(lines)


def main(calls: int, repeats: int) -> str:
    np.random.seed(0)
    text = format_rows(crossing(calls, repeats))
    print(text)
    return text
