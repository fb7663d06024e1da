"""The host end of one channel: eager enqueue/dequeue on its queue, in FIFO order.

TF->host values are handed out as `Pending`s in the order the host program reaches them
and dequeued in that same order when the first of them is needed. Pendings nobody asks
for are still dequeued (the oldest first) once too many pile up, so a program that never
reads a value does not grow the queue without bound.
"""
from __future__ import annotations

import collections
import threading
import weakref

import tensorflow as tf

from .pending import Pending
from .spin import Spin
from ...tfprog.channels import ValueSpec, unflatten

_WOKEN = (tf.errors.CancelledError, tf.errors.OutOfRangeError, RuntimeError)
_PY_TYPES = {"bool": bool, "int": int, "float": float, "NoneType": lambda _: None}
MAX_UNREAD = 256  # well past how far the host can run ahead (the entry queues hold 64)


class HostChannel:
    def __init__(self, queue: tf.queue.FIFOQueue, dtypes: list[tf.DType],
                 specs: list[ValueSpec], label: str, session, layouts: list | None = None):
        self.queue, self.handle, self.session = queue, queue.queue_ref, session
        self.layouts = layouts or []  # host->TF: how the values split into components
        self.dtypes, self.specs, self.label = dtypes, specs, label
        # a wait on this channel, as the watchdog sees it: made once (every call's path; a
        # channel's operations never overlap: sends come from the call's thread, receives
        # hold the channel's lock)
        self._blocked = session.waiting(label)
        self.dtype = specs[0].dtype if specs else tf.bool
        # TF -> host: Python values among the values (see tfprog.part.output): received at
        # once and given back as Python bools, ints and floats
        self.python = [_PY_TYPES.get(s.type_name) if s.python else None for s in specs or ()]
        if not any(self.python):
            self.python = None
        # host -> TF, a tensor per value: ((dtype enum, shape), ...), what a value of every
        # call's common case matches exactly (call.to_components); else None
        self.exact = tuple((s.dtype.as_datatype_enum, s.shape) for s in specs) if (
            specs and len(self.layouts) == len(specs) and all(l is None for l in self.layouts)
            and not any(s.python or s.shape is None for s in specs)) else None
        self._waiting: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self.spin = Spin()  # TF -> host: poll a little before a dequeue would sleep

    # host -> TF ---------------------------------------------------------------------
    def send(self, components) -> None:
        """Enqueue one send's components; called inside an atomic step (host/variants/stubs.py)."""
        try:
            with self._blocked:  # blocks only when the queue is full
                self.session.blocking.enqueue(self.handle, components)
        except _WOKEN as exc:
            self._woken(exc)

    # TF -> host ---------------------------------------------------------------------
    def recv(self) -> Pending:
        pending = Pending(self)
        with self.session.blocking, self._lock:
            self._waiting.append(weakref.ref(pending))
            if len(self._waiting) > MAX_UNREAD:
                self._pull_one()
        return pending

    def recv_now(self) -> list:
        """The values of one send, received now and rebuilt per layout (lists, tuples and
        dicts of TF values), in FIFO order after any value of this channel still pending."""
        with self.session.blocking, self._lock:
            while self._waiting:
                self._pull_one()
            try:
                with self._blocked:
                    self.spin.until_ready(self.handle)
                    leaves = self.session.blocking.dequeue(self.handle, self.dtypes)
            except _WOKEN as exc:
                self._woken(exc)
        leaves = list(leaves)
        if self.python:
            leaves = [kind(leaf.numpy()) if kind else leaf for leaf, kind in zip(leaves, self.python)]
        return unflatten(self.layouts, leaves)

    def resolve(self, pending: Pending) -> None:
        with self.session.blocking, self._lock:
            while pending._value is None:
                self._pull_one()

    def wait(self) -> None:
        """Receive a token (barrier channels)."""
        self.recv().resolve()

    def _pull_one(self) -> None:
        """Dequeue the oldest pending value (inside an atomic step: host/runtime/interrupt.py)."""
        try:
            with self._blocked:
                self.spin.until_ready(self.handle)
                value = self.session.blocking.dequeue(self.handle, self.dtypes)
        except _WOKEN as exc:
            self._woken(exc)
        owner = self._waiting.popleft()()
        if owner is not None:
            owner._value = value[-1] if value else tf.constant(True)

    def _woken(self, exc: BaseException):
        """The queue was closed under this wait: raise why (the sink's error, a timeout,
        Ctrl-C). A KeyboardInterrupt delivered while TF reports the closed queue reaches
        us as pybind11's RuntimeError about mismatched exceptions."""
        if isinstance(exc, RuntimeError) and not self.session.failed:
            raise exc
        self.session.raise_failure(self.label, exc)

    def close(self) -> None:
        try:
            self.queue.close(cancel_pending_enqueues=True)
        except tf.errors.OpError:
            pass
