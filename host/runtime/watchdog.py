"""The watchdog: no host wait on the graph can block forever.

Host operations that can block (a dequeue, an enqueue into a full queue) run inside
`session.waiting(label)`. A daemon thread checks them: one that has waited longer than the
session's wait timeout fails the session with `GpeTimeoutError` naming the channel and its
function, which closes every queue and so wakes the wait. It also listens on the signal
wakeup fd: a signal cancels the main thread's wait (host/runtime/interrupt.py), so Ctrl-C during a
wait raises KeyboardInterrupt at once and leaves the session and the calls sent as they were.
"""
from __future__ import annotations

import os
import select
import signal
import threading
import time


class GpeTimeoutError(TimeoutError):
    """A host wait on the TF part took longer than the session's wait timeout."""


class Watchdog:
    TICK_S = 0.2

    def __init__(self, session):
        self.session = session
        self.waits: dict[int, tuple[float, str]] = {}  # thread id -> (since, label)
        self._stop = threading.Event()
        self._signal_fd = self._install_signal_fd()
        self.thread = threading.Thread(target=self._run, name="gpe-watchdog", daemon=True)
        self.thread.start()

    @property
    def listens_for_signals(self) -> bool:
        return self._signal_fd is not None

    def _install_signal_fd(self) -> int | None:
        if threading.current_thread() is not threading.main_thread():
            return None
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        try:
            previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        except ValueError:
            previous = None
        if previous not in (None, -1):  # someone else (asyncio) listens: leave them be
            signal.set_wakeup_fd(previous)
            os.close(read_fd)
            os.close(write_fd)
            return None
        return read_fd if previous is not None else None

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._signal_fd is not None:
                ready, _, _ = select.select([self._signal_fd], [], [], self._tick())
                if ready:
                    os.read(self._signal_fd, 64)
                    self.session.blocking.interrupt()
                    continue
            else:
                time.sleep(self._tick())
            self._check_timeouts()

    def _tick(self) -> float:
        return min(self.TICK_S, self.session.wait_timeout / 4)

    def _check_timeouts(self) -> None:
        limit = self.session.wait_timeout
        now = time.monotonic()
        for since, label in list(self.waits.values()):
            if now - since > limit:
                self.session.fail(GpeTimeoutError(
                    f"gpe: waited more than {limit:g} s on {label}; the session was reset "
                    f"(set GPE_WAIT_TIMEOUT to change the limit)"))
                return

    def restart_in_child(self) -> None:
        """In a forked child (its thread did not survive the fork): watch again."""
        self.waits = {}
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="gpe-watchdog", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()


class Waiting:
    """A host wait the watchdog can see; adds the time waited to session.host_wait_s (a class,
    not a generator context manager: this is on every call's path)."""

    __slots__ = ("session", "label", "start", "me")

    def __init__(self, session, label: str):
        self.session, self.label = session, label

    def __enter__(self):
        self.me, self.start = threading.get_ident(), time.monotonic()
        self.session.watchdog.waits[self.me] = (self.start, self.label)

    def __exit__(self, *exc):
        self.session.watchdog.waits.pop(self.me, None)
        self.session.host_wait_s += time.monotonic() - self.start
