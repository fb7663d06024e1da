"""Time to the first sliced call of mylib.model.train_step: from its bundle vs from source.

    gpe extract examples/mylib -o /tmp/mylib_bundle
    python examples/bench_bundle.py /tmp/mylib_bundle [--repeats 5]

Each measurement is a fresh process; the clock starts after `import tensorflow, gpe` and
stops when the first call that ran in the graph has returned its loss (float(loss)).
From source, that takes the profile calls (run eagerly), slicing, tracing the TF part and
starting the sink; from the bundle: gpe.load (checks, imports mylib) and registering the
FunctionDefs. Prints the median of each and their ratio.
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
from gpe.host.session import get_session
import gpe.bundles, gpe.api  # gpe's own modules: imported before the clock in both
get_session()  # gpe's one-time start (it freezes the objects alive now out of the GC)
x = tf.random.stateless_normal([32, 8], seed=[1, 2])
y = tf.reduce_sum(x[:, :3], axis=1, keepdims=True)
lr = tf.constant(0.05)
start = time.perf_counter()
if {bundle!r}:
    lib = gpe.load({bundle!r})
    step = lib.train_step
else:
    from mylib import model
    step = model.train_step
    step.bundled = False  # from source, even if a bundle ships next to the module
while True:
    loss = step(x, y, lr)
    if step.stats()["graph_calls"]:
        float(loss)
        break
print(time.perf_counter() - start, step.stats()["profile_calls"])
"""


def measure(bundle: str) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as cwd:  # not the repository root (its gpe/ folder)
        out = subprocess.run([sys.executable, "-c", CHILD.format(here=HERE, bundle=bundle)],
                             cwd=cwd, capture_output=True, text=True, check=True, timeout=300)
    seconds, profiled = out.stdout.split()[-2:]
    return float(seconds), int(profiled)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    bundle = os.path.abspath(args.bundle)
    source, loaded = [], []
    for _ in range(args.repeats):
        source.append(measure("")[0])
        seconds, profiled = measure(bundle)
        assert profiled == 0, "the bundle's function was profiled: it was not used"
        loaded.append(seconds)
    s, b = statistics.median(source), statistics.median(loaded)
    print(f"time to the first sliced call of train_step (median of {args.repeats}):")
    print(f"  from source: {s * 1e3:8.1f} ms   {sorted(round(v * 1e3) for v in source)}")
    print(f"  from bundle: {b * 1e3:8.1f} ms   {sorted(round(v * 1e3) for v in loaded)}")
    print(f"  ratio: {s / b:.1f}x")


if __name__ == "__main__":
    main()
