"""tf.distribute (issue 16): MirroredStrategy over 2 logical CPU devices, in a subprocess
(the logical devices are set before TensorFlow initialises). Every check runs the same
program eagerly and under gpe and compares losses and final weights, and shows the TF
work ran in the graph (sliced calls, strategy.run in the TF part)."""
import json
import os
import re
import subprocess
import sys
import textwrap

import background
from side_by_side import side_by_side

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "examples")

CHILD = """
import json, sys
sys.path.insert(0, EXAMPLES)
import numpy as np
import tensorflow as tf
import distributed as d
import gpe

strategy = tf.distribute.MirroredStrategy(d.logical_cpus())
out = {}

def run(name, mode, which="dist", steps=14):
    program = d.PROGRAMS[name](strategy)
    wrapped = d.wrap(program, mode, which)
    losses, _ = d.train(program, d.dataset(strategy, steps))
    result = {"losses": losses, "weights": [v.numpy().tolist() for v in program.weights()]}
    if wrapped is not None:
        sliced = wrapped._sliced
        result["stats"] = sliced.stats()
        plan = sliced.last_plan
        result["tf_source"] = plan.tf_source if plan is not None else ""
    return result

for name in ("vars", "subclassed"):
    out[name, "eager"] = run(name, "eager")
for name in ("vars", "subclassed"):
    out[name, "gpe"] = run(name, "gpe")
out["vars", "replica"] = run("vars", "gpe", "replica", steps=6)

# a Mirrored value (not a variable) as an argument: read each call, never frozen
with strategy.scope():
    v = tf.Variable(tf.ones([3]))
def rep(x):
    return x * tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group + 1,
                       tf.float32)
def use(m):
    v.assign_sub(0.1 * m * tf.ones([3]))
    return tf.reduce_sum(v) + m
def mirrored(fn):
    v.assign(tf.ones([3]))
    outs = []
    for i in range(7):
        per = strategy.run(rep, args=(tf.constant(float(i)),))
        m = strategy.extended.reduce_to(tf.distribute.ReduceOp.SUM, per, destinations=v)
        outs.append(float(fn(m)))
    return outs, [c.numpy().tolist() for c in v.values]
out["mirrored", "eager"] = mirrored(use)
out["mirrored", "gpe"] = mirrored(gpe.function(use))

# host work in the replica step: it runs once per replica per call, as eagerly
printed = []
with strategy.scope():
    w = tf.Variable(tf.ones([2]))
def step(x):
    printed.append(1)
    w.assign_add(x)
    return tf.reduce_sum(w)
def dist(x):
    per = strategy.run(step, args=(x,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per, axis=None)
def loop(fn):
    printed.clear()
    w.assign(tf.ones([2]))
    losses = [float(fn(tf.constant([1.0, 2.0]))) for _ in range(6)]
    return losses, len(printed)
out["printing", "eager"] = loop(dist)
out["printing", "gpe"] = loop(gpe.function(dist))
# any function a TF op is given (here tf.map_fn's) with host work: not traced once
seen = []
def square(t):
    seen.append(1)
    return t * t
def mapped(x):
    return tf.reduce_sum(tf.map_fn(square, x)) + 1.0
def loop_map(fn):
    seen.clear()
    return [float(fn(tf.constant([1.0, 2.0, float(i)]))) for i in range(6)], len(seen)
out["map_fn", "eager"] = loop_map(mapped)
out["map_fn", "gpe"] = loop_map(gpe.function(mapped))
print("RESULT", json.dumps([[list(k), v] for k, v in out.items()]))
"""

SCRIPT = """
import os, sys
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
GLOBAL = 8
with strategy.scope():
    w = tf.Variable(tf.fill([4, 1], 0.1))
    opt = tf.keras.optimizers.SGD(0.1)
rng = np.random.RandomState(0)
x, y = rng.randn(64, 4).astype("float32"), rng.randn(64, 1).astype("float32")
dist = strategy.experimental_distribute_dataset(
    tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL))

def step(batch):
    xb, yb = batch
    with tf.GradientTape() as tape:
        per = tf.reduce_mean(tf.square(tf.matmul(xb, w) - yb), axis=1)
        loss = tf.nn.compute_average_loss(per, global_batch_size=GLOBAL)
    opt.apply_gradients([(tape.gradient(loss, w), w)])
    return loss

def dist_step(batch):
    per = strategy.run(step, args=(batch,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per, axis=None)

losses = []
for epoch in range(2):
    for batch in dist:
        losses.append(float(dist_step(batch)))
print("losses", [round(l, 6) for l in losses])
print("w", w.numpy().ravel().tolist())
"""


def _run(args, cwd, timeout=240):
    env = background.env(TF_CPP_MIN_LOG_LEVEL="3", EXAMPLES=EXAMPLES)
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env)


def _same(a, b):
    return json.dumps(a) == json.dumps(b)


def _mirrored_child():
    return background.run_script(f"EXAMPLES = {EXAMPLES!r}\n" + CHILD, timeout=240,
                                 EXAMPLES=EXAMPLES)


def background_jobs():
    """The children the tests below assert on, started after collection
    (tests/background.py)."""
    return {"test_mirrored_strategy_steps_match_eager_and_slice": _mirrored_child,
            "test_gpe_run_on_a_mirrored_script": _script_runs}


def test_mirrored_strategy_steps_match_eager_and_slice():
    proc = background.result(f"{__name__}.test_mirrored_strategy_steps_match_eager_and_slice",
                             _mirrored_child)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))
    out = {tuple(k): v for k, v in json.loads(line[len("RESULT "):])}
    for name in ("vars", "subclassed"):
        eager, sliced = out[name, "eager"], out[name, "gpe"]
        assert _same(eager["losses"], sliced["losses"]), name
        assert _same(eager["weights"], sliced["weights"]), name
        assert len(set(eager["losses"])) == len(eager["losses"])  # never the same batch
        stats = sliced["stats"]
        assert stats["eager_calls"] == 3 and stats["graph_calls"] == 11, stats
        # the replicas' work and the reduce are in the TF part
        assert ".run(" in sliced["tf_source"] and ".reduce(" in sliced["tf_source"]
    # the per-replica step decorated itself: strategy.run(step) runs one replicated sliced
    # call (tests/test_replica_step.py), no hang
    assert _same(out["vars", "replica"]["losses"], out["vars", "eager"]["losses"][:6])
    assert out["vars", "replica"]["stats"]["graph_calls"] == 3
    assert _same(out["mirrored", "eager"], out["mirrored", "gpe"])
    assert _same(out["printing", "eager"], out["printing", "gpe"])
    assert out["printing", "gpe"][1] == 12  # 6 calls x 2 replicas
    assert _same(out["map_fn", "eager"], out["map_fn", "gpe"])


def _script_runs():
    """SCRIPT plainly and under `gpe run --report`, side by side in a folder of their own."""
    with background.folder() as folder:
        with open(os.path.join(folder, "train.py"), "w") as f:
            f.write(textwrap.dedent(SCRIPT))
        return side_by_side(
            lambda: _run([sys.executable, "train.py"], folder),
            lambda: _run([sys.executable, "-m", "gpe.cli", "run", "--report", "train.py"],
                         folder))


def test_gpe_run_on_a_mirrored_script():
    plain, sliced = background.result(f"{__name__}.test_gpe_run_on_a_mirrored_script",
                                      _script_runs)
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert sliced.returncode == 0, sliced.stderr[-3000:]
    expected = [l for l in plain.stdout.splitlines() if l.startswith(("losses", "w "))]
    got = [l for l in sliced.stdout.splitlines() if l.startswith(("losses", "w "))]
    assert expected == got and len(expected) == 2
    report = sliced.stdout + sliced.stderr
    # after its 3 profile calls every call ran sliced, or eagerly only to be timed against
    # sliced ones (a 40 ms step is timed from its 6th sliced call: adaptive.py)
    found = re.search(r"dist_step: 16 calls, (\d+) sliced, (\d+) eager", report)
    assert found, report[-2000:]
    sliced_calls, eager_calls = map(int, found.groups())
    section = re.split(r"\n  \S", report[found.start():], maxsplit=1)[0]  # dist_step's lines
    timed = re.search(r"eager x(\d+): timed eagerly against sliced calls", section)
    assert eager_calls == 3 + (int(timed.group(1)) if timed else 0), report[-2000:]
    assert sliced_calls >= 6, report[-2000:]
