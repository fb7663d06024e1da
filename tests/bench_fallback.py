"""What a call costs where gpe falls back to eager, against the plain function.

    python tests/bench_fallback.py [--calls N] [--repeats R]

For each way a call ends up eager (a signature refused for good, a call made while an
outer GradientTape records, a variant measured faster eagerly, a function refused whole),
times R rounds of N calls of the gpe function and of the plain function, alternating, and
prints the median microseconds per call of each and their ratio, and gpe's own time per
call (each gpe call's time less the time inside the function: robust on a busy machine,
where two timings of the whole step differ by more than gpe's path). Not a test: the numbers
depend on the machine (tests/test_fallback_path.py checks the fast path by counts).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

import gpe  # noqa: E402

W = tf.Variable(tf.ones([16, 16]) * 0.01)
K = tf.Variable(1.0)


_LOG: list = []


def _scale():
    _LOG.append("scale")  # host work: this runs on the host
    return K * 1.5


def refused(x, y):
    """A tensor made by host code inside a TF `with` block cannot cross into it: the
    signature is refused for good."""
    with tf.GradientTape() as tape:
        scale = _scale()
        loss = tf.reduce_sum(tf.matmul(x, W) * y) * scale
    grad = tape.gradient(loss, W)
    return loss + tf.reduce_sum(grad)


def forward(x, y):
    """Called under the caller's tape: each call runs eagerly so the tape sees it."""
    h = tf.tanh(tf.matmul(x, W))
    return tf.reduce_sum(h * y) + tf.reduce_mean(h)


def tiny(x, y):
    """Cheaper eagerly than a crossing: the adaptive timing runs it eagerly."""
    return x + y


def deleted(x, y):
    """`del` of an item is not sliced: the whole function runs eagerly (a `del` of a local
    never used after it is dropped, and that function is sliced)."""
    parts = {"s": tf.reduce_sum(x * y), "t": x}
    del parts["t"]
    return parts["s"] * 2.0


def _per_call(fn, args, calls: int, tape: bool) -> float:
    start = time.perf_counter()
    if tape:
        with tf.GradientTape() as t:
            t.watch(W)
            for _ in range(calls):
                fn(*args)
    else:
        for _ in range(calls):
            fn(*args)
    return (time.perf_counter() - start) / calls


def measure(name: str, fn, calls: int, repeats: int, tape: bool = False,
            adaptive: bool = True) -> dict:
    x, y = tf.ones([8, 16]), tf.ones([8, 16])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpe.GpeWarning)
        sliced = gpe.function(fn, adaptive=adaptive)
        for _ in range(60):  # profile, build, the adaptive timing: past all of it
            sliced(x, y)
        if tape:
            _per_call(sliced, (x, y), 5, tape)
        eager_t, gpe_t = [], []
        for _ in range(repeats):
            eager_t.append(_per_call(fn, (x, y), calls, tape))
            gpe_t.append(_per_call(sliced, (x, y), calls, tape))
        own = _own_per_call(sliced, fn, (x, y), calls, tape)
    e, g = statistics.median(eager_t), statistics.median(gpe_t)
    stats = sliced.stats()
    return {"case": name, "eager_us": e * 1e6, "gpe_us": g * 1e6, "ratio": g / e,
            "own_us": own * 1e6, "own_ratio": own / e,
            "graph_calls": stats["graph_calls"], "calls": stats["calls"]}


def _own_per_call(sliced, fn, args, calls: int, tape: bool) -> float:
    """gpe's own time per call where it runs `fn` eagerly: each call's time less the time
    inside `fn` (the median; one call's own path is microseconds, so a busy machine moves
    it far less than it moves two separate timings of the whole step)."""
    inner, own = [], []

    def timed(*a):
        start = time.perf_counter()
        try:
            return fn(*a)
        finally:
            inner.append(time.perf_counter() - start)
    sliced.fn = timed
    try:
        with (tf.GradientTape() if tape else _nothing()) as t:
            if tape:
                t.watch(W)
            for _ in range(calls):
                start = time.perf_counter()
                sliced(*args)
                took = time.perf_counter() - start
                if inner:
                    own.append(took - inner.pop())
    finally:
        sliced.fn = fn
    return statistics.median(own) if own else float("nan")


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    rows = [measure("refused signature", refused, args.calls, args.repeats),
            measure("under an outer tape", forward, args.calls, args.repeats, tape=True),
            measure("eager faster (adaptive)", tiny, args.calls, args.repeats),
            measure("refused whole (del)", deleted, args.calls, args.repeats)]
    print(f"{'case':26s} {'eager us':>9s} {'gpe us':>9s} {'gpe/eager':>9s} "
          f"{'gpe own us':>10s} {'own/eager':>9s} {'sliced calls':>12s}")
    for r in rows:
        print(f"{r['case']:26s} {r['eager_us']:9.1f} {r['gpe_us']:9.1f} {r['ratio']:9.3f} "
              f"{r['own_us']:10.1f} {r['own_ratio'] * 100:8.2f}% "
              f"{r['graph_calls']:>5d}/{r['calls']}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
