"""Data-parallel training under tf.distribute's MirroredStrategy over 2 logical CPU devices
(or MultiWorkerMirroredStrategy on 2 local worker processes, OneDeviceStrategy, the
default strategy), as the TF tutorials ("Custom training with tf.distribute.Strategy")
write it: batches from `strategy.experimental_distribute_dataset`, a per-replica step with
`tf.nn.compute_average_loss` and a Keras optimizer, and a distributed step that calls
`strategy.run(step, args=(batch,))` and `strategy.reduce`.

    python examples/distributed.py [--program vars|keras|subclassed|hostwork|modellosses]
                                   [--steps N]
                                   [--mode eager|tf.function|gpe|all] [--wrap dist|replica]
                                   [--strategy mirrored|multiworker|onedevice|default]
                                   [--json FILE] [--gpe-run]

Programs: `vars` (two variables, SGD), `keras` (a Sequential MLP, Adam), `subclassed` (a
subclassed keras.Model with its own distributed step method, SGD with momentum),
`hostwork` (a per-replica step with host work: a printed step counter, the loss read back
into a Python list), `modellosses` (the same with the tutorial's `compute_loss` helper and
its `if model_losses:` inside the tape's block).
`--mode` wraps the step (`--wrap dist`: the function that calls strategy.run; `replica`:
the per-replica step) with tf.function or gpe.function; `gpe run examples/distributed.py`
runs it unmodified; `--mode all` (or a comma-separated list) trains one program per mode
in one process, taking turns step by step, so that they are timed under the same load.
Prints the losses and final weights (and gpe's stats); `--json` writes them with the time
per step (median of the steps after the first 10, the graph waited for at each timing
point). `--strategy multiworker` launches 2 local workers (one process each, with its
TF_CONFIG on free ports; each a replica on its CPU), waits for them (bounded, killed past
it) and reports worker 0's result and whether the workers agree; with `--gpe-run` each
worker runs under `gpe run --report` (the script unmodified: run the launcher so too), and
each worker's report is kept in the result (`reports`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

REPLICAS = 2  # logical CPUs (MirroredStrategy) or local workers (MultiWorkerMirroredStrategy)
GLOBAL_BATCH, FEATURES, HIDDEN = 16, 8, 32
WARMUP = 10
MODES = ("eager", "tf.function", "gpe")


def logical_cpus(n: int = REPLICAS) -> list[str]:
    """Split the CPU into `n` logical devices (before TensorFlow initialises)."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * n)
    return [f"/cpu:{i}" for i in range(n)]


def make_strategy(kind: str):
    if kind == "multiworker":  # a worker: TF_CONFIG in its environment
        options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=120)
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    if kind == "onedevice":
        return tf.distribute.OneDeviceStrategy("/cpu:0")
    if kind == "default":  # no strategy: the default strategy's run and reduce
        return tf.distribute.get_strategy()
    return tf.distribute.MirroredStrategy(logical_cpus())


def dataset(strategy, steps: int):
    rng = np.random.RandomState(0)
    n = GLOBAL_BATCH * 8
    x = rng.normal(size=(n, FEATURES)).astype(np.float32)
    y = (x @ rng.normal(size=(FEATURES, 1)) + 0.1).astype(np.float32)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(GLOBAL_BATCH).take(steps)
    return strategy.experimental_distribute_dataset(ds)


class Vars:
    """Two variables and plain SGD."""

    def __init__(self, strategy):
        self.strategy = strategy
        with strategy.scope():
            self.w = tf.Variable(tf.fill([FEATURES, 1], 0.1))
            self.b = tf.Variable(tf.zeros([1]))
            self.opt = tf.keras.optimizers.SGD(0.05)

    def weights(self):
        return [self.w, self.b]

    def replica_step(self, batch):
        x, y = batch
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean(tf.square(tf.matmul(x, self.w) + self.b - y), axis=1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, [self.w, self.b])
        self.opt.apply_gradients(zip(grads, [self.w, self.b]))
        return loss

    def dist_step(self, batch):
        per_replica = self.strategy.run(self.replica_step, args=(batch,))
        return self.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


class KerasMLP(Vars):
    """A Sequential MLP and Adam."""

    def __init__(self, strategy):
        self.strategy = strategy
        tf.keras.utils.set_random_seed(1)
        with strategy.scope():
            self.model = tf.keras.Sequential([
                tf.keras.Input((FEATURES,)),
                tf.keras.layers.Dense(HIDDEN, activation="relu"),
                tf.keras.layers.Dense(HIDDEN, activation="relu"),
                tf.keras.layers.Dense(1)])
            self.opt = tf.keras.optimizers.Adam(1e-3)

    def weights(self):
        return self.model.weights

    def replica_step(self, batch):
        x, y = batch
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean(tf.square(self.model(x, training=True) - y), axis=1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss


class Net(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = tf.keras.layers.Dense(HIDDEN, activation="tanh")
        self.out = tf.keras.layers.Dense(1)

    def call(self, x, training=False):
        return self.out(self.hidden(x))


class Subclassed(KerasMLP):
    """A subclassed keras.Model, SGD with momentum, a Keras loss with reduction NONE."""

    def __init__(self, strategy):
        self.strategy = strategy
        tf.keras.utils.set_random_seed(2)
        with strategy.scope():
            self.model = Net()
            self.model.build((None, FEATURES))
            self.opt = tf.keras.optimizers.SGD(0.02, momentum=0.9)
            self.loss_fn = tf.keras.losses.MeanSquaredError(reduction="none")

    def replica_step(self, batch):
        x, y = batch
        with tf.GradientTape() as tape:
            per_example = self.loss_fn(y, self.model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss


class HostWork(KerasMLP):
    """A per-replica step with host work: a Python step counter printed, the per-replica
    loss read back (`.numpy()`) into a Python list. A regularised layer, SGD."""

    def __init__(self, strategy):
        self.strategy = strategy
        tf.keras.utils.set_random_seed(3)
        with strategy.scope():
            self.model = tf.keras.Sequential([
                tf.keras.Input((FEATURES,)),
                tf.keras.layers.Dense(HIDDEN, activation="relu",
                                      kernel_regularizer=tf.keras.regularizers.L2(1e-3)),
                tf.keras.layers.Dense(1)])
            self.opt = tf.keras.optimizers.SGD(0.01)
        self.counter, self.seen = [0], []

    def compute_loss(self, labels, predictions, model_losses):
        per_example = tf.reduce_mean(tf.square(predictions - labels), axis=1)
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        if model_losses:
            loss += tf.nn.scale_regularization_loss(tf.add_n(model_losses))
        return loss

    def replica_step(self, batch):
        x, y = batch
        self.counter[0] += 1
        print("replica step", self.counter[0])
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean(tf.square(self.model(x, training=True) - y), axis=1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        self.seen.append(loss.numpy().item())
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss


class ModelLosses(HostWork):
    """The tutorial's step as written: its `compute_loss` helper adds the regularisation
    losses `if model_losses:` (a Python list, `model.losses`), inside the tape's block."""

    def replica_step(self, batch):
        x, y = batch
        self.counter[0] += 1
        print("replica step", self.counter[0])
        with tf.GradientTape() as tape:
            loss = self.compute_loss(y, self.model(x, training=True), self.model.losses)
        self.seen.append(loss.numpy().item())
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss


PROGRAMS = {"vars": Vars, "keras": KerasMLP, "subclassed": Subclassed, "hostwork": HostWork,
            "modellosses": ModelLosses}


def wrap(program, mode: str, which: str):
    """Replace the program's step (`dist_step` or `replica_step`) by its wrapped version;
    returns it (None eagerly)."""
    if mode == "eager":
        return None
    name = "dist_step" if which == "dist" else "replica_step"
    if mode == "tf.function":
        wrapped = tf.function(getattr(program, name))
        setattr(program, name, wrapped)
        return wrapped
    import gpe  # a method, as `@gpe.function` on a method in the class body makes it
    cls = type(program)
    program.__class__ = type(cls.__name__, (cls,), {
        name: gpe.function(getattr(cls, name), adaptive=False)})
    return getattr(program, name)


def train(program, batches) -> tuple[list, list[float]]:
    """Run the steps; (losses, per-step times after the warm-up, each ending with the
    step's loss read back: the graph has finished that step)."""
    losses, times = [], []
    start = time.perf_counter()
    for i, batch in enumerate(batches):
        losses.append(program.dist_step(batch))
        if i >= WARMUP:
            float(losses[-1])
            now = time.perf_counter()
            times.append(now - start)
        start = time.perf_counter()
    return [float(v) for v in losses], times


def side_by_side(programs: dict, strategy, steps: int) -> dict:
    """Train every mode's program in turn, step by step (step i of each before step i+1
    of any, the order rotated at each step, the same on every worker), so that their times
    are taken under the same load: per mode, its losses and per-step times (after the
    warm-up, each ending with the loss read back), or the error that stopped it
    (tf.function fails on some)."""
    batches = {mode: iter(dataset(strategy, steps)) for mode in programs}
    runs = {mode: {"losses": [], "times": []} for mode in programs}
    order = list(programs)
    for i in range(steps):
        for mode in order[i % len(order):] + order[:i % len(order)]:  # no mode always first
            program, run = programs[mode], runs[mode]
            if "error" in run:
                continue
            try:
                start = time.perf_counter()
                run["losses"].append(program.dist_step(next(batches[mode])))
                if i >= WARMUP:
                    float(run["losses"][-1])
                    run["times"].append(time.perf_counter() - start)
            except Exception as exc:  # noqa: BLE001 - reported
                run["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return runs


def run_program(args) -> dict:
    """Train the program in this process (a worker of a multi-worker run included), in one
    mode, or (`--mode all`) in each mode side by side: {"modes": {mode: result}}."""
    strategy = make_strategy(args.strategy)
    modes = MODES if args.mode == "all" else tuple(args.mode.split(","))
    programs, wrapped = {}, {}
    for mode in modes:
        programs[mode] = PROGRAMS[args.program](strategy)
        wrapped[mode] = wrap(programs[mode], mode, args.wrap)
    runs = side_by_side(programs, strategy, args.steps)
    results = {}
    for mode in modes:
        run = runs[mode]
        result = results[mode] = {"program": args.program, "mode": mode, "wrap": args.wrap,
                                  "strategy": args.strategy}
        if "error" in run:
            result["error"] = run["error"]
        else:
            result.update(losses=[float(v) for v in run["losses"]],
                          ms=1e3 * statistics.median(run["times"]) if run["times"] else None,
                          ms_min=1e3 * min(run["times"]) if run["times"] else None,
                          weights=[v.numpy().tolist() for v in programs[mode].weights()])
        if hasattr(wrapped[mode], "stats"):
            stats = wrapped[mode].stats()
            result["stats"] = {k: stats[k] for k in (
                "calls", "graph_calls", "eager_calls", "profile_calls", "fallbacks",
                "guard_failures")}
    return results[modes[0]] if args.mode in MODES else {"modes": results}


def launch_workers(argv: list[str], timeout: float, gpe_run: bool = False) -> dict:
    """Run this script on REPLICAS local workers (TF_CONFIG each, free ports) to their end,
    bounded by `timeout` (then killed); worker 0's result with `agree` (every worker ended
    at the same losses and weights) and any worker's error."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from multiworker import free_ports

    cluster = {"worker": [f"localhost:{p}" for p in free_ports(REPLICAS)]}
    tmp = tempfile.mkdtemp(prefix="gpe-distributed-")
    procs, outs = [], []
    for i in range(REPLICAS):
        outs.append(os.path.join(tmp, f"worker{i}.json"))
        env = dict(os.environ, TF_CONFIG=json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": i}}))
        run = [sys.executable, "-m", "gpe.cli", "run", "--report"] if gpe_run else [
            sys.executable]
        procs.append(subprocess.Popen(
            [*run, os.path.abspath(__file__), *argv, "--json", outs[-1]],
            env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    deadline = time.monotonic() + timeout
    try:
        results = [wait_worker(proc, out, deadline) for proc, out in zip(procs, outs)]
    finally:  # none outlives the launcher (an error, a timeout: killed)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    reports = [r.pop("report", None) for r in results]
    if any("modes" not in r for r in results):  # one mode, or a worker failed
        return dict(combine(results), reports=reports)
    return {"modes": {mode: combine([r["modes"][mode] for r in results])
                      for mode in results[0]["modes"]}, "reports": reports}


def wait_worker(proc, out: str, deadline: float) -> dict:
    try:
        _, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return {"error": "worker did not end in time (killed)"}
    if proc.returncode != 0 or not os.path.exists(out):
        return {"error": f"worker exit {proc.returncode}: {err[-300:]}"}
    with open(out) as f:
        result = json.load(f)
    if "gpe report:" in err:  # (under gpe run --report)
        result["report"] = err[err.index("gpe report:"):]
    return result


def combine(results: list[dict]) -> dict:
    """Worker 0's result, any worker's error, and whether the workers agree."""
    result = dict(results[0], workers=len(results))
    errors = [r["error"] for r in results if "error" in r]
    if errors and "error" not in result:
        result["error"] = errors[0]
    result["agree"] = not errors and all(
        r["losses"] == results[0]["losses"] and r["weights"] == results[0]["weights"]
        for r in results)
    return result


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--program", choices=sorted(PROGRAMS), default="vars")
    parser.add_argument("--mode", default="eager", help="eager, tf.function, gpe, several "
                        "(comma-separated) or all: each in turn, step by step, one process")
    parser.add_argument("--wrap", choices=["dist", "replica"], default="dist")
    parser.add_argument("--strategy", default="mirrored",
                        choices=["mirrored", "multiworker", "onedevice", "default"])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--timeout", type=float, default=600,
                        help="multiworker: seconds the workers may take, then killed")
    parser.add_argument("--json")
    parser.add_argument("--gpe-run", action="store_true", help="multiworker: each worker "
                        "runs under `gpe run --report`")
    args = parser.parse_args(argv)
    if args.strategy == "multiworker" and "TF_CONFIG" not in os.environ:
        argv = [a for a in (sys.argv[1:] if argv is None else argv)]
        if "--json" in argv:
            del argv[argv.index("--json"):argv.index("--json") + 2]
        argv = [a for a in argv if a != "--gpe-run"]
        result = launch_workers(argv, args.timeout, args.gpe_run)
    else:
        result = run_program(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f)
    for mode, one in result.get("modes", {args.mode: result}).items():
        print(mode, "losses", [round(v, 6) for v in one.get("losses", [])])
        print(mode, "error" if "error" in one else "ms/step", one.get("error", one.get("ms")))
        for key in ("stats", "agree"):
            if key in one:
                print(mode, key, one[key])
    return result


if __name__ == "__main__":
    main()
