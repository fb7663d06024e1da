"""The Session: one graph of TF parts and one sink thread, shared by the whole program.

Each sliced variant registers its TF part once; the session creates the part's channel
queues and (re)starts the sink of the part's group (host/runtime/sinks.py: parts are kept in groups
of a fixed size, each group with its own sink and thread, so adding a part costs the same
however many there are). A new sink first waits for its group's previous one to finish the
calls already sent to it, and a call to another group than the previous call's first waits
for every call sent to finish, so calls keep their order. When the
sink fails (an error inside a TF part) every queue is closed so that no host wait hangs;
the host raises the error and the next call starts a fresh generation.

A call is one enqueue: its part's number (RUN) and its entry values together, into the
part's dispatch queue, where the sink waits after the call before it to the same part
(tfprog/sink.py; `start_call`).
"""
from __future__ import annotations

import atexit
import gc
import os
import logging
import threading
import time
import weakref
from dataclasses import dataclass, field

import tensorflow as tf
from tensorflow.python.ops import gen_data_flow_ops

from . import fence, graph_error, opcount, pending
from .sinks import Group, Instantiator, dispatch_queue, group_for_new_part
from .channel import HostChannel
from .interrupt import Interruptible
from .spin import Spin
from .trace import TRACER
from .watchdog import Waiting, Watchdog
from ...tfprog import asserts
from ...tfprog.channels import HOST_TO_TF_CAPACITY, make_queue
from ...tfprog.exact import use_exact_arithmetic_on_this_thread
from ...tfprog.part import Part
from ...tfprog.sink import RUN, STOP, build_sink

log = logging.getLogger("gpe")

CLOSE_TIMEOUT_S = 5.0
_INDEX_TENSORS: dict[int, tf.Tensor] = {}
ACK_BACKLOG = 4096  # acknowledgements left unread before the host reads half of them
_sink_thread = threading.local()


@dataclass
class Registration:
    index: int                     # the part's number in the sink
    channels: list[HostChannel]    # by channel index
    generation: int
    handles: list = field(default_factory=list)  # the queues the sink passes the part
    dispatch: tf.queue.FIFOQueue | None = None  # its calls' one enqueue (tfprog/sink.py)
    dispatch_ref: tf.Tensor | None = None  # (its handle)
    relay: tf.queue.FIFOQueue | None = None  # where the sink puts a call's entry values
    filler: list = field(default_factory=list)  # what follows a switch or STOP word there


class Session:
    def __init__(self, wait_timeout: float | None = None):
        self._lock = threading.RLock()
        self.nested_start = None  # see CallContext.nested: set while a nested call begins
        self.run_word = _index(RUN)  # a call's word (Session.start_call)
        self.ack_spin = Spin()  # a fence polls for the acknowledgement before it sleeps
        self._new_generation()
        self.generation = 0
        self.wait_timeout = wait_timeout or float(os.environ.get("GPE_WAIT_TIMEOUT", "600"))
        self.host_wait_s = 0.0  # time the host spent blocked on the graph
        self.fenced_s = 0.0  # ...of it, eager code outside sliced calls (fence.py)
        self.timer: tf.Variable | None = None  # graph busy seconds and calls, when measuring
        self._call_guard = threading.Lock()
        self._ack_lock = threading.Lock()  # one reader of the acknowledgements at a time
        self._call_owner: int | None = None
        self.forked = False  # in a forked child: no sliced calls (see after_fork_in_child)
        self.blocking = Interruptible()  # the main thread's steps and waits (Ctrl-C)
        self.watchdog = Watchdog(self)
        self.instantiator = Instantiator()
        if self.watchdog.listens_for_signals:
            self.blocking.install_handler()
        fence.install(self)
        pending.install()  # TF entry points that check the exact class resolve Pendings

    # one sliced call at a time ---------------------------------------------------------
    def enter_call(self) -> bool:
        """Claim the session for one sliced call; False while another call holds it (from
        another thread, or an outer sliced call on this one): that call then runs eagerly,
        so the channels of two calls never interleave.
        A Ctrl-C while the session is claimed is raised at the call's first step (inside
        the `try` that ends with exit_call) or at exit_call, never in between."""
        blocking, me = self.blocking, threading.get_ident()
        main = me == blocking.main  # an atomic step (blocking.hold and unhold, inline)
        blocking.depth += main
        try:
            with self._call_guard:
                if self._call_owner is not None or self.forked:
                    claimed = False
                else:
                    self._call_owner = me
                    self._sent_before_call = self.sent
                    claimed = True
        finally:
            blocking.depth -= main
        if not claimed:
            self.blocking.deliver_pending()
        return claimed

    def exit_call(self) -> None:
        self._call_owner = None
        if self.blocking.pending is not None:  # a Ctrl-C deferred during the call
            self.blocking.deliver_pending()

    def waiting(self, label: str) -> Waiting:
        """Around a host operation that may block on the graph (see host.watchdog)."""
        return Waiting(self, label)

    def measure_graph_time(self) -> tf.Variable:
        """From now on the sink times each part it runs (see tfprog.sink); returns the
        float64 [2] variable holding busy seconds and calls. The sinks are restarted
        between calls: a call of another thread is let finish sending first (a switch
        and a stop sent at once would leave the sink waiting where no call comes)."""
        claim = self._call_owner != threading.get_ident()
        while claim and not self.forked and not self.enter_call():
            time.sleep(0.001)
        try:
            with self._lock:
                if self.timer is None:
                    self.timer = tf.Variable(tf.zeros([2], tf.float64), trainable=False)
                    for group in self.groups:
                        self._restart(group)
                return self.timer
        finally:
            if claim and not self.forked:
                self.exit_call()

    def _new_generation(self, forked: bool = False) -> None:
        # the sinks' acknowledgements; none in a forked child (no TF op in the at-fork hook)
        self.done = None if forked else tf.queue.FIFOQueue(-1, [tf.int32], shapes=[[]])
        self.sent = self.acknowledged = 0
        # the last sink started (perf_counter), and until when it may have been starting:
        # until the host read the acknowledgement of the first call sent after it (its
        # instantiation done); +inf while not yet (sink_started_since)
        self.sink_started = self.sink_ready = float("-inf")
        self._ready_after = 0
        self.groups: list[Group] = []  # the parts, in groups of one sink each (host/runtime/sinks.py)
        self.routes: dict[int, tuple] = {}  # part number -> (its Group, its slot there)
        self.last_group = 0  # the group of the last call sent
        self._sent_before_call = 0  # calls sent before the running one (see fence_target)
        self.failure: BaseException | None = None
        self.failed = False

    @property
    def parts(self) -> list[tuple[Part, Registration, weakref.ref]]:
        """Every part the sinks were built with, group by group."""
        return [entry for group in self.groups for entry in group.parts]

    # registration ---------------------------------------------------------------------
    def register(self, part: Part, owner) -> Registration:
        """Add `part` to the sink. The session holds `owner` weakly: once it is gone, the
        part (and the variables its function captured) leave the next sink."""
        with self._lock:
            self._recover()
            channels = []
            for channel in part.plan.channels:
                dtypes = part.dtypes(channel.index)
                queue = make_queue(dtypes, channel.to_tf)
                label = (f"channel {channel.index} ({channel.kind.name.lower()} "
                         f"{part.plan.user_terms(', '.join(channel.names))}) of "
                         f"{part.plan.qualname} at "
                         f"{part.plan.filename}:{channel.lineno}")
                channels.append(HostChannel(queue, dtypes, part.specs[channel.index], label, self,
                                            part.layouts.get(channel.index)))
            # a part that runs other functions' TF parts (nested calls) gets their queues too
            # (theirs first, then those of their own nested calls: Part.queue_count)
            extra = [h for callee in getattr(owner, "nested", ()) if callee is not None
                     for h in callee.registration().handles]
            dispatch, relay, filler = dispatch_queue(part.dispatch[1])
            registration = Registration(-1, channels, self.generation,
                                        [c.handle for c in channels] + extra, dispatch,
                                        dispatch.queue_ref, relay, filler)
            group = group_for_new_part(self.groups, self.last_group)
            group.parts.append((part, registration, weakref.ref(owner)))
            self._restart(group)
            log.debug("registered %s as part %d", part.function_name, registration.index)
            return registration

    def _restart(self, group: Group) -> None:
        """Start a new sink for `group` (its parts whose owner is gone are left out)."""
        # A sink calls every part it was built with: the variables they captured and their
        # channels' queues must live as long as it runs (its thread holds them), even if
        # their owners are gone (a call sent before the owner was dropped still runs there;
        # its queues destroyed under it failed the sink with NotFoundError)
        pins = [v for part, _, _ in group.parts for v in part.function.variables]
        pins += [(reg.channels, reg.dispatch, reg.relay) for _, reg, _ in group.parts]
        group.renumber()
        for slot, (_, reg, _) in enumerate(group.parts):
            self.routes[reg.index] = (group, _index(slot))
        previous = group.thread
        if not group.parts:  # every owner is gone: the old sink ends after its calls
            if previous is not None and not group.stopped:
                self._stop(group)
                group.stopped = True  # (the next sink still waits for it to end)
            return
        with opcount.plumbing():  # its eager Pack of the handles is not the user's work
            sink = build_sink(group.control, [(part.function, [q.queue_ref for q in (
                reg.dispatch, reg.relay) if q] + reg.handles, part.dispatch)
                for part, reg, _ in group.parts], self.timer, self.done)
        if previous is not None and not group.stopped:
            self._stop(group)
        group.stopped = False
        self.sink_started, self.sink_ready = time.perf_counter(), float("inf")
        self._ready_after = self.sent + 1
        prepared = self.instantiator.prepare(sink)
        group.thread = threading.Thread(target=self._run,
                                        args=(sink, previous, prepared, pins, self.generation),
                                        name=f"gpe-sink-{group.number}", daemon=True)
        group.thread.start()

    def sink_started_since(self, since: float) -> bool:
        """A sink was starting at or after perf_counter time `since` (TensorFlow
        instantiating it on its thread competes for the CPU; a call waits for it)."""
        return self.sink_started >= since or self.sink_ready > since

    def _run(self, sink, previous: threading.Thread | None, prepared: threading.Event | None,
             pins: list, generation: int) -> None:
        _sink_thread.inside = True  # it runs the calls: it never waits for them
        try:  # (everything inside: a failure here must fail the calls, not hang them)
            use_exact_arithmetic_on_this_thread()
            if prepared is not None:  # instantiated on the session's instantiating thread
                prepared.wait()
            if previous is not None:
                previous.join()
            if not self.failed:
                sink()
        except Exception as exc:  # an error inside a TF part: wake every waiting host op
            with self._lock:
                if generation == self.generation:
                    self._fail(exc)
                else:  # a sink of a generation that failed already (its queues are gone)
                    log.debug("a sink of generation %d ended: %s", generation, exc)
        finally:  # (a thread that ran a sink may do other work after: it fences again)
            _sink_thread.inside = False

    # calls --------------------------------------------------------------------------
    def start_call(self, reg: Registration, components=()) -> None:
        """Send a call of `reg`'s part with its entry `components`: one enqueue, RUN and
        the values, into the part's dispatch queue, where its group's sink waits after a
        call to the same part; a call to another part first tells the sink to go on to
        it (a switch word in the last part's queue). Inside the call's atomic step."""
        group, slot = self.routes[reg.index]
        if group.number != self.last_group:
            # another sink than the last call's: it may run only once the calls sent to
            # the others have finished (calls keep their order; see host/runtime/sinks.py)
            if self.sent > self.acknowledged:  # (profiled or reported: an event)
                TRACER.switch(self) if TRACER.on else self.fence()
            self.last_group = group.number
        if group.current is not reg:
            self._word(group, slot)
            group.current = reg
        self.blocking.enqueue(reg.dispatch_ref, [self.run_word, *components])
        self.sent += 1
        if self.sent - self.acknowledged > ACK_BACKLOG:  # keep the acknowledgements short
            self._acknowledge_until(self.acknowledged + ACK_BACKLOG // 2)

    def fence_target(self) -> int:
        """How many calls eager variable access on this thread waits for (host/runtime/fence.py).

        Outside any call: every call sent. The thread of the running call (its host part)
        and the sink's thread: none (inside a call the slicer's barriers order variable
        access; the sink runs the calls). Any other thread while a call runs: only the
        calls sent before it. Such a thread may work for the running call (a replica
        thread of its `strategy.run`, a thread of the pool `merge_call`'s all-reduce runs
        in, reading `var.handle`) while the call's host part waits for it: waiting for the
        running call there would never end."""
        if getattr(_sink_thread, "inside", False):
            return 0
        owner = self._call_owner
        if owner is None:
            return self.sent
        return 0 if owner == threading.get_ident() else self._sent_before_call

    def fence_waited(self) -> float:
        """Seconds eager code outside sliced calls has waited on fences (fence.py)."""
        return self.fenced_s

    def fence(self, target: int | None = None) -> None:
        """Wait until the graph has finished every call sent so far (the first `target`)."""
        self._acknowledge_until(self.sent if target is None else target)

    def _acknowledge_until(self, target: int) -> None:
        """Read acknowledgements until `target` calls are acknowledged. One reader at a
        time: two threads fencing at once must not each read the same missing ones (the
        second would wait for acknowledgements that never come)."""
        with self._ack_lock:
            self._acknowledge(min(target, self.sent) - self.acknowledged)

    def _acknowledge(self, count: int) -> None:
        """Read `count` acknowledgements: those there already at once, then one at a time
        as the sink sends them (an interrupted wait then loses none: a cancelled
        DequeueMany would drop what it had taken)."""
        while count > 0 and not self.failed:
            with self.blocking:
                count -= self._acknowledge_some(count)

    def _acknowledge_some(self, count: int) -> int:
        """Read up to `count` acknowledgements (at least one), inside an atomic step."""
        try:
            with self.waiting("the sink's acknowledgements"):
                ready = min(int(gen_data_flow_ops.queue_size_v2(self.done.queue_ref)), count)
                if ready:
                    gen_data_flow_ops.queue_dequeue_many_v2(self.done.queue_ref,
                                                            tf.constant(ready), [tf.int32])
                else:
                    ready = 1
                    self.ack_spin.until_ready(self.done.queue_ref)  # (host/runtime/spin.py)
                    self.blocking.dequeue(self.done.queue_ref, [tf.int32])
        except (tf.errors.CancelledError, tf.errors.OutOfRangeError, RuntimeError) as exc:
            if graph_error.host_left_replicated_call(self.failure):
                return count  # the program raised its own error there; the next call
            self.raise_failure("the sink's acknowledgements", exc)  # starts afresh
        self.acknowledged += ready
        if self.acknowledged >= self._ready_after and self.sink_ready == float("inf"):
            self.sink_ready = time.perf_counter()
        return ready

    def _word(self, group: Group, word: tf.Tensor) -> None:
        """Tell `group`'s sink which part to go on to (or STOP): in the dispatch queue of
        the part it waits on (it acknowledges the word: counted as sent), or, a new sink,
        in its control queue."""
        current = group.current
        if current is None:
            self.blocking.enqueue(group.control.queue_ref, [word])
        else:
            self.blocking.enqueue(current.dispatch_ref, [word, *current.filler])
            self.sent += 1

    def _stop(self, group: Group) -> None:
        """End `group`'s sink after its calls (a new sink reads `control` first)."""
        self._word(group, _index(STOP))
        group.current = None

    # failure and shutdown ------------------------------------------------------------
    def fail(self, exc: BaseException) -> None:
        """Stop the session with `exc`: every waiting host operation wakes and raises it."""
        self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        with self._lock:
            if self.failed:  # the first failure is the one raised (the queues it closed
                log.debug("after the failure: %s", exc)  # make the sink fail in turn)
                return
            self.failure, self.failed = exc, True
            log.debug("sink failed: %s", exc)
            self._close_queues()

    def _close_queues(self) -> None:
        for _, reg, _ in self.parts:
            for channel in reg.channels:
                channel.close()
        for queue in [reg.dispatch for _, reg, _ in self.parts] + [
                group.control for group in self.groups] + [self.done] * bool(self.done):
            try:
                queue.close(cancel_pending_enqueues=True)
            except tf.errors.OpError:
                pass

    def take_failure(self) -> BaseException | None:
        """The error that stopped the sink, if any (each error is handed out once)."""
        with self._lock:
            failure, self.failure = self.failure, None
            return failure

    def raise_failure(self, label: str, cause: BaseException | None = None):
        """Raise the error that stopped the sink, as the exception type eager raises, with
        the op's own message; a note names the user's function, file and line."""
        failure = self.take_failure()
        if failure is None:
            raise RuntimeError(f"gpe: {label} was closed (the session shut down)") from cause
        if isinstance(failure, tf.errors.OpError):
            text, where = graph_error.describe(failure.message, self.parts)
            error = type(failure)(failure.node_def, failure.op, text)
            if isinstance(failure, tf.errors.InvalidArgumentError):  # an assert: eager's
                error = asserts.eager_error(part.uid for part, _, _ in self.parts) or error
            if where:
                error.add_note(where) if hasattr(error, "add_note") else None
            raise error from None
        raise failure

    def _recover(self) -> None:
        if self.failed:
            self.generation += 1
            self._new_generation()

    def ensure_healthy(self) -> None:
        with self._lock:
            if self.failed:
                self.take_failure()
                self._recover()

    def after_fork_in_child(self) -> None:
        """In a forked child: fresh locks, and no TF op, none made or freed (a TF lock
        another thread held at the fork is held there for ever)."""
        self._lock = threading.RLock()
        self._call_guard, self._ack_lock = threading.Lock(), threading.Lock()
        self._call_owner = None
        self.nested_start = None
        self.generation += 1
        self._orphans = (self.groups, self.done)  # (freed, their queues would run TF ops)
        self._new_generation(forked=True)
        self.forked = True  # TF's own thread pools did not survive either: calls run eagerly
        self.blocking.after_fork_in_child()
        self.watchdog.restart_in_child()

    def before_fork(self) -> None:
        """Before a fork: let the graph finish the calls sent, so that the child (which
        runs calls eagerly) sees their effects, as it would under eager."""
        if self._call_owner is None and not self.failed and self.groups:
            self.fence()

    def close(self) -> None:
        """Stop the sink after the calls already sent (bounded wait, then cancel). A failed
        sink may still be finishing an op: it is waited for too, so that no TF thread is
        running when the interpreter tears down."""
        self.watchdog.stop()
        self.blocking.uninstall_handler()
        with self._lock:
            threads = [g.thread for g in self.groups if g.thread is not None]
            if not threads:
                return
            if not self.failed:
                for group in self.groups:
                    current = group.current  # (a full dispatch queue: its sink is stuck,
                    try:                     # and the stop would wait for it: cancelled)
                        if current is None or int(gen_data_flow_ops.queue_size_v2(
                                current.dispatch_ref)) < HOST_TO_TF_CAPACITY:
                            self._stop(group)
                    except tf.errors.OpError:
                        pass
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if any(thread.is_alive() for thread in threads):
            self._close_queues()
            for thread in threads:
                thread.join(CLOSE_TIMEOUT_S)
        for group in self.groups:
            group.thread = None


def _index(index: int) -> tf.Tensor:
    """The int32 tensor of a part number (made once each)."""
    tensor = _INDEX_TENSORS.get(index)
    if tensor is None:
        tensor = _INDEX_TENSORS.setdefault(index, tf.constant(index, tf.int32))
    return tensor


_session: Session | None = None
_session_lock = threading.Lock()


def _freeze_gc() -> None:
    """Move every object alive now (TensorFlow's modules above all) out of the collector's
    reach: a full collection then costs milliseconds instead of ~100 ms, which otherwise
    stalls the host for many pipelined calls. Only the young generations are collected
    first: a full collection here is itself such a stall (~140 ms on the 2-core machine,
    the largest part of gpe.load's way to its first call), and after importing
    TensorFlow it found nothing to free. GPE_GC_FREEZE=0 turns this off."""
    if os.environ.get("GPE_GC_FREEZE", "1") != "0":
        gc.collect(1)
        gc.freeze()


def get_session() -> Session:
    global _session
    if _session is None:
        with _session_lock:
            if _session is None:
                _freeze_gc()
                _session = Session()
                atexit.register(_session.close)
    return _session


def _after_fork_in_child() -> None:
    global _session_lock
    _session_lock = threading.Lock()
    if _session is not None:
        _session.after_fork_in_child()


def _before_fork() -> None:
    if _session is not None:
        _session.before_fork()


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
