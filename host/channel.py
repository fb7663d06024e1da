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
from tensorflow.python.ops import gen_data_flow_ops

from gpe.host.pending import Pending
from gpe.tfprog.channels import ValueSpec, unflatten

_WOKEN = (tf.errors.CancelledError, tf.errors.OutOfRangeError, RuntimeError)
MAX_UNREAD = 256  # well past how far the host can run ahead (the entry queues hold 64)


class HostChannel:
    def __init__(self, queue: tf.queue.FIFOQueue, dtypes: list[tf.DType],
                 specs: list[ValueSpec], label: str, session, layouts: list | None = None):
        self.queue, self.handle, self.session = queue, queue.queue_ref, session
        self.layouts = layouts or []  # host->TF: how the values split into components
        self.dtypes, self.specs, self.label = dtypes, specs, label
        self.dtype = specs[0].dtype if specs else tf.bool
        self._waiting: collections.deque = collections.deque()
        self._lock = threading.Lock()

    # host -> TF ---------------------------------------------------------------------
    def send(self, components: list) -> None:
        try:
            with self.session.waiting(self.label):  # blocks only when the queue is full
                gen_data_flow_ops.queue_enqueue_v2(self.handle, components)
        except _WOKEN as exc:
            self._woken(exc)

    # TF -> host ---------------------------------------------------------------------
    def recv(self) -> Pending:
        pending = Pending(self)
        with self._lock:
            self._waiting.append(weakref.ref(pending))
            if len(self._waiting) > MAX_UNREAD:
                self._pull_one()
        return pending

    def recv_now(self) -> list:
        """The values of one send, received now and rebuilt per layout (lists, tuples and
        dicts of TF values), in FIFO order after any value of this channel still pending."""
        with self._lock:
            while self._waiting:
                self._pull_one()
            try:
                with self.session.waiting(self.label):
                    leaves = gen_data_flow_ops.queue_dequeue_v2(self.handle, self.dtypes)
            except _WOKEN as exc:
                self._woken(exc)
        return unflatten(self.layouts, list(leaves))

    def resolve(self, pending: Pending) -> None:
        with self._lock:
            while pending._value is None:
                self._pull_one()

    def wait(self) -> None:
        """Receive a token (barrier channels)."""
        self.recv().resolve()

    def _pull_one(self) -> None:
        try:
            with self.session.waiting(self.label):
                value = gen_data_flow_ops.queue_dequeue_v2(self.handle, self.dtypes)
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
