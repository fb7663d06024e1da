"""Per-replica steps with host work, in the style of the TF tutorial "Custom training with
tf.distribute.Strategy", decorated with `gpe.function` and called by plain
`strategy.run(step, args=...)` under MirroredStrategy over 2 logical CPUs (in a
subprocess: the logical devices are set before TensorFlow initialises); issue 16.

Three shapes: the tutorial's `compute_loss` helper with `if model_losses:` (a
condition on `model.losses` of a regularised model, fixed for the call), a `print` of a step
counter kept in a Python list, and a `.numpy()` read of the per-replica loss appended to
a host list before the optimizer's all-reduce. Eagerly, MirroredStrategy runs each
replica in a thread of its own, one at a time in replica order between `merge_call`s, so
each step prints replica 0's line, then replica 1's. Each check compares gpe with the same
program run eagerly: losses, final weights, printed output (in eager's order) and the
host lists.

gpe slices all three (host/distribution/replica_step.py for the second and third): the host part runs
once per replica in strategy.run's own replica threads, the TF part is one graph traced
under the strategy."""
import json

import pytest

import background

CHILD = '''
import contextlib, io, json
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import gpe

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
GLOBAL, STEPS = 8, 8
rng = np.random.RandomState(0)
x_all = rng.randn(GLOBAL * STEPS, 4).astype("float32")
y_all = rng.randint(0, 3, size=(GLOBAL * STEPS,)).astype("int64")


def program(kind):
    """The model, optimizer, host state and per-replica step of one shape (fresh)."""
    with strategy.scope():
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.Sequential([
            tf.keras.Input((4,)),
            tf.keras.layers.Dense(8, activation="relu",
                                  kernel_regularizer=tf.keras.regularizers.L2(0.01)),
            tf.keras.layers.Dense(3)])
        optimizer = tf.keras.optimizers.SGD(0.1)
        loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=tf.keras.losses.Reduction.NONE)
    counter, seen = [0], []

    def compute_loss(labels, predictions, model_losses):
        per_example_loss = loss_object(labels, predictions)
        loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL)
        if model_losses:
            loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
        return loss

    def listcond(x, y):
        with tf.GradientTape() as tape:
            predictions = model(x, training=True)
            loss = compute_loss(y, predictions, model.losses)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    def counted(x, y):
        counter[0] += 1
        print("replica step", counter[0])
        with tf.GradientTape() as tape:
            per_example_loss = loss_object(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    def readback(x, y):
        with tf.GradientTape() as tape:
            per_example_loss = loss_object(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL)
        seen.append(loss.numpy().item())
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    step = {"listcond": listcond, "counted": counted, "readback": readback}[kind]
    return model, step, counter, seen


def run(kind, mode):
    model, step, counter, seen = program(kind)
    if mode == "gpe":
        step = gpe.function(step)
    dist = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x_all, y_all)).batch(GLOBAL))
    losses, buf = [], io.StringIO()
    with contextlib.redirect_stdout(buf):
        for x, y in dist:
            per_replica = strategy.run(step, args=(x, y))
            losses.append(float(strategy.reduce("SUM", per_replica, axis=None)))
    result = {"losses": losses, "weights": [v.numpy().tolist() for v in model.weights],
              "printed": buf.getvalue(), "counter": counter[0], "seen": seen}
    if mode == "gpe":
        result["stats"] = step.stats()
    return result


def raising(mode):
    """A host exception in replica 0 between the loss and the all-reduce on two steps:
    eagerly, strategy.run raises it, replica 1 never runs that step and nothing is
    applied; the next steps go on."""
    with strategy.scope():
        v = tf.Variable(tf.ones([2]))
        opt = tf.keras.optimizers.SGD(0.1)
    count = [0]

    def step(x):
        count[0] += 1
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(v * x))
        print("step", count[0], loss.numpy())
        if count[0] in (11, 16):
            raise ValueError(f"bad step {count[0]}")
        opt.apply_gradients([(tape.gradient(loss, v), v)])
        print("after", v.numpy())
        return loss

    if mode == "gpe":
        step = gpe.function(step)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        for i in range(10):
            try:
                result = strategy.run(step, args=(tf.constant([1.0, 0.1 * i]),))
                print("ok", [float(t) for t in strategy.experimental_local_results(result)])
            except ValueError as exc:
                print("raised", exc, v.numpy())
    result = {"printed": buf.getvalue(), "v": v.numpy().tolist(), "count": count[0]}
    if mode == "gpe":
        result["stats"] = step.stats()
    return result


out = {f"{kind} {mode}": run(kind, mode) for kind in ("listcond", "counted", "readback")
       for mode in ("eager", "gpe")}
out.update({f"raising {mode}": raising(mode) for mode in ("eager", "gpe")})
print("RESULT", json.dumps(out))
'''

def _child():
    return background.run_script(CHILD, timeout=400)


def background_jobs():
    """The child the tests below assert on, started after collection (tests/background.py)."""
    return {"out": _child}


@pytest.fixture(scope="module")
def out():
    proc = background.result(f"{__name__}.out", _child)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.mark.timeout(420)
@pytest.mark.parametrize("kind", ["listcond", "counted", "readback"])
def test_per_replica_step_with_host_work_equals_eager(out, kind):
    eager, got = out[f"{kind} eager"], out[f"{kind} gpe"]
    for field in ("losses", "weights", "printed", "counter", "seen"):
        assert json.dumps(got[field]) == json.dumps(eager[field]), field
    assert len(set(eager["losses"])) == len(eager["losses"]) == 8  # never the same batch
    if kind == "counted":  # eager's order: replica 0's line, then replica 1's, each step
        assert eager["printed"].splitlines() == [f"replica step {i}" for i in range(1, 17)]
        assert eager["counter"] == 16
    if kind == "readback":  # one loss per replica and step, in replica order
        assert len(eager["seen"]) == 16


@pytest.mark.timeout(420)
@pytest.mark.parametrize("kind", ["listcond", "counted", "readback"])
def test_per_replica_step_with_host_work_slices(out, kind):
    """The host part runs once per replica (in strategy.run's replica threads, handing
    over at the all-reduce as eager's threads do), the TF part is one replicated graph:
    every call after the 3 profile calls runs sliced. (listcond's `if model_losses:` is a
    TF object's truthiness, fixed for the call: it ran eagerly, the helper's loss made on
    the host inside the tape, until the TF part took such an `if` as a fixed branch.)"""
    stats = out[f"{kind} gpe"]["stats"]
    assert stats["calls"] == 8 and stats["profile_calls"] == 3, stats
    assert stats["graph_calls"] == 5 and stats["eager_calls"] == 3, stats
    assert stats["fallbacks"] == {}
    if kind != "listcond":  # (listcond has no host work left: strategy.run's own path)
        assert stats["variants_built"] == ["per replica: x, y"]


@pytest.mark.timeout(420)
def test_host_exception_in_a_replica_as_eager(out):
    """Replica 0's host part raises before the all-reduce (a sliced call: the TF part's
    gate is cancelled, which fails that graph call before any update): strategy.run
    raises it as eagerly, replica 1's host part never runs that step, the variable is
    as eager left it, and the next calls run sliced again."""
    eager, got = out["raising eager"], out["raising gpe"]
    assert "raised bad step 11" in eager["printed"] and "raised bad step 16" in eager["printed"]
    assert got["printed"] == eager["printed"] and got["v"] == eager["v"]
    assert got["count"] == eager["count"] == 18
    stats = got["stats"]
    assert stats["calls"] == 10 and stats["graph_calls"] == 7 and stats["fallbacks"] == {}, stats


def test_only_the_replicated_cancel_is_taken_for_the_host_leaving():
    """A fence that is waiting when the sink fails because the host left a replicated call
    (a replica's host part raised: eagerly strategy.run raised it, nothing was applied)
    lets plain code go on; any other error in the graph is raised there as before. The
    race it fixes (a fence before or after the sink failed) made the raising program above
    fail 1 to 2 times in 4 under load."""
    import tensorflow as tf
    from gpe.host.runtime.graph_error import host_left_replicated_call
    from gpe.tfprog.replica_part import CANCELLED

    def failure(*roots):
        text = f"{len(roots)} root error(s) found.\n" + "\n".join(
            f"  ({i}) {status}:  {message}" for i, (status, message) in enumerate(roots))
        return tf.errors.InvalidArgumentError(None, None, text)
    ours = ("INVALID_ARGUMENT", f"assertion failed: [{CANCELLED}]")
    real = ("INVALID_ARGUMENT", "indices[2] = 12 is not in [0, 10)")
    assert host_left_replicated_call(failure(ours, ours))
    assert host_left_replicated_call(failure(ours, ("CANCELLED", "Function was cancelled")))
    assert not host_left_replicated_call(failure(ours, real))
    assert not host_left_replicated_call(failure(real))
    assert not host_left_replicated_call(None)
