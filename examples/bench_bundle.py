"""Time to the first call of mylib.model.train_step: gpe.load vs tf.saved_model.load, and
from its bundle vs from source.

    python examples/bench_bundle.py [BUNDLE] [--repeats 5] [--warm] [--only saved-model]

The bench exports mylib's six functions (train_step, loss, predict, normalise and the
Regressor's two methods) into a temporary folder twice: as a gpe bundle (`gpe extract
examples/mylib`, unless BUNDLE is given) and as a SavedModel, the form a library ships
precompiled functions in today: a tf.Module tracking mylib's variables, each function a
tf.function with the bundle's input signature, saved by tf.saved_model.save. Every
measurement is a fresh process (the two ways interleaved, each first in turn, medians).

1. gpe.load against tf.saved_model.load. Both processes import TensorFlow and make the
arguments (x [32, 8], y, lr) before the clock, then run gc.collect() (the collector in the
same state in both). The clock then measures, per way: loading (gpe: `import gpe` and
`gpe.load(bundle)`, which imports mylib, whose variables are made by its own code;
SavedModel: `tf.saved_model.load(path)`, which restores them from its checkpoint), and
until `float(lib.train_step(x, y, lr))` has returned: the first call, its result
materialised (the same loss both ways: checked). gpe's first call must have run in the
graph (counted). With --warm both pay TensorFlow's own first costs before the clock.
Python modules are byte-compiled once (PYTHONPYCACHEPREFIX in the temporary folder, an
untimed run of each way first), as an installed package's are: this machine sets
PYTHONDONTWRITEBYTECODE, under which each process compiled gpe's ~100 modules again
(~90 ms that TensorFlow's own, compiled at install, do not cost).

2. From source against from the bundle (gpe only): the clock starts after
`import tensorflow, gpe` and stops (1) when the function's variant is ready, before the session runs it, and (4) when
the first call that ran in the graph has returned its loss (float(loss)); (2) is the wall
time spent making the session's sink program for the new part (tfprog/sink.py), (3) the
wall time TensorFlow spent instantiating that sink (Sink.prepare, on the session's
instantiating thread), and (5) is (4) in CPU time of all threads (steadier than wall time
on a loaded machine). From source, (1) takes importing mylib, the profile calls (run
eagerly), slicing and tracing the TF part; from the bundle, gpe.load (checks, imports
mylib, binds the variables). (4) adds, either way, what the session does for a new TF
part: it makes its sink (from source: a wrapper traced for the part and, once per process,
the sink's templates; from the bundle nothing is traced, it carries both), TensorFlow
instantiates the sink with the part inlined, then runs each kernel for the first time
(oneDNN's primitives). --warm lets TensorFlow pay its own one-time costs (its first matmul,
its first function with a queue) before the clock, as any program that used TensorFlow
before calling the library has. Prints medians and ratios.

At 8a35697 (README's "Bundles against SavedModel": load 2 to 2.5, medians of 7
processes per way): loaded 1.13x, first call returned 0.84x, in CPU time 0.79x; gpe.load
and a first call no longer import the slicer's passes (111 -> 85 of gpe's modules, 58.8
-> 38.5 ms of CPU to import them). At load 10 gpe loses more (CPU 352 against 175 ms).
Where gpe's first call goes, measured with perf over the timed window (thread CPU, load
~2): its modules ~35 ms, gpe.load ~25 (tf.saved_model.load ~75), the call's host side
~20, TensorFlow instantiating the sink ~45-50 (the SavedModel's function ~35), the first
run's sgemm kernels ~28 (both). More than half of the instantiation is oneDNN's layout
pass scanning the kernel registry, four scans per new (op, dtype) pair per thread (~0.65
ms a pair: the sink has 41 pairs, the SavedModel's function 18); Grappler is ~3 ms (7%;
its pruner removes the inlining's nodes, made at instantiation; its other passes change
nothing here), so extract-time optimization cannot close the gap. Earlier, at 033bf71
(load 4 to 9, 18 processes per way): loaded 1.26x, first call returned 1.04x, in CPU
time 0.89x; with --warm 0.70x, CPU 0.75x. From source (5 processes each, load ~6): making
the sink 26.8 ms against 45.9 ms (its wrapper written, not traced: wrapper_template.py).

Measured 2026-11-27 at an earlier commit, on the 2-core machine shared with other work
(load 2 to 4, medians of 9, one run):
  1. loaded:                 SavedModel  70.8 ms, gpe  67.5 ms (1.05x)
     first call returned:    SavedModel 137.6 ms, gpe 159.5 ms (0.86x; CPU 0.85x)
     with --warm (2nd run):  SavedModel  92.2 ms, gpe 129.6 ms (0.71x)
     before gpe's session froze the heap without a full collection first and gpe.load
     made the variants at first call: 115 ms against 276 ms (0.42x, 5 processes)
  2. variant ready:          source 142.6 ms, bundle 20.6 ms (gpe.load returned; 6.9x)
     first call returned:    source 224.7 ms, bundle 115.2 ms (1.95x; CPU 1.98x)
Where gpe's first call loses to the SavedModel's: ~15 ms of Python (the call's queues, the
packed handles, the sink made from the templates), then TensorFlow instantiating the sink
(~160 nodes: the loop, the queues, the inlining's Identity and NoOp nodes that gpe's exact
arithmetic keeps, the None batch's shape arithmetic) on the session's instantiating
thread: 45-50 ms, about half of it oneDNN's per-thread kernel-registry scans, where the
SavedModel instantiates one 70-node function on the main thread in ~35 ms. Tried and
dropped: instantiating a stand-in sink on that thread during gpe.load (the scans for the
template's few op types; it slowed the load more than it saved); instantiating the first
sink on the calling thread saves 5-10 ms (host/runtime/sinks.py, not changed).

Earlier (before those numbers were measured with byte-compiled modules), on the same
machine at load about 9, medians of 5; before = the sink traced in Python for every part
set:
  until the variant is ready:        source 1592 ms, bundle 260 ms (6.1x)
  making the sink (wall):            source  329 ms, bundle  45 ms (before: 225 ms)
  until the first call returned:     source 2457 ms, bundle 1054 ms (2.3x; before 1.8x)
  the same in CPU time:              source  302 ms, bundle  146 ms (2.1x; before 1.7x)
  with --warm, first call returned:  source 1219 ms, bundle  501 ms (2.4x; before 1.9x),
                                     CPU 290 ms vs 117 ms (2.5x; before 2.0x)
Later (sink instantiated on one long-lived thread; load 0.4 to 1.2, medians of 5): ready
149 vs 25 ms (6.0x), first call returned 226 vs 111 ms (2.0x), CPU 227 vs 109 ms (2.1x);
at load 3, TensorFlow instantiating the sink (3): 59 to 71 ms from source, 75 to 93 ms
from the bundle.

The 5x of the issue is reached until the variant is ready, not until the first call
returned. Where the bundle's ~110 ms CPU to its first call goes (perf record -g over the
timed part, TF_CPP_VMODULE=meta_optimizer=1,process_function_library_runtime=2, thread
CPU inside Sink.prepare): importing mylib ~15 ms and gpe.load's own work ~12 ms; the
first call's host side ~20 ms (its queues, the packed handles, each a first eager op that
TensorFlow runs as a function); instantiating the sink 45 to 65 ms of the instantiating
thread's CPU, of which oneDNN's layout pass asking the kernel registry about each op
(MklLayoutRewritePass -> mkl_op_registry::IsMklOp, a whole-registry scan per op and type
the first time a thread asks) is about half, grappler about 10 ms (only its model pruner
changes the graph), the thread's own first eager ops (its stop queue) about 10 ms; then
the first run, mostly oneDNN generating its sgemm kernels (avx512_common_gemm_f32, all
16 at the first sgemm of the process) ~27 ms. These are TensorFlow's first-time costs,
paid from source too (there partly during the eager profile calls), and none can be
saved in a bundle: TensorFlow keeps no instantiated graph or generated kernel across
processes. The bundle's sink is also larger than the one from source (162 against 146
nodes, 324 against 251 edges after pruning): the part is traced for a batch dimension of
None, so its gradients compute shapes at run time and its assignments wait on the ops that
may then fail (errors surface where eager raises them).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

WARM = r"""
if {warm!r}:  # TensorFlow's own first costs, paid by any program that used TF before
    tf.matmul(x, tf.ones([8, 2]))  # (oneDNN's start, the function runtime's start)
    _q = tf.queue.FIFOQueue(-1, [tf.int32])
    _q.enqueue(-1)
    tf.function(lambda: tf.while_loop(lambda i: i >= 0, lambda i: i, [_q.dequeue()]))()
"""

CHILD = r"""
import sys, time
import tensorflow as tf
import gpe
from gpe.host.runtime import session
from gpe.host.runtime.session import get_session
import gpe.bundles, gpe.api  # gpe's own modules: imported before the clock in both
get_session()  # gpe's one-time start (it freezes the objects alive now out of the GC)
x = tf.random.stateless_normal([32, 8], seed=[1, 2])
y = tf.reduce_sum(x[:, :3], axis=1, keepdims=True)
lr = tf.constant(0.05)
""" + WARM + r"""
sink_s = [0.0]
build = session.build_sink
def timed_build(*args, **kwargs):  # the session's sink made for the new part
    t = time.perf_counter()
    try:
        return build(*args, **kwargs)
    finally:
        sink_s[0] += time.perf_counter() - t
session.build_sink = timed_build
from gpe.tfprog import sink as sink_module
prepare_s = [0.0]
prepare = sink_module.Sink.prepare
def timed_prepare(self, stop):  # TensorFlow instantiating the sink (its own thread)
    t = time.perf_counter()
    try:
        return prepare(self, stop)
    finally:
        prepare_s[0] += time.perf_counter() - t
sink_module.Sink.prepare = timed_prepare
cpu = time.process_time()
start = time.perf_counter()
ready = None
if {bundle!r}:
    lib = gpe.load({bundle!r})
    step = lib.train_step
    ready = time.perf_counter()
else:
    from mylib import model
    step = model.train_step
    step.bundled = False  # from source, even if a bundle ships next to the module
while True:
    if ready is None and step.variants:
        ready = time.perf_counter()
    loss = step(x, y, lr)
    if step.stats()["graph_calls"]:
        float(loss)
        break
print(ready - start, sink_s[0], prepare_s[0], time.perf_counter() - start,
      time.process_time() - cpu, step.stats()["profile_calls"])
"""

# the same functions as a SavedModel: each a tf.function with the bundle's input
# signature, the variables they use tracked by one tf.Module (saved with their values)
EXPORT = r"""
import sys
import tensorflow as tf
from mylib import model
X, Y, LR = model.X, model.Y, model.LR
fit_step, call = model.Regressor.fit_step.fn, model.Regressor.__call__.fn
lib = tf.Module()
lib.tracked = [model.W1, model.B1, model.head, model.regressor]
lib.predict = tf.function(model.predict.fn, input_signature=[X])
lib.loss = tf.function(model.loss.fn, input_signature=[X, Y])
lib.train_step = tf.function(model.train_step.fn, input_signature=[X, Y, LR])
lib.normalise = tf.function(model.normalise, input_signature=[X])
lib.regressor_call = tf.function(lambda x: call(model.regressor, x), input_signature=[X])
lib.regressor_fit_step = tf.function(lambda x, y, lr: fit_step(model.regressor, x, y, lr),
                                     input_signature=[X, Y, LR])
tf.saved_model.save(lib, sys.argv[1])
"""

# from `import tensorflow` done (both) to train_step's first result as a Python float
LOAD = r"""
import sys, time
import tensorflow as tf
x = tf.random.stateless_normal([32, 8], seed=[1, 2])
y = tf.reduce_sum(x[:, :3], axis=1, keepdims=True)
lr = tf.constant(0.05)
""" + WARM + r"""
import gc
gc.collect()  # the collector's state the same in both: no full collection pending
cpu = time.process_time()
start = time.perf_counter()
if {saved!r}:
    lib = tf.saved_model.load({path!r})
else:
    import gpe
    lib = gpe.load({path!r})
loaded = time.perf_counter()
value = float(lib.train_step(x, y, lr))
end = time.perf_counter()
graph_calls = -1 if {saved!r} else lib.train_step.stats()["graph_calls"]
print(loaded - start, end - start, time.process_time() - cpu, value, graph_calls)
"""

PHASES = ["its variant is ready (from source: before the session runs it; from the "
          "bundle: gpe.load returned, the variant made at the first call)",
          "the session's sink is made for it (wall time inside build_sink)",
          "TensorFlow has instantiated the sink (wall time inside Sink.prepare)",
          "the first sliced call has returned",
          "the first sliced call has returned, in CPU time (all threads)"]
LOAD_PHASES = ["the library is loaded (functions returned)",
               "the first call of train_step has returned (float(loss))",
               "the first call has returned, in CPU time (all threads)"]


def child_env(work: str) -> dict:
    """The children's environment: the checkout and examples/ on the path, and modules
    byte-compiled once (into `work`), as an installed package's are: this machine's
    PYTHONDONTWRITEBYTECODE would otherwise have each child compile gpe from source."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE]),
               PYTHONPYCACHEPREFIX=os.path.join(work, "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def python(code: str, work: str, *args: str) -> str:
    with tempfile.TemporaryDirectory() as cwd:  # not the repository root (its gpe/ folder)
        out = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd,
                             env=child_env(work), capture_output=True, text=True,
                             timeout=300)
    if out.returncode:
        raise RuntimeError(f"a child process failed:\n{out.stderr[-3000:]}")
    return out.stdout


def export(work: str, bundle: str | None) -> tuple[str, str]:
    """mylib's functions as a gpe bundle (unless given) and as a SavedModel, in `work`."""
    if bundle is None:
        bundle = os.path.join(work, "bundle")
        python("import sys; from gpe.cli import main; sys.exit(main(sys.argv[1:]))", work,
               "extract", os.path.join(HERE, "mylib"), "-o", bundle)
    saved = os.path.join(work, "saved_model")
    python(EXPORT, work, saved)
    return bundle, saved


def measure(bundle: str, warm: bool, work: str) -> tuple[list[float], int]:
    out = python(CHILD.format(bundle=bundle, warm=warm), work)
    *seconds, profiled = out.split()[-6:]
    return [float(s) for s in seconds], int(profiled)


def measure_load(path: str, saved: bool, warm: bool, work: str) -> tuple[list[float], str]:
    *seconds, value, graph_calls = python(LOAD.format(path=path, saved=saved, warm=warm),
                                          work).split()[-5:]
    assert saved or graph_calls == "1", "gpe's first call did not run in the graph"
    return [float(s) for s in seconds], value


def report(title: str, phases: list[str], rows: dict[str, list[list[float]]]) -> None:
    """Medians per phase of each way (the first is the ratio's numerator)."""
    (first, a), (second, b) = rows.items()
    for i, what in enumerate(phases):
        print(f"{title}: until {what} (median of {len(a)}):")
        for name, runs in rows.items():
            values = sorted(round(v[i] * 1e3) for v in runs)
            print(f"  {name:>18}: {statistics.median(v[i] for v in runs) * 1e3:7.1f} ms"
                  f"  {values}")
        ratio = statistics.median(v[i] for v in a) / statistics.median(v[i] for v in b)
        print(f"  {first} / {second}: {ratio:.2f}x")


def compare_saved_model(bundle: str, saved: str, repeats: int, warm: bool,
                        work: str) -> None:
    for path, is_saved in ((saved, True), (bundle, False)):  # untimed: TF's and gpe's
        measure_load(path, is_saved, warm, work)             # modules byte-compiled
    rows: dict[str, list[list[float]]] = {"tf.saved_model.load": [], "gpe.load": []}
    for n in range(repeats):  # interleaved, each first in turn
        ways = [("tf.saved_model.load", saved, True), ("gpe.load", bundle, False)]
        values = set()
        for name, path, is_saved in ways[::1 if n % 2 == 0 else -1]:
            seconds, value = measure_load(path, is_saved, warm, work)
            rows[name].append(seconds)
            values.add(value)
        assert len(values) == 1, f"the first losses differ: {values}"
    report("train_step", LOAD_PHASES, rows)


def compare_source(bundle: str, repeats: int, warm: bool, work: str) -> None:
    rows: dict[str, list[list[float]]] = {"from source": [], "from bundle": []}
    for _ in range(repeats):
        rows["from source"].append(measure("", warm, work)[0])
        seconds, profiled = measure(bundle, warm, work)
        assert profiled == 0, "the bundle's function was profiled: it was not used"
        rows["from bundle"].append(seconds)
    report("train_step", PHASES, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", nargs="?",
                        help="mylib's bundle (default: extracted into a temp folder)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warm", action="store_true",
                        help="let TensorFlow pay its own first costs before the clock")
    parser.add_argument("--only", choices=["saved-model", "source"],
                        help="one comparison only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        bundle, saved = export(work, args.bundle and os.path.abspath(args.bundle))
        if args.only != "source":
            compare_saved_model(bundle, saved, args.repeats, args.warm, work)
        if args.only != "saved-model":
            compare_source(bundle, args.repeats, args.warm, work)


if __name__ == "__main__":
    main()
