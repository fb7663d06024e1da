"""Bundles: `gpe extract`, `gpe.load`, a bundle shipped next to its module, `gpe inspect`,
the TensorBoard export, and every refusal (each with the bad file made here).

One extraction (a subprocess, as a user runs it) of a generated package `blib` (52
functions with declared types, and some that must be skipped) serves the tests; programs
that load it run in fresh subprocesses, so that what they register and trace is theirs
(side by side, after the extraction, in the background: tests/background.py).
"""
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest
import tensorflow as tf

import background
import gpe
from gpe.cli import main as cli
from gpe.host.bundles import bundle_load
from gpe.tfprog import bundle as bundles
from side_by_side import side_by_side

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N = 16  # generated functions in the bundle, beside the 9 written out: a program calls two

HELPERS = """
import tensorflow as tf
SCALE = tf.constant(1.5)

def act(x):
    return tf.nn.relu(x) * SCALE
"""

MANY_HEAD = """
import tensorflow as tf
import gpe
from blib.helpers import act

W = tf.Variable(tf.reshape(tf.range(16, dtype=tf.float32), [4, 4]) / 10 - 0.5, name="W")
V = tf.Variable(tf.zeros([4]), name="V")
S = tf.TensorSpec([None, 4], tf.float32)
log = []


def _mix(x, k):
    return tf.matmul(x, W) * k


@gpe.function(input_signature=[S, tf.TensorSpec([], tf.float32)], adaptive=False)
def update(x, lr):
    V.assign_add(lr * tf.reduce_mean(x, axis=0))
    log.append("update")
    print("update called")
    return tf.reduce_sum(act(_mix(x, 2.0)) + V)


def annotated(x: S, y: S):
    return tf.reduce_sum(x * y) + tf.reduce_sum(W)


@gpe.function(input_signature=[S], adaptive=False)
def noisy(x):
    n = len(log)
    return x * n


RATE = 0.5


@gpe.function(input_signature=[S], adaptive=False)
def scaled(x):
    return x * RATE


@gpe.function(input_signature=[S], adaptive=False)
def branchy(x):
    if float(tf.reduce_sum(x)) > 0:
        log.append("positive")
        y = x * 2.0
    else:
        log.append("not positive")
        y = x - 1.0
    return y


@gpe.function(input_signature=[S])
def plain(x):
    return 3


def undeclared(x):
    return x + 1.0


if __name__ == "__main__":
    open(MARKER, "w").write("the module's script code ran")
"""

MANY_FN = """
@gpe.function(input_signature=[S], adaptive=False)
def f{i}(x):
    return act(_mix(x, {k})) + V
"""


def run(args, cwd, timeout=240):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=background.env(TF_CPP_MIN_LOG_LEVEL="3"))


def write_package(folder, marker):
    pkg = os.path.join(folder, "blib")
    os.makedirs(pkg)
    open(os.path.join(pkg, "__init__.py"), "w").close()
    with open(os.path.join(pkg, "helpers.py"), "w") as f:
        f.write(textwrap.dedent(HELPERS))
    with open(os.path.join(pkg, "many.py"), "w") as f:
        f.write(f"MARKER = {marker!r}\n" + textwrap.dedent(MANY_HEAD))
        for i in range(N):
            f.write(textwrap.dedent(MANY_FN.format(i=i, k=f"{1 + i / 10}")))
    with open(os.path.join(pkg, "broken.py"), "w") as f:
        f.write("import no_such_module_anywhere\n")


def _extract_and_load():
    """blib extracted to blib/gpe_bundle (in a folder of its own, removed by `extracted`),
    then the programs that load the bundle, each a fresh process, side by side (each reads
    the bundle or a copy of blib of its own): (folder, bundle path, extraction, {program:
    its run}), no programs when the extraction failed."""
    folder = tempfile.mkdtemp(prefix="gpe-tests-bundle-")
    marker = os.path.join(folder, "MAIN_RAN")
    write_package(folder, marker)
    out = os.path.join(folder, "blib", "gpe_bundle")
    done = run([sys.executable, "-m", "gpe.cli", "extract", "blib", "-o", out,
                "--tensorboard", os.path.join(folder, "tb")], folder, timeout=400)
    if done.returncode != 0:
        return folder, out, done, {}
    # each program's files made first, then the programs run (none writes what another reads)
    programs = {name: make(folder, out) for name, make in (
        ("client", _client), ("fresh", _neighbour_fresh), ("stale", _neighbour_stale),
        ("clash", _clash))}
    return folder, out, done, dict(zip(programs, side_by_side(*programs.values())))


@pytest.fixture(scope="module")
def extracted():
    folder, out, done, runs = background.result(f"{__name__}.extracted", _extract_and_load)
    yield folder, out, done, runs
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def built(extracted):
    """(folder, bundle path, extraction's stderr): blib extracted to blib/gpe_bundle."""
    folder, out, done, _ = extracted
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, out, done.stderr


@pytest.fixture(scope="module")
def loaded(built, extracted):
    """{program: its run} of the programs that load the bundle (run with the extraction)."""
    return extracted[3]


@pytest.mark.timeout(600)  # (the extraction and the programs, if this test runs them)
def test_extract_reports_progress_and_skips_and_runs_no_script_code(built):
    folder, out, stderr = built
    total = N + 9  # the generated ones and the 9 above (_mix, act: no declared types)
    assert "[1/" in stderr and f"[{total}/{total}]" in stderr
    index = json.load(open(os.path.join(out, "index.json")))
    assert set(index["functions"]) == {f"blib.many.f{i}" for i in range(N)} | {
        "blib.many.update", "blib.many.annotated", "blib.many.branchy", "blib.many.scaled"}
    skipped = index["skipped"]
    assert "no declared argument types" in skipped["blib.many.undeclared"]
    assert "no declared argument types" in skipped["blib.many._mix"]
    assert "no declared argument types" in skipped["blib.helpers.act"]
    assert "no TF work" in skipped["blib.many.plain"]
    assert skipped["blib.many.noisy"].startswith("a value the host computes crosses into the "
                                                 "TF part at line")
    for name, why in skipped.items():
        assert f"{name} ... skipped: {why}" in stderr
    assert f"wrote {out}: {N + 4} functions" in stderr
    assert not os.path.exists(os.path.join(folder, "MAIN_RAN"))
    assert "blib.broken ... skipped: the module does not import: ModuleNotFoundError" in stderr


def test_inspect_prints_the_index(built, capsys):
    _, out, _ = built
    assert cli(["inspect", out]) == 0
    text = capsys.readouterr().out
    assert "blib.many.update(x: float32[?, 4], lr: float32[])" in text
    assert "channel 0: entry lr, x (line" in text
    assert "captures variable blib.many.V float32[4]" in text
    assert "captures tensor blib.helpers.SCALE float32[]" in text
    assert "MatMul x1" in text and "AssignAddVariableOp x1" in text
    assert "bytes with its callees" in text and "library.pb (" in text
    assert "skipped blib.many.noisy:" in text


def test_inspect_of_a_missing_bundle_is_one_line(tmp_path, capsys):
    assert cli(["inspect", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("gpe: bundle")


def test_tensorboard_event_files_hold_the_graphs(built):
    folder, _, _ = built
    runs = sorted(os.listdir(os.path.join(folder, "tb")))
    assert len(runs) == N + 4
    events = glob.glob(os.path.join(folder, "tb", "blib.many.update", "events.out.tfevents.*"))
    assert len(events) == 1
    graphs = []
    for event in tf.compat.v1.train.summary_iterator(events[0]):
        if event.graph_def:
            graph = tf.compat.v1.GraphDef()
            graph.ParseFromString(event.graph_def)
            graphs.append(graph)
    assert len(graphs) == 1
    ops = {node.op for node in graphs[0].node}
    assert {"AssignAddVariableOp", "QueueDequeueV2", "QueueEnqueueV2"} <= ops
    assert graphs[0].library.function  # the callees (act, _mix) are in its library


CLIENT = """
import contextlib, io, json, sys
import numpy as np
import tensorflow as tf
import gpe
from gpe.host.variants import builder, variant
from gpe.host.bundles import bundle_load
from gpe.tfprog import sink
from gpe.host.runtime.opcount import eager_ops, user_ops
from tensorflow.python.eager import context
from tensorflow.python.framework import func_graph

counts = {"slice": 0, "build_part": 0, "traced": []}
def counting(name, fn):
    def wrapper(*args, **kwargs):
        counts[name] += 1
        return fn(*args, **kwargs)
    return wrapper
builder.slice_function = counting("slice", builder.slice_function)
variant.build_part = counting("build_part", variant.build_part)
original_trace = func_graph.func_graph_from_py_func
def trace(name, *args, **kwargs):
    counts["traced"].append(str(name))
    return original_trace(name, *args, **kwargs)
func_graph.func_graph_from_py_func = trace

from blib import many
x = tf.reshape(tf.range(12, dtype=tf.float32), [3, 4]) / 7 - 0.5
lr = tf.constant(0.25)
calls = [("f3", (x,)), ("update", (x, lr)), ("f3", (x[:2],)), ("update", (x[1:], lr)),
         ("f3", (x,))]
variables = [many.W, many.V]
initial = [v.numpy() for v in variables]

def go(table):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        results = [table[name](*args) for name, args in calls]
    return [np.asarray(r).tolist() for r in results], out.getvalue()

eager = go({"f3": many.f3.fn, "update": many.update.fn})
eager_state = [v.numpy().tolist() for v in variables], list(many.log)
for v, value in zip(variables, initial):
    v.assign(value)
many.log.clear()

installs = []  # the variants installed from the bundle: none at load, one per function called
install = bundle_load.install
def counting_install(sliced, bundle, name, instance=None):
    installs.append(name)
    return install(sliced, bundle, name, instance)
bundle_load.install = counting_install
lib = gpe.load(sys.argv[1])
import gc
at_load = {"installs": list(installs), "variants": sum(len(lib[n].variants) for n in lib),
           "registered": len(bundle_load.registered), "frozen": gc.get_freeze_count() > 0}
with eager_ops() as ops:
    sliced = go({"f3": lib.f3, "update": lib["blib.many.update"]})
state = [v.numpy().tolist() for v in variables], list(many.log)
bundle = lib.bundle
entries = [bundle.functions["blib.many." + n] for n in ("f3", "update")]
wanted = [e["function"] for e in entries] + [e["wrapper"]["function"] for e in entries]
expected = bundle_load.reachable(bundle, wanted)
templates = {n for kind in bundle.index["sink_templates"].values() for n in kind.values()}
print(json.dumps({
    "same": eager == sliced and eager_state == state, "eager": eager, "sliced": sliced,
    "stats": [lib.f3.stats(), lib.update.stats()], "slice": counts["slice"],
    "build_part": counts["build_part"], "traced": counts["traced"], "sink": sink.TRACES,
    "registered": sorted(bundle_load.registered), "expected": sorted(expected),
    "in_context": sorted(n for n in bundle.library if context.context().has_function(n)
                         and n not in templates),
    "templates_in_context": [n for n in templates if context.context().has_function(n)],
    "library": len(bundle.library), "host_ops": dict(user_ops(ops)),
    "is_module_function": lib.update is many.update, "at_load": at_load,
    "installs": installs, "functions": len(lib),
    "with_variants": sorted(n for n in lib if lib[n].variants),
    "passes": sorted(m for m in ("gpe.slicer.pipeline", "gpe.slicer.callees",
                                 "gpe.slicer.layers") if m in sys.modules)}))
"""


def _client(folder, out):
    script = os.path.join(folder, "client.py")
    with open(script, "w") as f:
        f.write(CLIENT)
    return lambda: run([sys.executable, script, out], folder)


def test_load_runs_in_the_graph_as_eager_without_slicing(loaded):
    done = loaded["client"]
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["same"], (report["eager"], report["sliced"])
    assert "update called" in report["sliced"][1]
    assert report["slice"] == 0 and report["build_part"] == 0
    assert report["passes"] == []  # nor are the slicer's passes imported (start-up time)
    # nothing is traced in Python: the bundle carries the sink's templates and each
    # part's wrapper (tfprog/sink.py), and the session's sink is made from them for each
    # part added (two here), with the wrapper names put in
    assert report["traced"] == [], " ".join(report["traced"])
    assert report["sink"] == {"template": 0, "wrapper": 0, "sink": 0}
    # the loop conditions of the two templates used: one part, then a Case of two
    assert len(report["templates_in_context"]) == 2
    for stats in report["stats"]:  # every call ran in the graph, none was profiled
        assert stats["graph_calls"] == stats["calls"] > 0 and stats["profile_calls"] == 0
        assert stats["eager_calls"] == 0
    assert not {"MatMul", "Relu", "AssignAddVariableOp"} & set(report["host_ops"])
    # of N + 2 functions, the two called, their callees and their sink wrappers (with
    # their dispatch's two cond branches) are registered, nothing else (and of the sink
    # templates, the used ones' loop conditions)
    assert report["registered"] == report["expected"] == report["in_context"]
    assert 4 < len(report["registered"]) <= 12 < report["library"]
    assert report["is_module_function"]


def test_loading_installs_only_the_functions_called(loaded):
    """gpe.load builds no variant: each function gets the bundle's at its first call (and
    only once, whatever the batch size), so the functions a program never calls cost
    nothing (counted, not timed)."""
    done = loaded["client"]
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    # (gpe's session started: its GC freeze came before the library's import)
    assert report["at_load"] == {"installs": [], "variants": 0, "registered": 0,
                                 "frozen": True}
    assert report["functions"] > 10
    assert sorted(report["installs"]) == ["blib.many.f3", "blib.many.update"]
    assert report["with_variants"] == ["blib.many.f3", "blib.many.update"]


TWO_THREADS = """
import json, sys, threading, time
import tensorflow as tf
import gpe
from gpe.host.bundles import bundle_load
installs = []
install = bundle_load.install
def slow_install(*args, **kwargs):  # the other thread's first call arrives meanwhile
    installs.append(args[2])
    time.sleep(0.3)
    return install(*args, **kwargs)
bundle_load.install = slow_install
from blib import many
lib = gpe.load(sys.argv[1])
x = tf.reshape(tf.range(12, dtype=tf.float32), [3, 4]) / 7 - 0.5
barrier, out = threading.Barrier(2), [None, None]
def call(i):
    barrier.wait()
    out[i] = lib.f3(x).numpy().tolist()
threads = [threading.Thread(target=call, args=(i,)) for i in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({"installs": installs, "stats": lib.f3.stats(),
                  "same": out[0] == out[1] == many.f3.fn(x).numpy().tolist()}))
"""


def test_two_threads_first_calls_install_once(built):
    """Two threads' first calls of a loaded function at once: one installs the bundle's
    variant, the other waits for it (it was profiled and sliced from source)."""
    folder, out, _ = built
    script = os.path.join(folder, "two_threads.py")
    with open(script, "w") as f:
        f.write(TWO_THREADS)
    done = run([sys.executable, script, out], folder)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["installs"] == ["blib.many.f3"] and report["same"]
    assert report["stats"]["profile_calls"] == 0 and report["stats"]["calls"] == 2


NEIGHBOUR = """
import sys, warnings
import numpy as np
import tensorflow as tf
import gpe
warnings.simplefilter("always")
from blib import many
x = tf.reshape(tf.range(12, dtype=tf.float32), [3, 4]) / 7 - 0.5
with warnings.catch_warnings(record=True) as caught:
    out = [np.asarray(many.f1(x)).tolist() for _ in range(5)]
    out += [np.asarray(many.f2(x)).tolist() for _ in range(5)]
    out += [np.asarray(many.branchy(v)).tolist() for v in (x, -x, -x, x)]
sliced_log = list(many.log)
many.log.clear()
eager = [np.asarray(many.f1.fn(x)).tolist()] * 5 + [np.asarray(many.f2.fn(x)).tolist()] * 5
eager += [np.asarray(many.branchy.fn(v)).tolist() for v in (x, -x, -x, x)]
print("same", out == eager and sliced_log == many.log, many.log)
print("branchy", many.branchy.stats()["profile_calls"], many.branchy.stats()["graph_calls"])
# calls the bundle's variant does not take run as any gpe call (profiled, sliced from source)
x64 = tf.cast(x, tf.float64)
other = [np.asarray(many.branchy(v)).tolist() for v in (x64, -x64, x64, x64, -x64)]
other += [np.asarray(many.scaled(x)).tolist()]
many.RATE = 2.0  # a global number: folded, guarded by value (changed: built again)
other += [np.asarray(many.scaled(x)).tolist() for _ in range(5)]
many.RATE = 0.5
many.log.clear()
expected = [np.asarray(many.branchy.fn(v)).tolist() for v in (x64, -x64, x64, x64, -x64)]
expected += [np.asarray(many.scaled.fn(x)).tolist()]
many.RATE = 2.0
expected += [np.asarray(many.scaled.fn(x)).tolist()] * 5
many.RATE = 0.5
b, c = many.branchy.stats(), many.scaled.stats()
print("other", other == expected, b["profile_calls"], b["variants"], c["profile_calls"],
      c["graph_calls"], c["variants"])
print("stats", many.f1.stats()["profile_calls"], many.f1.stats()["graph_calls"],
      many.f1.stats()["variants_built"])
print("warnings", [str(w.message) for w in caught if issubclass(w.category, gpe.GpeWarning)])
try:
    gpe.load(sys.argv[1])
    print("loaded")
except gpe.BundleError as exc:
    print("refused", exc.kind, exc)
"""


def _neighbour(folder, name, edit):
    """NEIGHBOUR's run, on a copy of blib of its own (its many.py edited if `edit`)."""
    copy = os.path.join(folder, name)
    shutil.copytree(os.path.join(folder, "blib"), os.path.join(copy, "blib"))
    script = os.path.join(copy, "neighbour.py")
    with open(script, "w") as f:
        f.write(NEIGHBOUR)
    if edit:
        many = os.path.join(copy, "blib", "many.py")
        with open(many) as f:
            text = f.read()
        with open(many, "w") as f:
            f.write(text.replace("def _mix(x, k):", "def _mix(x, k):  # edited"))
    return lambda: run([sys.executable, script, os.path.join(copy, "blib", "gpe_bundle")],
                       copy)


def _neighbour_fresh(folder, out):
    return _neighbour(folder, "fresh", edit=False)


def _neighbour_stale(folder, out):
    return _neighbour(folder, "stale", edit=True)


def test_bundle_next_to_the_module_is_used_until_its_source_changes(loaded):
    """The bundle next to blib is used as it is; once blib/many.py changed (the same copy
    made twice, run side by side: as it is, and edited), it is not."""
    fresh = loaded["fresh"]
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert "same True ['positive', 'not positive', 'not positive', 'positive']" in fresh.stdout
    assert "stats 0 5 ['x: float32(None, 4) (from bundle)']" in fresh.stdout
    assert "branchy 0 4" in fresh.stdout  # the host decides the branch: in the graph too
    # float64: 3 profile calls, a second variant; RATE is sent with the arguments, so the
    # bundle's variant runs every call of scaled, whatever RATE is
    assert "other True 3 2 1 5 2" in fresh.stdout
    assert "warnings []" in fresh.stdout and "loaded" in fresh.stdout

    stale = loaded["stale"]
    assert stale.returncode == 0, stale.stderr[-3000:]
    assert "same True" in stale.stdout
    assert "stats 3 2 ['x: tensor float32(3, 4)']" in stale.stdout  # sliced from source
    warned = [line for line in stale.stdout.splitlines() if line.startswith("warnings")][0]
    assert warned.count("changed since the bundle") == 1, warned  # said once, for f1 and f2
    assert "refused source-changed" in stale.stdout and "blib.many changed" in stale.stdout


# refusals ------------------------------------------------------------------------------
def rewrite(path, rel, data: bytes, fix_index=True):
    with open(os.path.join(path, rel), "wb") as f:
        f.write(data)
    if fix_index:  # the index agrees with the file: the check must look inside it
        index = json.load(open(os.path.join(path, "index.json")))
        index["files"][rel] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        json.dump(index, open(os.path.join(path, "index.json"), "w"))


def edit_index(path, change):
    index = json.load(open(os.path.join(path, "index.json")))
    change(index)
    json.dump(index, open(os.path.join(path, "index.json"), "w"))


def edit_library(path, change):
    library = bundles.function_pb2.FunctionDefLibrary()
    library.ParseFromString(open(os.path.join(path, "library.pb"), "rb").read())
    change(library)
    rewrite(path, "library.pb", library.SerializeToString())


def first_node(library, op):
    return next(n for f in library.function for n in f.node_def if n.op == op)


def add_node(library, op):
    node = library.function[0].node_def.add()
    node.name, node.op = "extra", op


CORRUPTIONS = {
    "truncated": ("corrupted", "truncated or altered", lambda p: rewrite(
        p, "library.pb", open(os.path.join(p, "library.pb"), "rb").read()[:-100], False)),
    "altered": ("corrupted", "SHA-256", lambda p: rewrite(
        p, "library.pb", b"\x00" * os.path.getsize(os.path.join(p, "library.pb")), False)),
    "garbage-library": ("corrupted", "does not parse", lambda p: rewrite(
        p, "library.pb", b"\xff\xfe\xfd" * 40)),
    "index-json": ("corrupted", "not valid JSON", lambda p: rewrite(
        p, "index.json", open(os.path.join(p, "index.json"), "rb").read()[:200], False)),
    "schema": ("schema", "schema 2", lambda p: edit_index(
        p, lambda i: i.update(schema=2))),
    "tensorflow": ("tensorflow-version", "TensorFlow 2.0.0", lambda p: edit_index(
        p, lambda i: i.update(tensorflow="2.0.0"))),
    "unknown-op": ("unknown-op", "MatMulFromTheFuture", lambda p: edit_library(
        p, lambda lib: setattr(first_node(lib, "MatMul"), "op", "MatMulFromTheFuture"))),
    "read-file": ("unsafe-op", "ReadFile", lambda p: edit_library(
        p, lambda lib: add_node(lib, "ReadFile"))),
    "write-file": ("unsafe-op", "WriteFile", lambda p: edit_library(
        p, lambda lib: add_node(lib, "WriteFile"))),
    "py-func": ("unsafe-op", "EagerPyFunc", lambda p: edit_library(
        p, lambda lib: add_node(lib, "EagerPyFunc"))),
    "host-code": ("corrupted", "not gpe's generated host code", lambda p: rewrite(
        p, "host/0.py", open(os.path.join(p, "host/0.py"), "rb").read()
        + b"\nimport os\nos.system('echo owned')\n")),
    "host-missing": ("corrupted", "host/1.py is missing", lambda p: os.remove(
        os.path.join(p, "host/1.py"))),
    "unknown-function": ("corrupted", "not in library.pb", lambda p: edit_index(
        p, lambda i: next(iter(i["functions"].values())).update(function="nope"))),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_a_bad_bundle_is_refused_with_why(built, tmp_path, case):
    _, out, _ = built
    kind, words, corrupt = CORRUPTIONS[case]
    copy = str(tmp_path / "bundle")
    shutil.copytree(out, copy)
    corrupt(copy)
    before = list(bundle_load.registered)
    with pytest.raises(gpe.BundleError) as refused:
        gpe.load(copy)
    assert refused.value.kind == kind
    assert words in str(refused.value) and copy in str(refused.value)
    assert bundle_load.registered == before  # nothing registered, nothing imported
    assert "blib" not in sys.modules


CLASH = """
import json, sys
import tensorflow as tf
import gpe
first, copy, edited = sys.argv[1:4]
x = tf.reshape(tf.range(8, dtype=tf.float32), [2, 4]) / 7
lib = gpe.load(first)
y = lib.f3(x).numpy().tolist()
again = gpe.load(copy).f3(x).numpy().tolist()  # a plain copy: the same definitions
try:
    gpe.load(edited)
    refused = None
except gpe.BundleError as exc:
    refused = [exc.kind, str(exc)]
print(json.dumps({"same": y == again, "refused": refused,
                  "graph_calls": lib.f3.stats()["graph_calls"]}))
"""


def _clash(folder, out):
    """CLASH's run with the bundle, a plain copy and a copy whose f3 subtracts where it
    added: (its run, f3's entry in the index, the edited copy's path)."""
    copy, edited = os.path.join(folder, "clash-copy"), os.path.join(folder, "clash-edited")
    shutil.copytree(out, copy)
    shutil.copytree(out, edited)
    f3 = json.load(open(os.path.join(out, "index.json")))["functions"]["blib.many.f3"]

    def change(library):
        fdef = next(f for f in library.function if f.signature.name == f3["function"])
        next(n for n in fdef.node_def if n.op == "AddV2").op = "Sub"
    edit_library(edited, change)
    script = os.path.join(folder, "clash.py")  # where blib is found
    with open(script, "w") as f:
        f.write(CLASH)
    return lambda: (run([sys.executable, script, out, copy, edited], folder), f3, edited)


def test_another_bundle_with_the_same_names_and_other_definitions_is_refused(loaded):
    """One eager context holds one function of a name: a bundle whose FunctionDef has the
    name of a different one loaded before is refused, not run as the first one."""
    done, f3, edited = loaded["clash"]
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["same"] and report["graph_calls"] == 2
    kind, message = report["refused"]
    assert kind == "clash" and f3["function"] in message and edited in message


def test_unsafe_ops_load_when_allowed_by_name(built, tmp_path):
    _, out, _ = built
    copy = str(tmp_path / "bundle")
    shutil.copytree(out, copy)
    edit_library(copy, lambda lib: add_node(lib, "ReadFile"))
    with pytest.raises(gpe.BundleError, match="ReadFile"):
        bundles.read(copy)
    assert bundles.read(copy, allow_ops={"ReadFile"}).functions  # passes the checks


def _example_library():
    """examples/mylib extracted, then its client on the bundle: (extraction, client run)."""
    with background.folder() as folder:
        out = os.path.join(folder, "mylib_bundle")
        done = run([sys.executable, "-m", "gpe.cli", "extract",
                    os.path.join(ROOT, "examples", "mylib"), "-o", out], folder)
        if done.returncode != 0:
            return done, None
        return done, run([sys.executable, os.path.join(ROOT, "examples", "mylib_client.py"),
                          out], folder)


def background_jobs():
    """The children the tests below assert on, started after collection
    (tests/background.py): the extraction of blib and its programs, examples/mylib's."""
    return {"extracted": _extract_and_load,
            "test_example_library_extracts_and_its_client_matches_eager": _example_library}


def test_example_library_extracts_and_its_client_matches_eager():
    done, client = background.result(
        f"{__name__}.test_example_library_extracts_and_its_client_matches_eager",
        _example_library)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "mylib.model.train_step ... ok" in done.stderr
    assert client.returncode == 0, client.stdout + client.stderr[-3000:]
    assert "same as eager: True" in client.stdout
    assert "0 profiled" in client.stdout
