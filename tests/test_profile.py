"""Seeing where the time goes (issue 31): `gpe.profile(DIR)` writes a TensorFlow profile
holding gpe's host events beside TensorFlow's ops, read back here with the XPlane protobuf
TensorFlow ships (no TensorBoard needed); `gpe run --report` tells where the host's time
went, and its parts add up to the run's time.

The profiler's cost is measured by tests/bench_profile.py (a benchmark, not a test)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest
import tensorflow as tf

import background
import gpe
from gpe.host.call import traced
from gpe.host.call.function import SlicedFunction
from gpe.host.diagnostics import profile as profile_module
from gpe.host.diagnostics.profile import HostTime, events, format_host_time
from gpe.host.diagnostics.stats import GpeWarning
from gpe.host.runtime import session as session_module
from gpe.host.runtime.trace import SWITCH, TRACER

HERE = os.path.abspath(__file__)
CALLS = 6


def line_of(marker: str) -> int:
    """The line of this file that ends with `# marker`."""
    with open(HERE) as f:
        return next(i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}"))


W = tf.Variable(tf.ones([32, 32]) * 0.01)


@gpe.function(adaptive=False)  # (the profiler's cost must not make it choose eager)
def step(x):
    y = tf.matmul(x, W)  # MATMUL
    W.assign_add(0.001 * y)  # ASSIGN
    return tf.reduce_sum(y)  # SUM


@gpe.function(profile_calls=1, adaptive=False)
def other(x):
    return tf.reduce_mean(tf.tanh(x) * 2.0)  # OTHER


@gpe.function
def helper(x):
    return tf.reduce_max(x) + 1.0


LOG = []


@gpe.function(profile_calls=1, adaptive=False)
def pair(x):
    y = tf.matmul(x, W)
    parts = [tf.reduce_sum(y), tf.reduce_max(y)]  # PARTS
    LOG.append(parts)  # a list of tensors the host takes at once, mid-call
    return parts[0]


def profiled_program(logdir: str) -> "gpe.profile":
    x = tf.ones([32, 32])
    for _ in range(5):  # profiled, built and run sliced before the profile
        step(x)
    for _ in range(3):
        pair(x)
    W.numpy()  # the graph has finished those calls: no op of theirs in the profile
    with gpe.profile(logdir, calls="all") as p:  # (every call, from the block's start)
        for _ in range(CALLS):
            loss = step(x)
        value = float(loss)  # WAIT
        W.numpy()  # FENCE
        other(x)  # built in the profile: sliced, traced, and its graph started at
        other(x)  # its first sliced call
        pair(x)
    assert value > 0
    return p


@pytest.fixture(scope="module")
def profiled_path(tmp_path_factory):
    p = profiled_program(str(tmp_path_factory.mktemp("profile")))
    assert p.path is not None and p.path.endswith(".xplane.pb"), p.path
    run_folder = os.path.dirname(os.path.dirname(p.path))
    assert run_folder.endswith(os.path.join("plugins", "profile"))
    return p.path


@pytest.fixture(scope="module")
def profiled(profiled_path):
    """The profile's events but a fence for switching sinks: whether `other`'s new part
    lands in a new sink depends on how many parts the suite's earlier tests left in this
    process (GPE_SINK_GROUP); that fence has its own test
    (test_a_call_switching_sinks_waits_in_a_fence_of_its_function)."""
    return [e for e in events(profiled_path) if e.name != f"gpe fence {SWITCH}"]


def _ops(found, line: int, op: str, host_line: int):
    return [e for e in found if e.line_id != host_line and f"_L{line}/" in e.name
            and e.name.endswith(op)]


def test_profile_holds_gpe_calls_waits_fences_on_the_host_thread(profiled):
    calls = [e for e in profiled if e.name == "gpe call step"]
    assert len(calls) == CALLS, [e.name for e in profiled if e.name.startswith("gpe")]
    host_line = calls[0].line_id
    gpe_events = [e for e in profiled if e.name.startswith("gpe ")]
    assert {e.line_id for e in gpe_events} == {host_line}, "gpe's events: the host thread's"
    assert all(c.stats == {"kind": "sliced", "variant": 1} for c in calls), calls
    waits = [e for e in gpe_events if e.name.startswith("gpe wait")]
    assert len(waits) == 2, waits
    wait = waits[0]
    assert wait.name == f"gpe wait `tf.reduce_sum(y)` (step:{line_of('SUM')})", wait.name
    assert wait.stats["at"] == f"test_profile.py:{line_of('WAIT')}"
    fences = [e for e in gpe_events if e.name.startswith("gpe fence")]
    assert [f.name for f in fences] == [f"gpe fence test_profile.py:{line_of('FENCE')}"]
    assert fences[0].stats["source"] == "W.numpy()"  # (its comment left out)
    # in the order the program ran them: the calls one after another, then the wait, the
    # fence, then other's two calls
    order = [e for e in gpe_events if e.name.startswith(("gpe call", "gpe wait", "gpe fence"))]
    assert [e.name.split(" ")[1] for e in order] == \
        ["call"] * CALLS + ["wait", "fence", "call", "call", "call", "wait"], \
        [e.name for e in order]
    for before, after in zip(order[:-1], order[1:-1]):
        assert before.end_ps <= after.start_ps, (before, after)


def test_profile_holds_a_wait_for_values_taken_at_once_mid_call(profiled):
    """A list of tensors the host part takes from the graph inside a sliced call (not a
    Pending: received at once, where the TF part sends it) is a wait event inside the
    call's."""
    call, = [e for e in profiled if e.name == "gpe call pair"]
    assert call.stats == {"kind": "sliced", "variant": 1}, call
    wait, = [e for e in profiled if e.name.startswith("gpe wait") and "pair" in e.name]
    assert wait.name == f"gpe wait parts (pair:{line_of('PARTS')})", wait.name
    assert wait.stats["at"] == f"test_profile.py:{line_of('PARTS')}", wait.stats
    assert call.start_ps <= wait.start_ps <= wait.end_ps <= call.end_ps
    assert wait.line_id == call.line_id


def test_profile_holds_the_sinks_ops_on_another_thread_in_order(profiled):
    calls = [e for e in profiled if e.name == "gpe call step"]
    host_line = calls[0].line_id
    matmuls = _ops(profiled, line_of("MATMUL"), "MatMul", host_line)
    assigns = _ops(profiled, line_of("ASSIGN"), ":AssignAddVariableOp", host_line)
    sums = _ops(profiled, line_of("SUM"), ":Sum", host_line)
    assert len(matmuls) == len(assigns) == len(sums) == CALLS, \
        sorted({e.name for e in profiled if "_L" in e.name})
    wait, = [e for e in profiled if e.name.startswith("gpe wait") and "(step:" in e.name]
    fence, = [e for e in profiled if e.name.startswith("gpe fence")]
    for call, matmul in zip(calls, matmuls):  # each call sent before the graph ran it
        assert call.start_ps <= matmul.start_ps
    assert matmuls[-1].start_ps >= calls[0].end_ps  # the host ran ahead: no call waited
    assert wait.end_ps >= sums[-1].end_ps  # the wait ended once the graph had the value
    assert fence.end_ps >= max(e.end_ps for e in assigns + sums)  # ...the last write


def test_the_trace_viewer_shows_gpe_events_on_the_host_row(profiled_path):
    """What TensorBoard's trace viewer shows: the profile converted by TensorFlow's own
    converter (the profile plugin's `trace_viewer` tool): gpe's events, in the program's
    order, on the row of the thread that made the calls (named as the OS names it:
    `python`, or `pytest` where the suite runs as its script); the sink's ops on other
    rows."""
    from tensorflow.python.profiler.internal import _pywrap_profiler_plugin
    from tensorflow.tsl.profiler.protobuf import trace_events_pb2
    data, ok = _pywrap_profiler_plugin.xspace_to_tools_data([profiled_path], "trace_viewer")
    assert ok, data
    trace = trace_events_pb2.Trace()
    trace.ParseFromString(data)
    rows = {(device, row): r.name for device, d in trace.devices.items()
            for row, r in d.resources.items()}
    shown = sorted(trace.trace_events, key=lambda e: e.timestamp_ps)
    ours = [e for e in shown if e.name.startswith(("gpe call", "gpe wait", "gpe fence"))
            and e.name != f"gpe fence {SWITCH}"]  # (see the `profiled` fixture)
    assert [e.name.split(" ")[1] for e in ours] == \
        ["call"] * CALLS + ["wait", "fence", "call", "call", "call", "wait"], ours
    host = {(e.device_id, e.resource_id) for e in ours}
    with open(f"/proc/self/task/{threading.get_native_id()}/comm") as f:
        calling = f.read().strip()  # (the profile was made on this, the main, thread)
    assert len(host) == 1 and rows[host.pop()] == calling, (calling, rows)
    assert dict(ours[0].args) == {"kind": "sliced", "variant": "1"}
    # (an op is shown by its kernel's name, `_MklMatMul`; its long name names the line)
    matmuls = [e for e in shown if f"_L{line_of('MATMUL')}/MatMul:" in
               e.args.get("long_name", "")]
    assert len(matmuls) == CALLS, sorted({e.args.get("long_name", "") for e in shown})
    assert all(e.resource_id != ours[0].resource_id for e in matmuls)
    assert all(c.timestamp_ps <= m.timestamp_ps for c, m in zip(ours, matmuls))


def test_profile_holds_a_builds_steps(profiled):
    calls = [e for e in profiled if e.name == "gpe call other"]
    assert [c.stats.get("kind") for c in calls] == ["build", "sliced"], calls

    def inside(name, call):
        found = [e for e in profiled if e.name == name]
        assert len(found) == 1, (name, found)
        assert call.start_ps <= found[0].start_ps <= found[0].end_ps <= call.end_ps
    inside("gpe slice other", calls[0])
    inside("gpe trace other", calls[0])
    inside("gpe instantiate other", calls[1])
    ran = [e for e in profiled if f"_L{line_of('OTHER')}/" in e.name]
    assert ran and min(e.start_ps for e in ran) >= calls[1].start_ps


def test_the_hooks_are_off_outside_a_profile(profiled):
    assert not TRACER.on and TRACER.ledger is None and not TRACER.events
    # a call runs SlicedFunction's own __call__ again (host/call/traced.py)
    assert SlicedFunction.__call__ is traced._call
    with HostTime(overlap=False):
        assert SlicedFunction.__call__ is traced._traced_call
    assert SlicedFunction.__call__ is traced._call


def test_a_profile_of_a_window_of_calls(tmp_path):
    """gpe.profile(DIR, calls=N, skip=K) records the N calls after K: their events and
    the graph's ops for them, then the hooks go off for the rest of the block."""
    x = tf.ones([32, 32])
    step(x)  # (built by the module's profile: sliced from the first call)
    W.numpy()
    with gpe.profile(str(tmp_path), calls=3, skip=2) as p:
        for i in range(8):
            loss = step(x)
            if i == 5:  # the window closed after the 5th call
                after = (TRACER.on, SlicedFunction.__call__ is traced._call)
        float(loss)
    assert after == (False, True)
    assert p.recorded == 3 and p.path is not None
    found = events(p.path)
    calls = [e for e in found if e.name == "gpe call step"]
    assert len(calls) == 3 and all(c.stats == {"kind": "sliced", "variant": 1} for c in calls)
    end, = [e for e in found if e.name.startswith("gpe end of the profile's window")]
    assert end.start_ps >= calls[-1].end_ps and end.line_id == calls[0].line_id
    matmuls = _ops(found, line_of("MATMUL"), "MatMul", calls[0].line_id)
    # the window's calls' ops, each after its call began, ran before the window ended;
    # the two calls before it may have run in the graph meanwhile (the host runs ahead);
    # the calls after it are not recorded by gpe (TensorFlow's profiler stops as its
    # writer starts, so a later call's op may be in the file)
    window_ops = [m for m in matmuls if m.start_ps <= end.end_ps]
    assert 3 <= len(window_ops) <= 5, matmuls
    assert all(c.start_ps <= m.start_ps for c, m in zip(calls, window_ops[-3:]))
    assert not [e for e in found if e.name.startswith("gpe ") and e.start_ps > end.end_ps]


def test_a_window_that_cannot_start_is_told_at_the_blocks_end(tmp_path):
    """Another TensorFlow profile recording when the window would open: the calls run as
    without a profile, and TensorFlow's error is raised at the block's end, not by a
    call; one recording at the block's start: raised there."""
    x = tf.ones([32, 32])
    with pytest.raises(tf.errors.AlreadyExistsError):
        with gpe.profile(str(tmp_path / "window"), calls=2):
            tf.profiler.experimental.start(str(tmp_path / "other"))
            try:
                values = [float(step(x)) for _ in range(3)]
                hooks = (TRACER.on, TRACER.window)
            finally:
                tf.profiler.experimental.stop(save=False)
    assert len(values) == 3 and hooks == (False, None)
    with gpe.profile(str(tmp_path / "whole"), calls="all"):
        with pytest.raises(tf.errors.AlreadyExistsError):
            gpe.profile(str(tmp_path / "window"), calls=2).__enter__()
        assert TRACER.window is None


@gpe.function(profile_calls=1, adaptive=False)
def fresh(x):
    return tf.reduce_sum(tf.sin(x) * 3.0)  # FRESH


def test_a_profile_records_a_window_of_the_steady_state_by_default(tmp_path):
    """gpe.profile(DIR) records 20 calls, from the first call of a function that has run
    sliced: not its profile and build calls, nor the first sliced call that started its
    graph; they ran inside the block, before the window."""
    x = tf.ones([8, 8])
    with gpe.profile(str(tmp_path)) as p:
        for _ in range(30):
            loss = fresh(x)
        float(loss)
    stats = fresh.stats()
    assert stats["calls"] == 30 and 0 < stats["graph_calls"] < 30, stats
    # every call before the first sliced one was a profile or build call (adaptive=False)
    assert p.first == 30 - stats["graph_calls"] + 2 and p.recorded == profile_module.CALLS
    found = events(p.path)
    calls = [e for e in found if e.name == "gpe call fresh"]
    assert len(calls) == 20 and all(c.stats == {"kind": "sliced", "variant": 1}
                                    for c in calls), calls
    assert not [e for e in found if e.name.startswith(("gpe slice", "gpe trace",
                                                       "gpe instantiate"))]
    sines = _ops(found, line_of("FRESH"), ":Sin", calls[0].line_id)
    assert len(sines) >= 20 and sines[-1].start_ps >= calls[0].start_ps, len(sines)
    for wrong in (0, "some", None, True):
        with pytest.raises(ValueError):
            gpe.profile(str(tmp_path), calls=wrong)


@gpe.function(profile_calls=1)  # (adaptive: its first sliced calls are timed against eager)
def chain(x):  # clearly faster in the graph: its adaptive choice settles in a few dozen calls
    for _ in range(10):
        x = tf.tanh(x) * 1.01 + 0.001
    return tf.reduce_sum(x)


def test_the_default_window_opens_once_the_adaptive_choice_is_made(tmp_path):
    """Where a function's sliced calls are timed against eager ones, the default window
    opens once the choice is made: the profile's cost does not weigh in the choice, and
    the window shows the calls as they run from then on, not the timed eager calls."""
    x = tf.ones([4, 4])
    with gpe.profile(str(tmp_path)) as p:
        for _ in range(600):  # (about 120 calls idle; a loaded machine times for longer)
            total = chain(x)
            if p.recorded == 20:  # the window's calls made
                break
        float(total)
    assert chain.stats()["timed_calls"] > 0  # (timed, before the window)
    recorded = [e for e in events(p.path) if e.name == "gpe call chain"]
    assert 1 <= len(recorded) == p.recorded <= 20, (p.first, p.recorded, chain.stats())
    # the choice made: sliced (or, on a busy machine, eager, saying why), never timed
    kinds = {(e.stats["kind"], e.stats.get("why")) for e in recorded}
    assert len(kinds) == 1, kinds
    kind, why = kinds.pop()
    assert kind == "sliced" or why.startswith(("eager is faster", "sliced is not clearly")), why


@gpe.function(profile_calls=100)
def never_sliced(x):
    return tf.reduce_sum(x)


def test_gpe_run_profile_window(tmp_path):
    """`gpe run --profile DIR [--profile-calls N|all] [--profile-skip K]` (gpe/observe.py):
    what it recorded, or why nothing, told at the end."""
    from gpe.cli import main
    from gpe.observe import Observed
    observed = Observed(False, str(tmp_path), 2, 1)
    x = tf.ones([32, 32])
    with observed.running():
        for _ in range(4):
            step(x)
    assert observed.profile.recorded == 2
    assert "gpe: profile of a window of 2 calls from call 2 of gpe functions (after 1) " \
        "written to" in observed.told(), observed.told()
    assert len([e for e in events(observed.profile.path) if e.name == "gpe call step"]) == 2
    nothing = Observed(False, str(tmp_path / "none"), 20, None)
    with nothing.running():
        for _ in range(3):
            never_sliced(x)
    assert nothing.profile.path is None and nothing.profile.first is None
    assert "no call of a gpe function ran sliced" in nothing.told(), nothing.told()
    assert "--profile-skip 0 records from the first call" in nothing.told()
    with pytest.warns(GpeWarning, match="no call of a gpe function ran sliced"):
        with gpe.profile(str(tmp_path / "none")) as p:
            never_sliced(x)
    assert p.path is None
    assert main(["run", "--profile-calls", "3", HERE]) == 2  # (without --profile)
    for wrong in ("0", "some"):
        assert main(["run", "--profile", str(tmp_path), "--profile-calls", wrong, HERE]) == 2
    assert main(["run", "--profile", str(tmp_path), "--profile-skip", "-1", HERE]) == 2


def test_a_call_switching_sinks_waits_in_a_fence_of_its_function(tmp_path):
    """A call to a part of another sink than the last call's first waits for the calls
    sent (Session.start_call; a program of more parts than one sink holds,
    GPE_SINK_GROUP): a fence of the calling function's in --report, named for why, and an
    event inside the call's in a profile, not the call's host code."""
    x = tf.ones([32, 32])
    step(x)
    W.numpy()  # the calls sent are acknowledged
    with HostTime(overlap=False) as host, gpe.profile(str(tmp_path), calls=3, skip=0) as p:
        step(x)
        step(x)  # (two calls sent, not acknowledged: the host reads acknowledgements late)
        session_module._session.last_group = -1  # as if the last call went to another sink
        loss = step(x)
    assert float(loss) > 0
    assert host.parts()[("step", "fence", SWITCH)][1] == 1, sorted(host.parts())
    assert f" s  {SWITCH} (x1)" in format_host_time(host)
    found = events(p.path)
    fence, = [e for e in found if e.name == f"gpe fence {SWITCH}"]
    call = [e for e in found if e.name == "gpe call step"][-1]
    assert call.start_ps <= fence.start_ps <= fence.end_ps <= call.end_ps


def test_host_time_parts_add_up_to_the_time_measured():
    x = tf.ones([32, 32])
    started = time.perf_counter()
    with HostTime(overlap=False) as host:
        for _ in range(4):
            helper(x)  # profiled, built and run sliced here
        for _ in range(20):
            loss = step(x)
        float(loss)  # HT_WAIT
        time.sleep(0.05)  # the program's own host work
        W.numpy()  # HT_FENCE
    measured = time.perf_counter() - started
    parts = host.parts()
    summed = sum(seconds for seconds, _ in parts.values())
    assert summed == pytest.approx(host.total_s, rel=1e-6)
    assert summed == pytest.approx(measured, rel=0.05)
    assert parts[(None, "host code", "")][0] >= 0.05
    assert parts[("step", "call", "sliced")][1] == 20
    assert parts[("step", "send", "")][1] >= 20  # its calls sent (the time they waited
    # while the graph was 64 calls behind is sending, not the call's host code)
    helper_name = "helper"
    assert parts[(helper_name, "call", "profile")][1] >= 2
    for what in ("slice", "trace", "instantiate"):
        assert (helper_name, "build", what) in parts, sorted(parts)
    waits = [k for k in parts if k[1] == "wait"]
    assert waits == [("step", "wait", f"`tf.reduce_sum(y)` (step:{line_of('SUM')}) "
                                      f"test_profile.py:{line_of('HT_WAIT')}")]
    assert (None, "fence", f"test_profile.py:{line_of('HT_FENCE')}") in parts
    text = format_host_time(host, measured)
    assert "waiting on the graph" in text and "fences" in text and "building" in text


# `gpe run --report --profile DIR`: a script in a folder of its own -----------------------
TRAIN = """
import tensorflow as tf
w = tf.Variable(tf.ones([32, 32]) * 0.01)

def step(x):
    y = tf.matmul(x, w)
    for _ in range(8):  # (clearly faster in the graph: the adaptive choice is quick)
        y = tf.tanh(y) * 1.01
    w.assign_add(0.001 * y)
    return tf.reduce_sum(y)

x = tf.ones([32, 32])
total = 0.0
for i in range(120):
    loss = step(x)
    if i % 20 == 19:
        total += float(loss)
print(round(total, 3), float(w.numpy().sum()) > 0)
"""
# (made by the child's profiler; removed by the test)
PROFILE_DIR = os.path.join(tempfile.gettempdir(), f"gpe-test-profile-{os.getpid()}")
CHILDREN = {"test_gpe_run_report_and_profile": lambda: background.run_in_folder(
    {"train.py": textwrap.dedent(TRAIN)},
    [sys.executable, "-m", "gpe.cli", "run", "--report", "--profile", PROFILE_DIR,
     "train.py"])}


def background_jobs():
    return CHILDREN


def test_gpe_run_report_and_profile():
    try:
        run, = background.result(f"{__name__}.test_gpe_run_report_and_profile",
                                 CHILDREN["test_gpe_run_report_and_profile"])
        assert run.returncode == 0, run.stderr[-3000:]
        section = run.stderr[run.stderr.index("gpe report: where the host's time went"):]
        total = float(re.search(r"\(([\d.]+) s on the main thread\)", section).group(1))
        # the per-function totals, and each function's rows, add up
        heads = re.findall(r"^  (\S.*?): ([\d.]+) s", section, re.M)
        assert {name for name, _ in heads} >= {"step", "outside gpe functions"}, section
        assert sum(float(s) for _, s in heads) == pytest.approx(total, abs=0.002 * len(heads))
        # (a waits' or fences' line ending in ":" sums the lines under it)
        rows = [float(s) for s in re.findall(r"^      +([\d.]+) s  .*[^:]$", section, re.M)]
        assert sum(rows) == pytest.approx(total, abs=0.0002 * len(rows) + 0.001), section
        summed, measured = map(float, re.search(r"the parts add up to ([\d.]+) s of the "
                                                r"([\d.]+) s the run took", section).groups())
        assert summed == pytest.approx(measured, rel=0.05), section
        assert "overlap (gpe.timing, from the first call after a build on): wall" in section
        assert re.search(r"waiting on the graph for its values.*\n.*needed at train.py:17",
                         section), section
        # the profile: a window of (up to) 20 calls, from the first call of step once it
        # ran sliced and its adaptive choice was made
        recorded, first, path = re.search(
            r"gpe: profile of a window of (\d+) calls from call (\d+) of gpe functions \(the "
            r"steady state: .*?\) written to (\S+\.xplane\.pb);", run.stderr).groups()
        built = sum(int(n) for n in re.findall(r"s  (?:profile calls \(eager, observed\)|"
                                               r"calls that built a variant \(eager, "
                                               r"observed\)) \(x(\d+)\)", section))
        assert built >= 3 and int(first) > built + 1, (first, section)
        found = [e for e in events(path) if e.name.startswith("gpe ")]
        calls = [e for e in found if e.name == "gpe call step"]
        assert 1 <= len(calls) == int(recorded) <= 20
        kinds = {(c.stats["kind"], c.stats.get("why")) for c in calls}  # (as the choice
        assert len(kinds) == 1 and "timed" not in str(kinds), kinds  # made: never timed)
        assert not [e for e in found if e.name.startswith(("gpe slice", "gpe trace"))]
    finally:
        shutil.rmtree(PROFILE_DIR, ignore_errors=True)


def test_gpe_run_help_names_profile():
    helptext = subprocess.run([sys.executable, "-m", "gpe.cli", "run", "--help"],
                              capture_output=True, text=True, timeout=120)
    assert "--profile DIR" in helptext.stdout and "gpe[profile]" in helptext.stdout
