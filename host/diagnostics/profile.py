"""See where the time goes: `gpe.profile(DIR)` and `gpe run --profile DIR / --report`.

`with gpe.profile(DIR):` records a TensorFlow profile of the block with TensorFlow's own
profiler (`tf.profiler.experimental.start/stop`): TensorFlow's op events as it records
them (the sink's ops on TensorFlow's threads, each named `gpe<k>_L<line>/...` after the
user's line; eager ops on the thread that runs them) and gpe's host events
(host/runtime/trace.py: calls, waits, fences, builds), written as TensorFlow writes any
profile, `DIR/plugins/profile/<run>/<host>.xplane.pb`. TensorBoard's profile plugin
shows it (`pip install 'gpe[profile]'`, then `tensorboard --logdir DIR`); `events(path)`
reads it back with the XPlane protobuf TensorFlow ships.

`HostTime` is `gpe run --report`'s account of the host thread's time (trace.Ledger) and,
from the first call after gpe built a function on, `gpe.timing()`'s overlap figure;
`format_host_time` prints it per function.
"""
from __future__ import annotations

import glob
import os
import threading
import warnings
from dataclasses import dataclass

import tensorflow as tf
from tensorflow.python.profiler import profiler_v2 as _profiler_v2

from ..runtime import session as _session
from ..runtime.trace import SWITCH, TRACER, Ledger
from .stats import GpeWarning
from .timing import Timing, timing

PLUGIN = os.path.join("plugins", "profile")


ALL = "all"
CALLS = 20  # the calls a profile records by default (a window: docs/profiling.md)


class profile:
    """`with gpe.profile(DIR) as p:` records a TensorBoard profile in DIR of a window of
    the block's calls of gpe functions: TensorFlow's op events and gpe's host events (its
    calls, the host's waits on values, fences, builds), on one timeline. After the block,
    `p.path` is the profile written (`DIR/plugins/profile/<run>/<host>.xplane.pb`), or
    None where no window opened. View it with TensorBoard's profile plugin: `pip install
    'gpe[profile]'`, `tensorboard --logdir DIR`, Profile tab, trace viewer.

    `calls` (default 20): how many calls the window records, from the start of its first
    (a call made inside another's counts too); `"all"`: every call, until the block ends.
    `skip`: the calls before the window opens; by default (None) it opens at the first
    call of a function that has run sliced and made its adaptive choice (profiled, built,
    its graph started, timed against eager: the steady state), and with `calls="all"` at
    the block's start (builds included). Where no window opened, it warns why. A
    profile costs per call recorded, about as much again as a small step's call: outside
    the window the calls run as fast as without a profile, and the window's profile is
    written while the program goes on (joined at the block's end; docs/profiling.md).

    At the end of the window the host waits for the graph to finish the calls sent (an
    event of its own), so their ops are in the profile. One TensorFlow profile records at
    a time: starting one while another runs raises TensorFlow's error."""

    def __init__(self, logdir: str, calls: int | str = CALLS, skip: int | None = None,
                 warn: bool = True):
        if calls != ALL and (not isinstance(calls, int) or isinstance(calls, bool)
                             or calls < 1) or skip is not None and skip < 0:
            raise ValueError(f"a profile's window needs calls >= 1 (or {ALL!r}) and skip "
                             f">= 0, got calls={calls!r}, skip={skip!r}")
        self.logdir = os.fspath(logdir)
        # (TensorFlow's options are its defaults: host_tracer_level 2 records the graph's
        # ops, 1 would not; TensorFlow 2.21's Python API reads the levels as booleans and
        # keeps its defaults whatever is given: docs/profiling.md)
        self.calls = None if calls == ALL else calls  # None: until the block ends
        self.skip = skip
        self.path: str | None = None
        self.recorded: int | None = None  # the window's calls (None: the whole block)
        self.first: int | None = None  # the number of the window's first call
        self.warn = warn  # warn at the block's end where no window opened (why: `missed`)
        self.sliced_seen = False  # a call of a function that had run sliced was made
        self._before: set[str] = set()
        self._window: Window | None = None
        self._recording = False

    @property
    def whole(self) -> bool:
        """Records the whole block, from its start."""
        return self.calls is None and not self.skip

    def __enter__(self) -> "profile":
        self._before = set(_written(self.logdir))
        self.recorded = self.first = None
        self.sliced_seen = False
        if self.whole:
            self._start()
        else:
            if _profiler_v2._profiler is not None:  # (TensorFlow's own check, at the start)
                raise tf.errors.AlreadyExistsError(None, None, "Another profiler is running.")
            self.recorded = 0
            self._window = Window(self)
            TRACER.start_window(self._window)
        return self

    def _start(self) -> None:
        tf.profiler.experimental.start(self.logdir)
        self._recording = True
        TRACER.start_events()

    def _end(self, why: str) -> None:
        """The host waits for the graph to finish the calls sent; events stop."""
        try:
            current = _session._session  # (none made for it: no sliced call, no wait)
            if current is not None and current.sent > current.acknowledged \
                    and not current.failed and current.fence_target():
                with TRACER.span(f"gpe end of the {why}: the graph finishes the calls "
                                 "sent", (None, "fence", f"the end of the {why}")):
                    current.fence()
        finally:
            TRACER.stop_events()

    def __exit__(self, *exc) -> None:
        window, self._window = self._window, None
        try:
            if window is not None:
                TRACER.stop_window(window)
                window.finish()  # (closes it if it is open; joins its writer)
            elif self._recording:
                try:
                    self._end("profile")
                finally:
                    self._recording = False
                    tf.profiler.experimental.stop()
        finally:
            new = [p for p in _written(self.logdir) if p not in self._before]
            self.path = max(new, key=os.path.getmtime) if new else None
        if self.warn and exc[0] is None and self.missed():
            warnings.warn(f"gpe.profile wrote no profile to {self.logdir}: {self.missed()}",
                          GpeWarning, stacklevel=2)

    def missed(self) -> str | None:
        """Why no window opened in the block (None: one did, or the whole block was
        recorded)."""
        if self.recorded is None or self.first is not None:
            return None
        if self.skip is not None:
            return f"the block made {self.skip} calls of gpe functions or fewer"
        if self.sliced_seen:
            return ("its window opens once a function that has run sliced has its adaptive "
                    "choice made (sliced calls timed against eager ones), and the block "
                    "ended first; skip=0 records from the first call")
        return ("no call of a gpe function ran sliced, so its window (from the first call "
                "of a function that has run sliced) never opened; skip=0 records from the "
                "first call")

    def describe(self) -> str:
        """What the profile recorded, in words (for `gpe run`'s message)."""
        if self.recorded is None:
            return "of every call"
        opened = "the steady state: the first of a function that has run sliced, its " \
            "adaptive choice made" if self.skip is None else f"after {self.skip}"
        if self.calls is None:
            return f"of the calls from call {self.first} of gpe functions to the end ({opened})"
        return (f"of a window of {self.recorded} calls from call {self.first} of gpe "
                f"functions ({opened})")


class Window:
    """A profile of a window of the block's calls (profile(calls=N, skip=K)): told of
    each call's begin and end on the thread that entered the block (trace.Tracer.call),
    it starts TensorFlow's profiler and gpe's events at the begin of the (K+1)-th call
    (K None: of the first call of a function that has run sliced and made its adaptive
    choice) and, when N calls have
    ended since (N None: at the block's end), waits for the graph to finish the calls
    sent, stops gpe's events and has TensorFlow's profiler stopped and written by a
    thread of its own (it releases the GIL while it collects and writes: the host goes
    on)."""

    def __init__(self, owner: profile):
        self.profile = owner
        self.owner = threading.get_ident()
        self.begins = self.ends = 0
        self.open = self.closed = False
        self.writer: threading.Thread | None = None
        self.error: BaseException | None = None

    def begun(self, fn) -> None:
        self.begins += 1
        if self.open or self.closed:
            return
        skip = self.profile.skip
        if _steady(self.profile, fn) if skip is None else self.begins > skip:
            try:
                self.profile._start()
            except Exception as exc:  # noqa: BLE001 (another profile started since: told
                self.error, self.closed = exc, True  # at the block's end, not in a call)
                TRACER.stop_window(self)
            else:
                self.open = True
                self.profile.first = self.begins

    def ended(self) -> None:
        if self.open:
            self.ends += 1
            self.profile.recorded = self.ends
            if self.profile.calls is not None and self.ends >= self.profile.calls:
                self.close(background=True)

    def close(self, background: bool) -> None:
        self.open, self.closed = False, True
        self.profile.recorded = self.ends
        try:
            self.profile._end("profile's window")
        finally:
            TRACER.stop_window(self)  # (the hooks go off where nothing else records)
            if background:
                self._write_in_background()
            else:
                self._write()

    def _write(self) -> None:
        try:
            tf.profiler.experimental.stop()
        except BaseException as exc:  # noqa: BLE001 (raised by finish, on the host)
            self.error = exc

    def _write_in_background(self) -> None:
        started = threading.Event()

        def write():
            started.set()  # the host waits for this: the profiler stops right after
            self._write()
        self.writer = threading.Thread(target=write, name="gpe profile writer", daemon=True)
        self.writer.start()
        started.wait()

    def finish(self) -> None:
        """At the block's end: close the window if it is open, wait for its profile to be
        written."""
        if self.open:
            self.close(background=False)
        if self.writer is not None:
            self.writer.join()
        if self.error is not None:
            raise self.error


def _steady(owner: profile, fn) -> bool:
    """`fn` has run sliced and runs as it will from now on: the adaptive choice of each of
    its variants is made (host/speculation/adaptive.py; at once where it is off), so a
    profile's cost does not weigh in it."""
    if not fn.stats_.graph_calls:
        return False
    owner.sliced_seen = True
    return all(getattr(getattr(v, "timer", None), "settled", True)
               for v in fn.cache.built.values())


def _written(logdir: str) -> list[str]:
    return glob.glob(os.path.join(logdir, PLUGIN, "*", "*.xplane.pb"))


# reading a profile back -----------------------------------------------------------------
@dataclass(frozen=True)
class Event:
    """One event of a profile: its thread (line) and times in picoseconds since the
    epoch, its name and stats."""

    plane: str
    line: str
    line_id: int
    name: str
    start_ps: int
    duration_ps: int
    stats: dict

    @property
    def end_ps(self) -> int:
        return self.start_ps + self.duration_ps


def events(path: str, plane: str = "/host:CPU") -> list[Event]:
    """The events of the XSpace file `path` (a profile's .xplane.pb) on `plane`, in time
    order, read with the XPlane protobuf that TensorFlow ships."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    found = []
    for p in space.planes:
        if p.name != plane:
            continue
        names = {i: m.name for i, m in p.event_metadata.items()}
        stat_names = {i: m.name for i, m in p.stat_metadata.items()}
        for line in p.lines:
            base = line.timestamp_ns * 1000
            for e in line.events:
                stats = {stat_names.get(s.metadata_id, "?"): _stat_value(s, stat_names)
                         for s in e.stats}
                found.append(Event(p.name, line.display_name or line.name, line.id,
                                   names.get(e.metadata_id, "?"), base + e.offset_ps,
                                   e.duration_ps, stats))
    return sorted(found, key=lambda e: (e.start_ps, -e.duration_ps))


def _stat_value(stat, stat_names: dict):
    kind = stat.WhichOneof("value")
    if kind == "ref_value":  # a string kept once in the plane's stat metadata
        return stat_names.get(stat.ref_value, "")
    return getattr(stat, kind) if kind else None


# the host's time, for `gpe run --report` ---------------------------------------------------
class HostTime:
    """Accounts the calling thread's time between `start` and `stop` (trace.Ledger) and,
    from the first call of a gpe function on, times the overlap as `gpe.timing()` does."""

    def __init__(self, overlap: bool = True):
        self.ledger: Ledger | None = None
        self.timing: timing | None = None
        self.overlap: Timing | None = None
        self._overlap = overlap  # time the overlap (the sinks' timing stays on after)

    def start(self) -> "HostTime":
        self.ledger = TRACER.start_ledger()
        if self._overlap:
            self.ledger.first_call = self._first_call
        return self

    def _first_call(self) -> bool:
        """At a gpe function's call, once gpe has a session (a variant was built: so
        TensorFlow was started by gpe's work, not by this, which would come before a
        program's own set-up such as configuring collective ops), outside any graph and
        strategy: start timing the overlap. False to be asked again at the next call."""
        if _session._session is None or not tf.executing_eagerly() or \
                tf.distribute.has_strategy():
            return False
        self.timing = timing()
        self.overlap = self.timing.__enter__()
        return True

    def stop(self) -> None:
        TRACER.stop_ledger()
        if self.timing is not None:
            try:
                self.timing.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 (the session failed: no overlap to tell)
                self.overlap = None

    def __enter__(self) -> "HostTime":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def parts(self) -> dict:
        """{(function or None, what, detail): (seconds, times)}: every part of the time,
        (None, "host code", "") the program's own outside gpe's events; they add up to
        `total_s`."""
        ledger = self.ledger
        found = {(None, "host code", ""): (ledger.outside, 1)}
        plain = self.plain_functions()
        for key, (seconds, times) in ledger.rows.items():
            function, kind, *rest = key
            detail = " ".join(str(r) for r in rest)
            if function in plain:  # (its first call, and slicing it to find that out)
                function, kind, detail = None, "plain Python", ""
            s, t = found.get((function, kind, detail), (0.0, 0))
            found[(function, kind, detail)] = (s + seconds, t + times)
        return found

    def plain_functions(self) -> set[str]:
        """The functions `gpe run` found plain Python (no TF work): the program's own."""
        found = set()
        for name, ref in self.ledger.functions.items():
            fn = ref()
            if fn is not None and fn.plain and fn.auto and not fn.stats_.fallbacks:
                found.add(name)
        return found

    @property
    def total_s(self) -> float:
        return self.ledger.total_s


_KINDS = (("call", "sliced", "host code of its sliced calls"),
          ("call", "eager", "eager calls"),
          ("call", "profile", "profile calls (eager, observed)"),
          ("call", "build", "calls that built a variant (eager, observed)"),
          ("build", "slice", "building: slicing"),
          ("build", "trace", "building: tracing its TF part, loading its host program"),
          ("build", "instantiate", "building: starting the graph that runs it"),
          ("send", "", "sending calls and values to the graph (a send waits while the "
                       "graph is 64 calls behind)"))


def format_host_time(host: HostTime, measured_s: float | None = None) -> str:
    """The report's section: per function, where the host thread's time went."""
    parts = host.parts()
    total = host.total_s
    by_function: dict = {}
    for (function, kind, detail), value in parts.items():
        by_function.setdefault(function, {})[(kind, detail)] = value
    lines = [f"gpe report: where the host's time went ({total:.3f} s on the main thread)"]
    order = sorted((f for f in by_function if f is not None),
                   key=lambda f: -sum(s for s, _ in by_function[f].values()))
    for function in order + [None]:
        rows = by_function.get(function, {})
        if not rows:
            continue
        spent = sum(s for s, _ in rows.values())
        title = function if function is not None else "outside gpe functions"
        lines.append(f"  {title}: {spent:.3f} s ({spent / total:.1%})" if total else
                     f"  {title}: {spent:.3f} s")
        for kind, detail, text in _KINDS:
            if (kind, detail) in rows:
                seconds, times = rows[(kind, detail)]
                lines.append(f"      {seconds:9.4f} s  {text} (x{times})")
        if ("host code", "") in rows:
            lines.append(f"      {rows[('host code', '')][0]:9.4f} s  the program's own "
                         "host code (plain Python and eager TF outside gpe's calls)")
        if ("plain Python", "") in rows:
            lines.append(f"      {rows[('plain Python', '')][0]:9.4f} s  its functions found "
                         f"plain Python (no TF work; {len(host.plain_functions())}): their "
                         "first calls, slicing them included")
        waits = sorted(((s, t, d) for (k, d), (s, t) in rows.items() if k == "wait"),
                       reverse=True)
        if waits:
            lines.append(f"      {sum(s for s, _, _ in waits):9.4f} s  waiting on the graph "
                         f"for its values (x{sum(t for _, t, _ in waits)}):")
            lines += [f"        {s:9.4f} s  {_wait_text(d)} (x{t})" for s, t, d in waits]
        fences = sorted(((s, t, d) for (k, d), (s, t) in rows.items() if k == "fence"),
                        reverse=True)
        if fences:
            count = sum(t for _, t, _ in fences)
            lines.append(f"      {sum(s for s, _, _ in fences):9.4f} s  fences: waits for "
                         f"the graph to finish the calls sent (x{count}):")
            lines += [f"        {s:9.4f} s  {d if d == SWITCH else 'at ' + d} (x{t})"
                      for s, t, d in fences]
    summed = sum(s for s, _ in parts.values())
    if measured_s:
        lines.append(f"  the parts add up to {summed:.3f} s of the {measured_s:.3f} s the run "
                     f"took ({summed / measured_s:.1%})")
    overlap = host.overlap
    if overlap is not None and overlap.graph_calls:
        lines.append("  overlap (gpe.timing, from the first call after a build on): "
                     f"{overlap}")
    return "\n".join(lines)


def _wait_text(detail: str) -> str:
    """"loss (f:12) train.py:40" -> "loss (f:12), needed at train.py:40"."""
    value, _, at = detail.rpartition(" ")
    return f"{value}, needed at {at}" if value else detail
