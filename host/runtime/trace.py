"""gpe's host events: what a profile shows on the host thread, and what `--report` adds up.

`gpe.profile(DIR)` (host/diagnostics/profile.py) records a TensorFlow profile; while it
runs, the hooks on gpe's call path emit TensorFlow's own host events (TraceMe, the event
`tf.profiler.experimental.Trace` makes) on the thread that does the work, named in the
user's terms:

- `gpe call f`: one call of a gpe function, with `kind` (sliced, eager, profile, build:
  a call that built a variant), `variant` (the sliced call's, numbered as the report
  numbers them) and, for an eager call, `why`;
- `gpe wait VALUE (f:LINE)`: the host waits for a value the graph computes (a Pending
  resolved: `.numpy()`, `float()`, printing, a host `if`; or values the host takes at
  once mid-call: a Python number, a list or dict of tensors), with `at`, the user's line
  that needed it;
- `gpe fence FILE:LINE`: eager code outside sliced calls touches TF state (a variable
  read or write, a `tf.function` given a variable) and first waits for the calls sent;
  `source` is that line;
- `gpe slice f`, `gpe trace f`, `gpe instantiate f`: a build's steps (slicing, tracing the
  TF part and loading the host program, starting the graph that runs it).

`gpe run --report` keeps a `Ledger` instead (or as well): each stretch of the main
thread's time is charged to the innermost of these that was open, so the parts add up to
the run's time (host/diagnostics/profile.py prints them).

`--report` also charges the host's sends (enqueues of calls and values, which wait while
the graph is 64 calls behind) to the function of the call making them.

Off (no profile, no report), a wait's and a fence's hook cost one attribute check
(`TRACER.on`); a call's, a value taken at once and a send, nothing (host/call/traced.py
swaps SlicedFunction.__call__, HostChannel.recv_now and Interruptible.enqueue).
"""
from __future__ import annotations

import linecache
import operator
import os
import re
import sys
import threading
import time
import weakref

import tensorflow as tf
from tensorflow.python.profiler.internal import _pywrap_traceme

_TraceMe = _pywrap_traceme.TraceMe
_get_ident = threading.get_ident
_now = time.perf_counter

# a SlicedFunction's counters that tell what kind of call one was (host/diagnostics/stats.py)
_COUNTS = operator.attrgetter("graph_calls", "profile_calls", "variants", "eager_calls",
                              "unpaid_calls", "timed_calls", "chosen_calls",
                              "refused_calls", "traced_calls")
_EAGER_WHY = ("before building it paid off", "timed against sliced calls",
              "faster eagerly (the adaptive choice)", "its signature was refused",
              "called while a graph was traced")
# a fence inside a call to a part of another sink than the last call's (more parts than
# one sink holds, GPE_SINK_GROUP: host/runtime/sinks.py)
SWITCH = "switching to another sink (its calls wait for the calls sent)"
_LABEL = re.compile(r"channel \d+ \((\w+) ?(.*)\) of (.+) at (.*):(\d+)$")


def _ours() -> tuple[str, ...]:
    """The folders whose frames are not the user's: gpe's and TensorFlow's (Keras's)."""
    host = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    root = os.path.dirname(host)
    folders = [host, os.path.join(root, "tfprog"), os.path.join(root, "slicer"),
               root if os.path.basename(root) == "gpe" else os.path.join(root, "gpe"),
               os.path.dirname(tf.__file__)]
    for name in ("keras", "tf_keras", "numpy"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            folders.append(os.path.dirname(module.__file__))
    return tuple(os.path.join(f, "") for f in folders)


class Tracer:
    """The hooks' switch and what they do when on. One per process: TRACER."""

    def __init__(self):
        self.on = False       # the one attribute the hooks check
        self.events = 0       # profiles recording now: emit TraceMe events
        self.ledger: Ledger | None = None  # the host-time accounting (--report)
        # a profile of a window of calls (profile.Window): told of each call's begin and
        # end on its thread; it starts and stops the profile's events
        self.window = None
        self._names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._channels: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._internal: dict[str, bool] = {}
        self._ours: tuple[str, ...] | None = None
        # called with `on` when it changes (host/call/traced.py: gpe functions' calls)
        self.switches: list = []

    # switching ----------------------------------------------------------------------
    def start_events(self) -> None:
        self.events += 1
        self._switched()

    def stop_events(self) -> None:
        self.events = max(0, self.events - 1)
        self._switched()

    def start_ledger(self) -> Ledger:
        self.ledger = Ledger()
        self._switched()
        return self.ledger

    def stop_ledger(self) -> None:
        if self.ledger is not None:
            self.ledger.close()
        self.ledger = None
        self._switched()

    def start_window(self, window) -> None:
        self.window = window
        self._switched()

    def stop_window(self, window) -> None:
        if self.window is window:
            self.window = None
        self._switched()

    def _switched(self) -> None:
        on = bool(self.events) or self.ledger is not None or self.window is not None
        if on != self.on:
            self.on = on
            for switch in self.switches:
                switch(on)

    def _ledger(self):
        ledger = self.ledger
        return ledger if ledger is not None and ledger.owner == _get_ident() else None

    # a call of a gpe function (SlicedFunction.__call__ while on: host/call/traced.py) --
    def call(self, fn, args, kwargs, again):
        """`fn(*args, **kwargs)` as SlicedFunction.__call__ runs it (counted, then its
        phases until one answers other than `again`), inside an event."""
        if fn.plain and fn.auto and not fn.stats_.fallbacks:  # plain Python (`gpe run`'s
            return _run(fn, args, kwargs, again)              # functions with no TF work)
        window = self.window
        if window is None or window.owner != _get_ident():
            return self._call(fn, args, kwargs, again)
        window.begun(fn)  # (may start the profile: before this call's event)
        try:
            if self.events or self.ledger is not None:
                return self._call(fn, args, kwargs, again)
            return _run(fn, args, kwargs, again)  # counted only: the window not open yet
        finally:
            window.ended()  # (may stop the profile: after this call's event)

    def _call(self, fn, args, kwargs, again):
        stats = fn.stats_
        before, fallbacks = _COUNTS(stats), dict(stats.fallbacks)
        ledger = self._ledger()
        event = _TraceMe(self._call_name(fn)) if self.events else None
        if ledger is not None:
            if ledger.first_call is not None and ledger.first_call():
                ledger.first_call = None
            ledger.push(fn.__qualname__)
        try:
            return _run(fn, args, kwargs, again)
        finally:
            kind, detail = _kind(fn, before, _COUNTS(stats), fallbacks, args, kwargs)
            if ledger is not None:
                ledger.pop((fn.__qualname__, "call", kind))
                if fn.__qualname__ not in ledger.functions:
                    ledger.functions[fn.__qualname__] = weakref.ref(fn)
            if event is not None:
                event.SetMetadata(kind=kind, **detail)
                event.Stop()

    def _call_name(self, fn) -> str:
        name = self._names.get(fn)
        if name is None:
            name = self._names[fn] = f"gpe call {fn.__qualname__}"
        return name

    # a build's steps ----------------------------------------------------------------
    def build(self, step: str, fn) -> "_Span":
        """Around a build's `step` (slice, trace, instantiate) of `fn`'s."""
        return _Span(self, f"gpe {step} {fn.__qualname__}", (fn.__qualname__, "build", step))

    def span(self, name: str, key) -> "_Span":
        return _Span(self, name, key)

    # waits --------------------------------------------------------------------------
    def wait(self, pending) -> None:
        """Resolve `pending` (Pending.resolve), as an event: which value, where needed."""
        channel = pending._channel
        self._wait(channel, channel.resolve, pending)

    def receive(self, channel, recv_now) -> list:
        """`recv_now(channel)`: values the host takes at once mid-call (a Python number
        the TF part computed, a list or dict of its tensors), as a wait event
        (HostChannel.recv_now while on: host/call/traced.py)."""
        return self._wait(channel, recv_now, channel)

    def _wait(self, channel, wait, argument):
        name, fn = self._channel(channel)
        at = self.user_line(3)
        ledger = self._ledger()
        event = _TraceMe(name) if self.events else None
        if ledger is not None:
            ledger.push(fn)
        try:
            return wait(argument)
        finally:
            if ledger is not None:
                ledger.pop((fn, "wait", name.removeprefix("gpe wait "), at))
            if event is not None:
                event.SetMetadata(at=at, value=_metadata(channel.label))
                event.Stop()

    def _channel(self, channel) -> tuple[str, str]:
        """(the event's name, the qualname of the function the value comes from)."""
        known = self._channels.get(channel)
        if known is None:
            m = _LABEL.match(channel.label)
            if m is None:
                known = (f"gpe wait {channel.label}", "?")
            else:
                kind, names, qualname, _, lineno = m.groups()
                what = names or ("the TF part's earlier work" if kind in ("barrier", "check")
                                 else kind)
                known = (f"gpe wait {what} ({qualname}:{lineno})", qualname)
            self._channels[channel] = known
        return known

    # sends --------------------------------------------------------------------------
    def send(self, enqueue, handle, components) -> None:
        """`enqueue(handle, components)`: the host sends a call or values to the graph
        (Interruptible.enqueue while on: host/call/traced.py), which waits while the
        graph is a queue's capacity (64 calls) behind. Inside a call, --report charges
        its time to the call's function as sending, not as the call's host code."""
        ledger = self._ledger()
        if ledger is None or not ledger.stack:
            return enqueue(handle, components)
        ledger.push()
        try:
            return enqueue(handle, components)
        finally:
            ledger.pop((ledger.enclosing(), "send", ""))

    # fences -------------------------------------------------------------------------
    def fence(self, session, target: int) -> None:
        """session.fence(target) for the eager code at the user's line (fence.py)."""
        path, lineno = self.user_frame(3)
        at = _short(path, lineno)
        self._fence(lambda: session.fence(target), at, lambda: {
            "source": _metadata(linecache.getline(path, lineno)), "calls": target})

    def switch(self, session) -> None:
        """session.fence() before a call to a part of another sink than the last call's
        (Session.start_call: the calls sent must finish first), as a fence of the calling
        function's, named for why."""
        self._fence(session.fence, SWITCH, dict)

    def _fence(self, wait, what: str, metadata) -> None:
        """`wait()`, as the event `gpe fence WHAT` (its `metadata()`) and --report's fence
        row `what` of the function of the innermost event open (None: the program's)."""
        ledger = self._ledger()
        event = _TraceMe(f"gpe fence {what}") if self.events else None
        if ledger is not None:
            within = ledger.enclosing()
            ledger.push()
        try:
            wait()
        finally:
            if ledger is not None:
                ledger.pop((within, "fence", what))
            if event is not None:
                event.SetMetadata(**metadata())
                event.Stop()

    # the user's line ----------------------------------------------------------------
    def user_line(self, depth: int) -> str:
        """`file:line` of the innermost frame outside gpe and TensorFlow (user_frame)."""
        return _short(*self.user_frame(depth + 1))

    def user_frame(self, depth: int) -> tuple[str, int]:
        """(file, line) of the innermost frame outside gpe and TensorFlow, from the
        caller `depth` frames up (('?', 0) when there is none)."""
        frame = sys._getframe(depth)
        internal = self._internal
        while frame is not None:
            filename = frame.f_code.co_filename
            mine = internal.get(filename)
            if mine is None:
                if self._ours is None:
                    self._ours = _ours()
                mine = internal[filename] = filename.startswith(self._ours) or \
                    filename.startswith("<frozen")
            if not mine:
                return filename, frame.f_lineno
            frame = frame.f_back
        return "?", 0


def _metadata(source: str) -> str:
    """A line of code as a TraceMe metadata value, which ends at a `#` or at a comma
    outside brackets and quotes: without its comment, in parentheses where a comma would
    end it."""
    depth, quote, top_comma = 0, None, False
    for i, c in enumerate(source):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#":
            source = source[:i]
            break
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth <= 0:
            top_comma = True
    source = source.strip().replace("#", "")
    return f"({source})" if top_comma else source


def _short(path: str, lineno: int) -> str:
    return f"{os.path.basename(path) if path[:1] != '<' else path}:{lineno}"


def _run(fn, args, kwargs, again):
    """SlicedFunction.__call__'s body (host/call/function.py)."""
    fn._count()
    result = fn._phases(args, kwargs)
    while result is again:
        result = fn._phases(args, kwargs)
    return result


def _kind(fn, before: tuple, after: tuple, fallbacks: dict, args, kwargs) -> tuple[str, dict]:
    """What kind of call the counters' change says it was: (kind, metadata)."""
    if after[2] != before[2]:
        return "build", {}
    if after[1] != before[1]:
        return "profile", {}
    if after[0] != before[0]:
        return "sliced", {"variant": _variant_number(fn, args, kwargs)}
    for i, why in enumerate(_EAGER_WHY, 4):
        if after[i] > before[i]:
            return "eager", {"why": why}
    reason = next((r for r, n in fn.stats_.fallbacks.items() if n > fallbacks.get(r, 0)),
                  None)
    if reason is None and fn.plain and fn.stats_.fallbacks:  # (made plain for that reason:
        reason = next(reversed(fn.stats_.fallbacks))          # the adaptive choice, ...)
    return "eager", {"why": reason or ("plain Python" if fn.plain else "run eagerly")}


def _variant_number(fn, args, kwargs) -> int:
    """The number of the variant a sliced call ran (1 where the function has one)."""
    built = fn.cache.built
    if len(built) == 1:
        return 1
    try:
        variant = built.get(fn.call_key(args, kwargs))
    except Exception:  # noqa: BLE001 (arguments the call changed: not told)
        return 0
    return next((i for i, v in enumerate(built.values(), 1) if v is variant), 0)


class _Span:
    """An event around a stretch of host work that is not a call (a build's step)."""

    __slots__ = ("tracer", "name", "key", "event", "ledger")

    def __init__(self, tracer: Tracer, name: str, key):
        self.tracer, self.name, self.key = tracer, name, key
        self.event = self.ledger = None

    def __enter__(self):
        tracer = self.tracer
        if tracer.on:
            self.ledger = tracer._ledger()
            if tracer.events:
                self.event = _TraceMe(self.name)
            if self.ledger is not None:
                self.ledger.push(self.key[0])
        return self

    def __exit__(self, *exc):
        if self.ledger is not None:
            self.ledger.pop(self.key)
        if self.event is not None:
            self.event.Stop()


class Ledger:
    """Where one thread's time went: each stretch between two events charged to the
    innermost event open then (its key), or to `outside` when none was; so the rows and
    `outside` add up to the time from start to close."""

    def __init__(self):
        self.owner = _get_ident()
        self.rows: dict = {}      # key -> [seconds, times]
        self.stack: list = []     # per open event: [its own seconds so far, its function]
        self.outside = 0.0
        self.started = self.last = _now()
        self.closed: float | None = None
        # called at a call of a gpe function until it returns True (profile.HostTime)
        self.first_call = None
        self.functions: dict = {}  # qualname -> the gpe function called (weakly)

    def push(self, function: str | None = None) -> None:
        """An event begins (of `function`'s: a call, a build step, a wait for its value)."""
        if self.closed is not None:
            return
        now = _now()
        if self.stack:
            self.stack[-1][0] += now - self.last
        else:
            self.outside += now - self.last
        self.stack.append([0.0, function])
        self.last = now

    def pop(self, key) -> None:
        """The innermost event ends: its own time is charged to `key`."""
        if self.closed is not None or not self.stack:
            return
        now = _now()
        seconds = self.stack.pop()[0] + now - self.last
        self.last = now
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = [0.0, 0]
        row[0] += seconds
        row[1] += 1

    def enclosing(self) -> str | None:
        """The function of the innermost open event that has one (None: the program's)."""
        return next((f for _, f in reversed(self.stack) if f is not None), None)

    def close(self) -> None:
        """Stop counting (events still open are charged to `outside`)."""
        if self.closed is not None:
            return
        now = _now()
        self.outside += sum(s for s, _ in self.stack) + now - self.last
        self.stack = []
        self.last = self.closed = now

    @property
    def total_s(self) -> float:
        return (self.closed if self.closed is not None else _now()) - self.started


TRACER = Tracer()
