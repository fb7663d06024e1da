"""Ctrl-C while gpe works: never a channel out of step, never a wait that ignores it.

Two mechanisms, both for the main thread (the only one Python runs signal handlers on):

- **Atomic steps.** gpe's own host steps (a channel operation and its bookkeeping: a value
  dequeued and handed to its Pending, a flag sent and the call's position advanced, a
  call's start, the cleanup of a call the host left early) run inside `with blocking:`.
  While one runs, a SIGINT handled by Python's default handler is only recorded (gpe
  installs a handler that defers it, as asyncio does, when the default one is installed);
  the KeyboardInterrupt is raised when the outermost step ends, so it never lands between
  a queue operation and its bookkeeping (CPython checks for signals right after each
  call returns: a value dequeued there would be lost and every later value shifted).
- **Interruptible waits.** A step that waits for the graph (a dequeue; the sink's
  acknowledgements) runs its queue op with a TF cancellation manager. A signal (the
  watchdog listens on the signal wakeup fd) cancels it: TF takes nothing from the queue.
  The handlers then run; a KeyboardInterrupt is raised right there, where nothing of the
  step was done yet (a step marked `shielded`, the cleanup of a call, waits on and raises
  it at its end). A handler that returns lets the wait start again (PEP 475). Enqueues
  keep TF's fast path (see `enqueue`).

So Ctrl-C during a wait raises KeyboardInterrupt at once, the session, its queues and the
calls already sent stay as they were (the graph goes on with them), and a call the host
left early is cancelled as after any exception.
"""
from __future__ import annotations

import builtins
import ctypes
import re
import signal
import threading

import tensorflow as tf
from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import cancellation, context, core
from tensorflow.python.framework import ops
from tensorflow.python.ops import gen_data_flow_ops

# pybind11's report when a signal handler raised while TF built an op's error
_REPLACED = re.compile(r"MISMATCH of original and normalized active exception types: "
                       r"ORIGINAL \w+ REPLACED BY (\w+)")


class Interruptible:
    """The main thread's atomic steps and blocking queue operations, for one session."""

    def __init__(self):
        self.main = threading.main_thread().ident
        self.depth = 0          # atomic steps the main thread is inside
        self.shielded = 0       # of which cleanups: their waits do not raise
        self.pending = None     # a deferred SIGINT: (signum, frame)
        self._previous = None   # the handler gpe's deferring one stands in for
        self._lock = threading.Lock()
        self._manager = cancellation.CancellationManager()
        self._shield = _Shield(self)

    def after_fork_in_child(self) -> None:
        """In a forked child: fresh state and lock, and no new TF object (making one there
        can wait for ever on a TF lock another thread of the parent held at the fork)."""
        self.main = threading.main_thread().ident
        self.depth = self.shielded = 0
        self.pending = None
        self._lock = threading.Lock()

    # atomic steps --------------------------------------------------------------------
    def __enter__(self):
        if threading.get_ident() == self.main:
            self.depth += 1

    def __exit__(self, kind, exc, tb):
        if threading.get_ident() == self.main:
            self.depth -= 1
            if self.pending is not None and self.depth == 0:
                self._deliver()

    def hold(self) -> None:
        """Enter an atomic step that leaves a deferred SIGINT pending (`unhold`) for a
        later step, or `deliver_pending`, to raise."""
        if threading.get_ident() == self.main:
            self.depth += 1

    def unhold(self) -> None:
        if threading.get_ident() == self.main:
            self.depth -= 1

    def deliver_pending(self) -> None:
        if self.pending is not None and self.depth == 0 \
                and threading.get_ident() == self.main:
            self._deliver()

    def shield(self) -> "_Shield":
        """An atomic step whose waits are not interrupted (a call's cleanup: the TF part
        must get its cancellation); a SIGINT is raised when it ends. (One object serves
        every use: it holds no state of its own.)"""
        return self._shield

    def install_handler(self) -> None:
        """On the main thread, when Python's default SIGINT handler is in place: defer it
        inside atomic steps (see the module docstring)."""
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.default_int_handler
            signal.signal(signal.SIGINT, self._on_signal)

    def uninstall_handler(self) -> None:
        if self._previous is not None and threading.current_thread() is threading.main_thread() \
                and signal.getsignal(signal.SIGINT) == self._on_signal:
            signal.signal(signal.SIGINT, self._previous)
        self._previous = None

    def _on_signal(self, signum, frame):
        if self.depth:
            self.pending = (signum, frame)
            return
        self._previous(signum, frame)

    def _deliver(self) -> None:
        signum, frame = self.pending
        self.pending = None
        self._previous(signum, frame)

    # blocking queue operations -----------------------------------------------------
    def interrupt(self) -> None:
        """A signal came (the watchdog's thread): cancel the main thread's wait, if any (a
        wait that starts later finds the manager cancelled and runs the handlers too)."""
        with self._lock:
            self._manager.start_cancel()

    def dequeue(self, handle, dtypes: list) -> list:
        if threading.get_ident() != self.main:
            return gen_data_flow_ops.queue_dequeue_v2(handle, dtypes)
        return self._run("QueueDequeueV2", len(dtypes), [handle],
                         ("component_types", dtypes, "timeout_ms", -1))

    @staticmethod
    def enqueue(handle, components) -> None:
        """TF's fast path, not cancellable: an enqueue blocks only while the host is a
        queue's capacity ahead of the graph, which frees a place within one call's work
        (a Ctrl-C meanwhile is raised when the step ends); a cancellable enqueue would
        cost a conversion of each component to a tensor on every send. Called as the
        generated op calls it, less its Python wrapper (every call's path)."""
        ctx = context._context  # noqa: SLF001 (made: a session exists)
        try:
            pywrap_tfe.TFE_Py_FastPathExecute(ctx, "QueueEnqueueV2", None, handle,
                                              components, "timeout_ms", -1)
        except core._NotOkStatusException as exc:  # noqa: SLF001
            ops.raise_from_not_ok_status(exc, None)
        except core._FallbackException:  # noqa: SLF001 (a component the fast path refused)
            gen_data_flow_ops.queue_enqueue_v2(handle, components)

    def _run(self, op: str, outputs: int, inputs: list, attrs: tuple) -> list:
        while True:
            manager = self._manager
            try:
                return _execute_cancellable(op, outputs, inputs, attrs, manager)
            except tf.errors.CancelledError:
                if not manager.is_cancelled:  # the queue was closed under the wait
                    raise
            except RuntimeError as exc:
                if manager.is_cancelled:
                    self._renew(manager)
                _raise_replacement(exc)
                raise
            self._renew(manager)
            ctypes.pythonapi.PyErr_CheckSignals()  # raises what a handler raises
            if self.pending is not None and not self.shielded:
                self._deliver()  # nothing of this step was done yet

    def _renew(self, manager) -> None:
        with self._lock:
            if self._manager is manager:
                self._manager = cancellation.CancellationManager()


def _execute_cancellable(op: str, outputs: int, inputs: list, attrs: tuple, manager) -> list:
    """TF's `execute.execute_with_cancellation`, less its Python lookups (every value a
    host waits for goes through here)."""
    ctx = context._context or context.context()  # noqa: SLF001
    handle = ctx._context_handle  # noqa: SLF001 (ctx._handle, once made)
    if handle is None:
        handle = ctx._handle  # noqa: SLF001
    try:
        return pywrap_tfe.TFE_Py_ExecuteCancelable(handle, ctx._thread_local_data.device_name,
                                                   op, inputs, attrs, manager._impl, outputs)
    except core._NotOkStatusException as exc:  # noqa: SLF001
        raise core._status_to_exception(exc) from None  # noqa: SLF001


class _Shield:
    __slots__ = ("blocking",)

    def __init__(self, blocking: Interruptible):
        self.blocking = blocking

    def __enter__(self):
        blocking = self.blocking
        if threading.get_ident() == blocking.main:
            blocking.depth += 1
            blocking.shielded += 1

    def __exit__(self, *exc):
        blocking = self.blocking
        if threading.get_ident() == blocking.main:
            blocking.shielded -= 1
            blocking.depth -= 1
            if blocking.pending is not None and blocking.depth == 0:
                blocking._deliver()  # noqa: SLF001


def _raise_replacement(exc: RuntimeError) -> None:
    """A signal handler raised while TF was building the cancelled op's error: pybind11
    reports that as a RuntimeError; raise what the handler raised instead (its type)."""
    found = _REPLACED.search(str(exc))
    kind = getattr(builtins, found.group(1), None) if found else None
    if isinstance(kind, type) and issubclass(kind, BaseException):
        raise kind() from None
