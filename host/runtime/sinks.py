"""The session's sinks: its parts in groups of at most GROUP_SIZE, one sink per group.

A sink is a graph function TensorFlow instantiates as a whole: a new sink over every part
cost time in proportion to the number of parts (TensorFlow's passes over a function look
into every function its `Case` names, and the `Case` instantiates each branch again under
the new sink's function library: measured 110 ms at 2 parts, 390 ms at 30, so building n
functions cost O(n^2)). Parts are therefore kept in groups, each with its own control
queue and its own sink, run by its own thread; adding a part rebuilds only its group's
sink, so it costs the same whether it is the 2nd part or the 300th.

A call is one enqueue into its part's dispatch queue, where the group's sink waits after
running that part's call before (tfprog/sink.py); a call to another part of the group
first tells the sink to go on to it (`Session.start_call`).

Calls keep their order across groups: calls to one group run in order in its sink, and a
call to another group than the previous call's first waits until every call sent has
finished (`Session.start_call`), so two sinks never run calls at once. A program whose
parts fit one group (most training programs: a step, an evaluation) never waits there.

A part's number (`Registration.index`) is its group's number times GROUP_SIZE plus its
slot in the group. A new part goes to the group of the last call if it has a free slot,
else to the first group with one (a slot is free when the function that owned it is gone;
the group's sink is rebuilt without it then).

Every new sink is instantiated on one thread, the session's `Instantiator`, before its
own thread runs it. TensorFlow's oneDNN graph pass (MklLayoutRewritePass, run whenever a
function is instantiated) asks the kernel registry about each node's op through a cache
kept per thread (mkl_op_registry::IsMklOp); on a new thread every question scans the whole
registry. Instantiated on the sink's own new thread, as before, that scan was a third of
the CPU time of a bundle's first sliced call and was paid again by every later sink; on
the one instantiating thread a later sink finds its ops' answers there.
"""
from __future__ import annotations

import logging
import os
import queue
import threading

import numpy as np
import tensorflow as tf

from . import opcount
from ...tfprog.channels import make_queue
from ...tfprog.exact import use_exact_arithmetic_on_this_thread

log = logging.getLogger("gpe")


def _group_size() -> int:
    try:
        return max(1, int(os.environ.get("GPE_SINK_GROUP", "8")))
    except ValueError:
        return 8


GROUP_SIZE = _group_size()


class Group:
    """One sink's parts, its control queue (the number of the first part its sink runs),
    the thread running its sink, and the part whose dispatch queue that sink takes its
    next word from (`current`: see tfprog/sink.py)."""

    __slots__ = ("number", "control", "parts", "thread", "stopped", "current")

    def __init__(self, number: int):
        self.number = number
        self.control = tf.queue.FIFOQueue(-1, [tf.int32])
        self.parts: list = []  # (Part, Registration, weakref to its owner)
        self.thread: threading.Thread | None = None  # its last sink's
        self.stopped = False  # that sink was sent its stop (its parts were all gone)
        # the Registration of the part the sink waits on (the last one a call was sent
        # to), or None: a new sink, which takes its first part number from `control`
        self.current = None

    def live(self) -> list:
        return [entry for entry in self.parts if entry[2]() is not None]

    def renumber(self) -> None:
        """Drop the parts whose owner is gone and number the rest (calls already sent keep
        the numbering of the sink they went to: it runs them before it stops)."""
        self.parts = self.live()
        for slot, (_, reg, _) in enumerate(self.parts):
            reg.index = self.number * GROUP_SIZE + slot


def group_for_new_part(groups: list[Group], last: int) -> Group:
    """The group of the last call sent (`last`) if it has a free slot (parts called near
    each other are then in one sink: calls alternating between them never wait for each
    other), else the first group with one, else a new group (appended to `groups`)."""
    for group in ([groups[last]] if last < len(groups) else []) + groups:
        if len(group.live()) < GROUP_SIZE:
            return group
    group = Group(len(groups))
    groups.append(group)
    return group


def dispatch_queue(dtypes) -> tuple:
    """A part's dispatch queue (the word, then the entry values, of dtypes `dtypes`: see
    tfprog/sink.py), its relay queue where it has entry values (else None), and the
    values that follow a switch or STOP word in the first (never read)."""
    with opcount.plumbing():  # (not the user's work)
        return (make_queue([tf.int32, *dtypes], True),
                make_queue(list(dtypes), True) if dtypes else None,
                [_zero(d) for d in dtypes])


def _zero(dtype: tf.DType):
    """A scalar of `dtype` the enqueue converts in C++ (no eager op made here)."""
    if dtype == tf.string:
        return np.array(b"", dtype=object)
    try:
        return np.zeros((), dtype.as_numpy_dtype)
    except TypeError:  # a dtype NumPy has no zero of (a variant): a tensor
        return tf.zeros([], dtype)


def locate(index: int) -> tuple[int, int]:
    """(group number, slot in its sink) of part number `index`."""
    return divmod(index, GROUP_SIZE)


class Instantiator:
    """The thread on which TensorFlow instantiates the session's sinks (see above), one
    after another, as they are made. Each job is a sink and its stop queue, made on the
    calling thread (its ops' answers are cached there already; a queue made on the new
    instantiating thread cost it about 10 ms of its first sink's time)."""

    def __init__(self):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stop: tf.queue.FIFOQueue | None = None  # given one STOP per job

    def prepare(self, sink) -> threading.Event | None:
        """Instantiate `sink` on the instantiating thread; returns an event set once done
        (None for a sink that cannot be run without its control queue: a traced one)."""
        if not hasattr(sink, "prepare"):
            return None
        done = threading.Event()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():  # (new, or after a fork)
                self._stop = tf.queue.FIFOQueue(-1, [tf.int32])  # as a group's control queue
                self._thread = threading.Thread(target=self._run, name="gpe-instantiator",
                                                daemon=True)
                self._thread.start()
            sink.stop_for_prepare(self._stop)
            self._jobs.put((sink, self._stop, done))
        return done

    def _run(self) -> None:
        options_set = False
        while True:
            sink, stop, done = self._jobs.get()
            try:
                if not options_set:
                    # the sink's thread's call options: part of TensorFlow's kernel cache key
                    use_exact_arithmetic_on_this_thread()
                    options_set = True
                sink.prepare(stop)
            except Exception as exc:  # noqa: BLE001 (its own run raises it where it is seen)
                log.debug("instantiating a sink failed: %s", exc)
            finally:
                done.set()
