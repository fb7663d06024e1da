"""Time to the first sliced call of mylib.model.train_step: from its bundle vs from source.

    gpe extract examples/mylib -o /tmp/mylib_bundle
    python examples/bench_bundle.py /tmp/mylib_bundle [--repeats 5] [--warm]

Each measurement is a fresh process; the clock starts after `import tensorflow, gpe` and
stops (1) when the function's variant is ready, before the session runs it, and (4) when
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

Measured on the 2-core machine shared with the test suite (load about 9, medians of 5;
before = the sink traced in Python for every part set):
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

CHILD = r"""
import sys, time
sys.path.insert(0, {here!r})
import tensorflow as tf
import gpe
from gpe.host.runtime import session
from gpe.host.runtime.session import get_session
import gpe.bundles, gpe.api  # gpe's own modules: imported before the clock in both
get_session()  # gpe's one-time start (it freezes the objects alive now out of the GC)
x = tf.random.stateless_normal([32, 8], seed=[1, 2])
y = tf.reduce_sum(x[:, :3], axis=1, keepdims=True)
lr = tf.constant(0.05)
if {warm!r}:  # TensorFlow's own first costs, paid by any program that used TF before
    tf.matmul(x, tf.ones([8, 2]))  # (oneDNN's start, the function runtime's start)
    _q = tf.queue.FIFOQueue(-1, [tf.int32])
    _q.enqueue(-1)
    tf.function(lambda: tf.while_loop(lambda i: i >= 0, lambda i: i, [_q.dequeue()]))()
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

PHASES = ["its variant is ready (before the session runs it)",
          "the session's sink is made for it (wall time inside build_sink)",
          "TensorFlow has instantiated the sink (wall time inside Sink.prepare)",
          "the first sliced call has returned",
          "the first sliced call has returned, in CPU time (all threads)"]


def measure(bundle: str, warm: bool) -> tuple[list[float], int]:
    with tempfile.TemporaryDirectory() as cwd:  # not the repository root (its gpe/ folder)
        out = subprocess.run([sys.executable, "-c", CHILD.format(here=HERE, bundle=bundle,
                                                                 warm=warm)],
                             cwd=cwd, capture_output=True, text=True, check=True, timeout=300)
    *seconds, profiled = out.stdout.split()[-6:]
    return [float(s) for s in seconds], int(profiled)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warm", action="store_true",
                        help="let TensorFlow pay its own first costs before the clock")
    args = parser.parse_args()
    bundle = os.path.abspath(args.bundle)
    source, loaded = [], []
    for _ in range(args.repeats):
        source.append(measure("", args.warm)[0])
        seconds, profiled = measure(bundle, args.warm)
        assert profiled == 0, "the bundle's function was profiled: it was not used"
        loaded.append(seconds)
    for i, what in enumerate(PHASES):
        s = statistics.median(v[i] for v in source)
        b = statistics.median(v[i] for v in loaded)
        print(f"train_step, until {what} (median of {args.repeats}):")
        print(f"  from source: {s * 1e3:7.1f} ms  {sorted(round(v[i] * 1e3) for v in source)}")
        print(f"  from bundle: {b * 1e3:7.1f} ms  {sorted(round(v[i] * 1e3) for v in loaded)}")
        print(f"  ratio: {s / b:.1f}x")


if __name__ == "__main__":
    main()
