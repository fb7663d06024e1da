"""What the fences (host/runtime/fence.py) cost an eager variable op when no sliced call is in flight.

    python tests/bench_fence.py [--ops N] [--repeats R]

Every eager variable access of a program goes through a fence once gpe is imported and a
session exists, sliced calls or not. For each op this times R rounds of N ops in three
states of the same process, alternating round by round so that a busy machine loads them
alike: no fence at all (TF's own entry points put back), the op-level fences only (TF's
Python variable ops wrapped, as before the `_handle` property and the tf.function fence),
and every fence. Prints the median nanoseconds per op of each and the differences. Not a
test: the numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
from tensorflow.python.eager.polymorphic_function import concrete_function  # noqa: E402
from tensorflow.python.ops import (gen_resource_variable_ops, gen_training_ops,  # noqa: E402
                                   resource_variable_ops)

from gpe.host.runtime import fence  # noqa: E402
from gpe.host.runtime.session import get_session  # noqa: E402

V = tf.Variable(tf.ones([4, 4]))
X = tf.ones([2, 4])


@tf.function
def _captures_v():
    return V + 1.0


OPS = {
    "v.read_value()": V.read_value,
    "v.numpy()": V.numpy,
    "v.assign_add(x)": lambda: V.assign_add(tf.zeros([4, 4])),
    "tf.reduce_sum(v)": lambda: tf.reduce_sum(V),
    "tf.matmul(x, v)": lambda: tf.matmul(X, V),
    "tf.function capturing v": _captures_v,
}


class States:
    """Switches the fences in and out: "none", "ops" (the wrapped Python ops), "all"."""

    def __init__(self):
        get_session()  # installs every fence (host/runtime/fence.py)
        self.ops = [(m, n, getattr(m, n)) for m in (gen_resource_variable_ops,
                                                    gen_training_ops)
                    for n in dir(m) if hasattr(getattr(m, n), "__wrapped__")]
        self.handle = resource_variable_ops.BaseResourceVariable.__dict__["_handle"]
        self.call = concrete_function.ConcreteFunction._call_flat  # noqa: SLF001

    def set(self, state: str) -> None:
        for module, name, wrapper in self.ops:
            setattr(module, name, wrapper if state != "none" else wrapper.__wrapped__)
        cls = resource_variable_ops.BaseResourceVariable
        if state == "all":
            cls._handle = self.handle
        elif "_handle" in cls.__dict__:
            del cls._handle  # the instance's own entry answers
        concrete_function.ConcreteFunction._call_flat = (  # noqa: SLF001
            self.call if state == "all" else self.call.__wrapped__)


def measure(op, n: int) -> float:
    """CPU nanoseconds of this thread per op (eager ops run on the calling thread; CPU
    time, unlike wall time, barely moves with the load of other processes)."""
    start = time.thread_time_ns()
    for _ in range(n):
        op()
    return (time.thread_time_ns() - start) / n


def handle_reads(op) -> int:
    """How many times one op reads a variable's `_handle` (each a fenced property get)."""
    cls = resource_variable_ops.BaseResourceVariable
    fenced = cls.__dict__["_handle"]
    count = [0]

    def get(self):
        count[0] += 1
        return fenced.fget(self)
    cls._handle = property(get, fenced.fset, fenced.fdel)
    try:
        op()
    finally:
        cls._handle = fenced
    return count[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=2000, help="ops per round")
    parser.add_argument("--repeats", type=int, default=15, help="rounds per state")
    args = parser.parse_args()
    states = States()
    names = ("none", "ops", "all")
    print(f"{'op':26} {'no fence':>9} {'op fences':>10} {'all fences':>11} "
          f"{'ops-none':>9} {'all-none':>9} {'_handle':>8}   (CPU ns per op, medians of "
          f"{args.repeats} rounds of {args.ops})")
    for label, op in OPS.items():
        times: dict[str, list[float]] = {s: [] for s in names}
        for state in names:  # warm up every path
            states.set(state)
            measure(op, 200)
        for _ in range(args.repeats):
            for state in names:
                states.set(state)
                times[state].append(measure(op, args.ops))
        med = {s: statistics.median(t) for s, t in times.items()}
        print(f"{label:26} {med['none']:9.0f} {med['ops']:10.0f} {med['all']:11.0f} "
              f"{med['ops'] - med['none']:9.0f} {med['all'] - med['none']:9.0f} "
              f"{handle_reads(op):8d}")
    states.set("all")
    attribute(states, args)


def attribute(states: States, args) -> None:
    """The `_handle` read alone: the property against the instance's own entry."""
    times: dict[str, list[float]] = {"none": [], "all": []}
    read = lambda: V._handle  # noqa: E731
    for _ in range(args.repeats):
        for state in times:
            states.set(state)
            times[state].append(measure(read, args.ops * 20))
    states.set("all")
    med = {s: statistics.median(t) for s, t in times.items()}
    print(f"one `v._handle` read: {med['none']:.0f} ns plain, {med['all']:.0f} ns fenced "
          f"(+{med['all'] - med['none']:.0f} ns)")
    noop = lambda *a: None  # noqa: E731
    for label, wrapped, call in (
            ("a wrapped variable op", fence._fenced(noop, get_session()), lambda f: f()),
            ("a concrete function's _call_flat", fence._fenced_call(noop, get_session()),
             lambda f: f(None, (), (V.handle,)))):
        plain = statistics.median(measure(lambda: call(noop), args.ops * 20)
                                  for _ in range(args.repeats))
        fenced = statistics.median(measure(lambda: call(wrapped), args.ops * 20)
                                   for _ in range(args.repeats))
        print(f"{label}: +{fenced - plain:.0f} ns (the wrapper around a function that does "
              "nothing)")


if __name__ == "__main__":
    main()
