"""The per-replica step decorated on its own (issue 16): `@gpe.function def step(...)`,
then plain `strategy.run(step, args=...)` in the loop, under MirroredStrategy over 2
logical CPU devices (in a subprocess: the logical devices are set before TensorFlow
initialises). As TensorFlow does for a tf.function given to strategy.run, the whole
replicated step is one sliced call (host/distribution/replicated.py): every replica's TF work and the
optimizer's all-reduce in its TF part. Each check compares with the same program run
eagerly (losses, final weights, printed output) and shows the work ran sliced."""
import json
import os
import re
import subprocess
import sys

import pytest

import background
from side_by_side import side_by_side

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "examples")

CHILD = """
import contextlib, io, json, sys
sys.path.insert(0, EXAMPLES)
import tensorflow as tf
import distributed as d
import gpe

strategy = tf.distribute.MirroredStrategy(d.logical_cpus())
out = {}

def run(name, mode, steps=16):
    program = d.PROGRAMS[name](strategy)
    wrapped = d.wrap(program, mode, "replica")  # dist_step stays plain: strategy.run(step)
    losses, _ = d.train(program, d.dataset(strategy, steps))
    result = {"losses": losses, "weights": [v.numpy().tolist() for v in program.weights()]}
    if wrapped is not None:
        result["stats"] = wrapped.stats()
        runs = wrapped._sliced.replicated
        result["tf_source"] = [r.last_plan.tf_source for r in runs if r.last_plan]
    return result

for name in ("keras", "vars"):
    for mode in ("eager", "gpe"):
        out[name, mode] = run(name, mode)

# OneDeviceStrategy and the default strategy (no strategy): both patterns decorated
def run_on(kind, name, mode, which, steps=12):
    s = d.make_strategy(kind)
    program = d.PROGRAMS[name](s)
    wrapped = d.wrap(program, mode, which)
    losses, _ = d.train(program, d.dataset(s, steps))
    result = {"losses": losses, "weights": [v.numpy().tolist() for v in program.weights()]}
    if wrapped is not None:
        result["stats"] = wrapped.stats()
    return result

for kind in ("onedevice", "default"):
    out[kind, "eager"] = run_on(kind, "keras", "eager", "dist")
    for which in ("dist", "replica"):
        out[kind, which] = run_on(kind, "keras", "gpe", which)

# a step with host work: a print per replica of its loss (read back) before the
# optimizer's merge_call, a Python counter, a print of the updated variable after it
with strategy.scope():
    v = tf.Variable(tf.ones([2]))
    opt = tf.keras.optimizers.SGD(0.1)
counter = []
def noisy(x):
    rid = tf.distribute.get_replica_context().replica_id_in_sync_group
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(v * x))
    print("replica", rid.numpy(), "loss", loss.numpy())
    counter.append(int(rid))
    opt.apply_gradients([(tape.gradient(loss, v), v)])
    print("replica", rid.numpy(), "after", v.numpy())
    return loss
def printed(step):
    v.assign(tf.ones([2]))
    counter.clear()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        losses = [float(strategy.reduce("SUM", strategy.run(step, args=(tf.constant(
            [1.0, 0.1 * i]),)), axis=None)) for i in range(6)]
    return buf.getvalue(), losses, v.numpy().tolist(), list(counter)
out["print", "eager"] = printed(noisy)
step = gpe.function(noisy)
out["print", "gpe"] = printed(step) + (step.stats(),)

# the guard: one step run by two strategies (2 replicas, 1 replica), with per-replica
# and plain arguments, and by keyword: a variant each, every result as eager's
one = tf.distribute.MirroredStrategy(["/cpu:0"])
def scale(x, k=2.0):
    return x * k + tf.reduce_sum(x)
def mixed(fn):
    per = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant([1.0, 2.0]) * float(ctx.replica_id_in_sync_group + 1))
    values = []
    for i in range(5):
        for s, args in ((strategy, (per,)), (one, (tf.constant([3.0, float(i)]),)),
                        (strategy, (tf.constant([float(i), 1.0]),))):
            values.append([t.numpy().tolist() for t in
                           s.experimental_local_results(s.run(fn, args=args))])
        values.append([t.numpy().tolist() for t in strategy.experimental_local_results(
            strategy.run(fn, args=(per,), kwargs={"k": tf.constant(float(i))}))])
    return values
out["guard", "eager"] = mixed(scale)
sliced_scale = gpe.function(scale)
out["guard", "gpe"] = (mixed(sliced_scale), sliced_scale.stats())
# an error in one replica's TF part: raised at the same call as eagerly (an assert with
# eager's message), the variables as eager left them, and the step usable afterwards
with strategy.scope():
    u = tf.Variable(tf.ones([2]))
def checked(x):
    u.assign_add(x)
    tf.debugging.assert_less(tf.reduce_sum(u), 20.0, message="too big")
    return tf.reduce_sum(u)
def logged(x):
    u.assign_add(x)
    tf.debugging.check_numerics(tf.math.log(20.0 - tf.reduce_sum(u)), "bad log")
    return tf.reduce_sum(u)
def failing(fn):
    u.assign(tf.ones([2]))
    seen = []
    try:
        for i in range(10):
            seen.append(float(strategy.reduce("SUM", strategy.run(fn, args=(tf.constant(
                [1.0, 1.0]),)), axis=None)))
    except tf.errors.InvalidArgumentError as exc:
        seen.append(str(exc))
    seen.append(u.numpy().tolist())
    u.assign(tf.ones([2]))
    seen.append(float(strategy.reduce("SUM", strategy.run(fn, args=(tf.ones([2]),)),
                                      axis=None)))
    return seen
for fn in (checked, logged):
    out["error", fn.__name__, "eager"] = failing(fn)
    sliced_fn = gpe.function(fn)
    out["error", fn.__name__, "gpe"] = failing(sliced_fn) + [sliced_fn.stats()]
print("RESULT", json.dumps([[list(k), v] for k, v in out.items()]))
"""


SCRIPT = """
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
GLOBAL = 8
with strategy.scope():
    w = tf.Variable(tf.fill([4, 1], 0.1))
    b = tf.Variable(tf.zeros([1]))
    opt = tf.keras.optimizers.SGD(0.1)
rng = np.random.RandomState(0)
x, y = rng.randn(64, 4).astype("float32"), rng.randn(64, 1).astype("float32")
dist = strategy.experimental_distribute_dataset(
    tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL))

def step(xb, yb):
    with tf.GradientTape() as tape:
        per = tf.reduce_mean(tf.square(tf.matmul(xb, w) + b - yb), axis=1)
        loss = tf.nn.compute_average_loss(per, global_batch_size=GLOBAL)
    opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
    return loss

losses = []
for epoch in range(3):
    for xb, yb in dist:
        per = strategy.run(step, args=(xb, yb))
        losses.append(float(strategy.reduce("SUM", per, axis=None)))
print("losses", [round(l, 6) for l in losses])
print("w", w.numpy().ravel().tolist(), b.numpy().tolist())
"""


def _same(a, b):
    return json.dumps(a) == json.dumps(b)


def _child():
    return background.run_script(f"EXAMPLES = {EXAMPLES!r}\n" + CHILD, timeout=400)


def background_jobs():
    """The child the tests below assert on, started after collection (tests/background.py)."""
    return {"out": _child,
            "test_gpe_run_slices_the_replica_step_of_an_unmodified_script": _script_runs}


@pytest.fixture(scope="module")
def out():
    proc = background.result(f"{__name__}.out", _child)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))
    return {tuple(k): v for k, v in json.loads(line[len("RESULT "):])}


@pytest.mark.timeout(420)
@pytest.mark.parametrize("name", ["keras", "vars"])
def test_replica_step_matches_eager_and_slices(out, name):
    eager, sliced = out[name, "eager"], out[name, "gpe"]
    assert _same(eager["losses"], sliced["losses"])
    assert _same(eager["weights"], sliced["weights"])
    assert len(set(eager["losses"])) == len(eager["losses"])  # never the same batch
    stats = sliced["stats"]
    steady = stats["calls"] - stats["profile_calls"]
    assert stats["calls"] == 16 and stats["graph_calls"] >= 0.9 * steady, stats
    assert stats["fallbacks"] == {}, stats
    # one TF part per strategy.run: every replica's step (the optimizer's all-reduce) in it
    assert len(sliced["tf_source"]) == 1 and ".run(" in sliced["tf_source"][0]


@pytest.mark.timeout(420)
@pytest.mark.parametrize("kind", ["onedevice", "default"])
@pytest.mark.parametrize("which", ["dist", "replica"])
def test_one_device_and_default_strategy_steps_slice(out, kind, which):
    """OneDeviceStrategy calls the step in its replica context (a sliced call there ran
    eagerly): strategy.run(sliced step) runs the replicated sliced call; the default
    strategy's run is a plain call. Both patterns equal eager and run sliced."""
    eager, sliced = out[kind, "eager"], out[kind, which]
    assert _same(eager["losses"], sliced["losses"])
    assert _same(eager["weights"], sliced["weights"])
    assert len(set(eager["losses"])) == len(eager["losses"])
    stats = sliced["stats"]
    assert stats["calls"] == 12 and stats["graph_calls"] == 12 - stats["profile_calls"], stats
    assert stats["profile_calls"] <= 3 and stats["fallbacks"] == {}, stats


@pytest.mark.timeout(420)
def test_replica_step_with_host_work_prints_per_replica_as_eager(out):
    """Eagerly, MirroredStrategy's replica threads take turns, in replica order, between
    merge_calls: each step prints replica 0's loss, replica 1's, then (after the
    optimizer's merge_call) replica 0's updated variable, replica 1's. A host part run
    once per replica beside one TF part would have to resume at each merge_call in that
    order; gpe runs such a step eagerly in the replica threads (with its reason), so the
    prints, the counter, the losses and the weights are eager's."""
    text, losses, weights, counter = out["print", "eager"]
    lines = [" ".join(line.split()[:3]) for line in text.splitlines()]
    assert lines[:4] == ["replica 0 loss", "replica 1 loss", "replica 0 after",
                         "replica 1 after"] and len(lines) == 24, text
    assert counter == [0, 1] * 6
    got = out["print", "gpe"]
    assert got[:4] == [text, losses, weights, counter]
    stats = got[4]  # its print would run once, when traced: eager in each replica
    assert stats["graph_calls"] == 0 and stats["eager_calls"] == 6, stats
    assert any("host work" in reason for reason in stats["fallbacks"]), stats


@pytest.mark.timeout(420)
def test_replicated_call_guarded_by_strategy_and_replicas(out):
    values, stats = out["guard", "gpe"]
    assert _same(values, out["guard", "eager"])
    assert stats["calls"] == 20 and stats["variants"] == 4, stats
    assert stats["graph_calls"] == 20 - stats["profile_calls"], stats


def _script_runs():
    """SCRIPT run plainly and under `gpe run --report`, side by side, in a folder of their
    own (in the background: tests/background.py)."""
    env = background.env(TF_CPP_MIN_LOG_LEVEL="3")
    with background.folder() as folder:
        with open(os.path.join(folder, "train.py"), "w") as f:
            f.write(SCRIPT)
        return side_by_side(
            lambda: subprocess.run([sys.executable, "train.py"], cwd=folder,
                                   capture_output=True, text=True, timeout=300, env=env),
            lambda: subprocess.run([sys.executable, "-m", "gpe.cli", "run", "--report",
                                    "train.py"], cwd=folder, capture_output=True, text=True,
                                   timeout=300,  # built after its profile calls:
                                   env=dict(env, GPE_PAYOFF="0")))


@pytest.mark.timeout(420)
def test_gpe_run_slices_the_replica_step_of_an_unmodified_script():
    plain, sliced = background.result(
        f"{__name__}.test_gpe_run_slices_the_replica_step_of_an_unmodified_script",
        _script_runs)
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert sliced.returncode == 0, sliced.stderr[-3000:]
    expected = [l for l in plain.stdout.splitlines() if l.startswith(("losses", "w "))]
    got = [l for l in sliced.stdout.splitlines() if l.startswith(("losses", "w "))]
    assert expected == got and len(expected) == 2
    # 24 strategy.run calls: 3 profiled eagerly, 3 timed eagerly (gpe run's adaptive
    # choice, adaptive.py), then one replicated sliced call each
    report = sliced.stdout + sliced.stderr
    found = re.search(r"step: (\d+) calls, (\d+) sliced", report)
    assert found and int(found[1]) == 24 and int(found[2]) >= 18, report[-2000:]


@pytest.mark.timeout(420)
def test_error_in_a_replica_raises_as_eager(out):
    eager, got = out["error", "checked", "eager"], out["error", "checked", "gpe"]
    assert got[:-1] == eager and "too big" in eager[-3]  # eager's assert message
    assert got[-1]["graph_calls"] >= 6, got[-1]
    eager, got = out["error", "logged", "eager"], out["error", "logged", "gpe"]
    stats, got = got[-1], got[:-1]
    assert got[:-3] == eager[:-3] and got[-2:] == eager[-2:]  # values, state, usable
    # the op's own text, from the replica that failed (not "0 derived errors ignored")
    assert got[-3] == "bad log : Tensor had Inf values [Op:CheckNumerics]", got[-3]
    assert stats["graph_calls"] >= 6, stats
