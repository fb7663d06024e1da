"""Data-parallel training on N local workers with MultiWorkerMirroredStrategy: one process
per worker, each with its TF_CONFIG (free localhost ports), as on real machines.

    python examples/multiworker.py --workers N [--steps S]
                                   [--mode eager|tf.function|gpe|gpe-run|both|M1,M2,...]
                                   [--die-at STEP] [--timeout SECONDS]
                                   [--wrap dist|replica] [--host-work] [--in-turn]

The launcher starts N workers, waits for them (bounded: `--timeout` plus start-up), and
checks that they agree (same final weights on every worker); `--mode both` trains eagerly
and with gpe and checks that gpe's losses and weights equal eager's (`eager,gpe,gpe-run`:
each mode after eager checked so; `gpe-run`: each worker runs this script unmodified, its
eager mode, under `gpe run --report`, and the report's count of the per-replica step's
calls and sliced calls is its stats). `--die-at K` kills
worker 1 at step K: the others must end with a clear error within the collective timeout
(never hang); the launcher then restarts all workers from the last checkpoint
(tf.train.CheckpointManager, every `--every` steps) and checks that they end at the
weights of an uninterrupted run. Each mode is a launch of its own (fresh processes), unless
`--in-turn`: each worker process then trains the modes in turn, from the same seeds, with
one strategy (one TensorFlow start per worker; gpe-run's workers stay processes of their
own, and --die-at's runs are launched per mode).

Each worker (`--worker`, TF_CONFIG in its environment) trains a Keras MLP with a custom
step: `dist_step` calls `strategy.run(replica_step, ...)` and `strategy.reduce`; under gpe
it is `gpe.function(dist_step)` (`gpe run examples/multiworker.py --worker ...` slices it
unmodified); with `--wrap replica`, `gpe.function(replica_step)` instead, called by plain
`strategy.run` (one replicated sliced call per step, host/distribution/replicated.py). The batches are
made per step and replica from a seed, so a restarted run sees the same data as an
uninterrupted one.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

FEATURES, HIDDEN, PER_REPLICA = 8, 16, 8


# the worker -------------------------------------------------------------------------
def worker(args) -> dict:
    """This worker's run of each mode of --mode, in turn, in this process (one strategy):
    {mode: its result}, also written to --out."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=args.timeout)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    results = {mode: train(strategy, mode, args) for mode in args.mode.split(",")}
    with open(args.out, "w") as f:
        json.dump(results, f)
    return results


def train(strategy, mode: str, args) -> dict:
    """Train the model from its seed in one mode; this worker's result."""
    import numpy as np
    import tensorflow as tf

    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    global_batch = PER_REPLICA * strategy.num_replicas_in_sync
    teacher = np.random.RandomState(7).normal(size=(FEATURES, 1)).astype(np.float32)
    with strategy.scope():
        tf.keras.utils.set_random_seed(0)
        model = tf.keras.Sequential([tf.keras.Input((FEATURES,)),
                                     tf.keras.layers.Dense(HIDDEN, activation="tanh"),
                                     tf.keras.layers.Dense(1)])
        opt = tf.keras.optimizers.SGD(0.05, momentum=0.5)
        step_var = tf.Variable(0, dtype=tf.int64, trainable=False)
    ckpt = tf.train.Checkpoint(model=model, opt=opt, step=step_var)
    # the chief writes the checkpoints; the others write theirs aside (MWMS saves on all)
    chief = f"{args.ckpt}-{mode}"
    directory = chief if index == 0 else os.path.join(chief, f"worker{index}")
    manager = tf.train.CheckpointManager(ckpt, directory, max_to_keep=2)
    if args.restore and tf.train.latest_checkpoint(chief):
        ckpt.restore(tf.train.latest_checkpoint(chief))

    def batch_for(step: int):
        def value_fn(context):
            rng = np.random.RandomState(1000 * step + context.replica_id_in_sync_group)
            x = rng.normal(size=(PER_REPLICA, FEATURES)).astype(np.float32)
            return tf.constant(x), tf.constant(x @ teacher)
        return strategy.experimental_distribute_values_from_function(value_fn)

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean(tf.square(model(x, training=True) - y), axis=1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    counter, seen = [0], []

    def host_work_step(x, y):  # --host-work: a printed counter, the loss read back
        counter[0] += 1
        print("replica step", counter[0])
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean(tf.square(model(x, training=True) - y), axis=1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        seen.append(loss.numpy().item())
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    if args.host_work:
        replica_step = host_work_step  # noqa: F811 (dist_step finds it as a free name)

    def dist_step(x, y):
        per_replica = strategy.run(replica_step, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    wrap = tf.function if mode == "tf.function" else None
    if mode == "gpe":
        import gpe
        wrap = lambda fn: gpe.function(fn, adaptive=False)  # noqa: E731
    if wrap is not None and args.wrap == "replica":
        replica_step = wrap(replica_step)  # dist_step finds it as a free name
    elif wrap is not None:
        dist_step = wrap(dist_step)
    wrapped = replica_step if args.wrap == "replica" else dist_step
    losses, times, printed = [], [], io.StringIO()
    for step in range(int(step_var.numpy()), args.steps):
        if step == args.die_at and index == 1:
            os._exit(3)  # a worker lost mid-training
        batch = batch_for(step)
        start = time.perf_counter()
        with contextlib.redirect_stdout(printed):
            losses.append(dist_step(*batch))
            float(losses[-1])  # timed to the step's end (the graph's too)
        times.append(time.perf_counter() - start)
        step_var.assign_add(1)
        if (step + 1) % args.every == 0:
            manager.save()
    result = {"index": index, "losses": [float(v) for v in losses],
              "weights": [v.numpy().tolist() for v in model.weights],
              "ms": 1e3 * sorted(times[4:] or times)[len(times[4:] or times) // 2],
              "printed": printed.getvalue(), "seen": seen}
    if hasattr(wrapped, "stats"):
        result["stats"] = {k: v for k, v in wrapped.stats().items()
                           if k in ("calls", "graph_calls", "eager_calls", "fallbacks")}
    return result


# the launcher -----------------------------------------------------------------------
def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def launch(n: int, modes: list[str], workdir: str, args, restore: bool = False,
           die_at: int = -1, tag: str = "") -> dict[str, list[dict]]:
    """Run `n` workers to their end, each training `modes` in turn (["gpe-run"]: its eager
    mode under `gpe run --report`): per mode, each worker's result, or {"error": ...} for
    one that failed (its exit status and the last line it wrote to stderr)."""
    ports = free_ports(n)
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    gpe_run, name = modes == ["gpe-run"], "-".join(modes) + tag
    procs = []
    for i in range(n):
        env = dict(os.environ, TF_CONFIG=json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": i}}))
        out = os.path.join(workdir, f"{name}-{i}.json")
        if os.path.exists(out):
            os.remove(out)
        run = [sys.executable, "-m", "gpe.cli", "run", "--report"] if gpe_run \
            else [sys.executable]
        cmd = run + [os.path.abspath(__file__), "--worker",
               "--mode", "eager" if gpe_run else ",".join(modes),
               "--steps", str(args.steps), "--every", str(args.every), "--out", out,
               "--ckpt", os.path.join(workdir, ("ckpt-gpe-run" if gpe_run else "ckpt") + tag),
               "--die-at", str(die_at), "--timeout", str(args.timeout), "--wrap", args.wrap]
        cmd += ["--host-work"] if args.host_work else []
        cmd += ["--restore"] if restore else []
        procs.append((subprocess.Popen(cmd, env=env, cwd=workdir, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True), out))
    results, deadline = {mode: [] for mode in modes}, time.monotonic() + args.timeout + 240
    for proc, out in procs:
        try:
            _, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            got = dict.fromkeys(modes, {"error": "did not end in time (killed)"})
        else:
            got = worker_results(proc.returncode, out, err, modes)
        for mode in modes:
            results[mode].append(got[mode])
    return results


def worker_results(status: int, out: str, err: str, modes: list[str]) -> dict[str, dict]:
    """A worker's result per mode, from the file it wrote (or its error)."""
    if status != 0:
        lines = [line for line in err.splitlines() if "Error" in line.split(":")[0]]
        return dict.fromkeys(modes, {"error": f"exit {status}: " + (lines[-1] if lines else "")})
    with open(out) as f:
        got = json.load(f)
    if modes == ["gpe-run"]:  # the step's calls, as `gpe run --report` counts them
        got = {"gpe-run": got["eager"]}
        found = re.search(r"replica_step: (\d+) calls, (\d+) sliced, (\d+) eager", err)
        got["gpe-run"]["stats"] = found and dict(zip(
            ("calls", "graph_calls", "eager_calls"), map(int, found.groups())))
    return got


def agree(results: list[dict]) -> bool:
    return all("error" not in r for r in results) and all(
        r["weights"] == results[0]["weights"] for r in results)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--every", type=int, default=4)
    parser.add_argument("--mode", default="both", help="eager, tf.function, gpe, gpe-run, "
                        "both (eager,gpe) or several, comma-separated (eager first)")
    parser.add_argument("--die-at", type=int, default=-1)
    parser.add_argument("--timeout", type=int, default=30)
    parser.add_argument("--wrap", choices=["dist", "replica"], default="dist")
    parser.add_argument("--host-work", action="store_true",
                        help="a per-replica step with host work: a printed step counter "
                        "and the loss read back (.numpy()) into a Python list")
    parser.add_argument("--in-turn", action="store_true",
                        help="each worker trains the modes in turn in one process (one "
                        "TensorFlow start per worker, not per mode; gpe-run's workers are "
                        "processes of their own); not with --die-at")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--restore", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--ckpt", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    return run_launcher(args)


def run_launcher(args) -> int:
    workdir = tempfile.mkdtemp(prefix="gpe-multiworker-")
    modes = ["eager", "gpe"] if args.mode == "both" else args.mode.split(",")
    in_turn = args.in_turn and args.die_at < 0
    launched = launch_in_turn(args, modes, workdir) if in_turn else {}
    runs, ok = {}, True
    for mode in modes:
        results = launched.get(mode) or launch(args.workers, [mode], workdir, args,
                                               die_at=args.die_at)[mode]
        if args.die_at >= 0:
            errors = [r.get("error", "no error") for r in results]
            print(f"{mode}: worker 1 killed at step {args.die_at}:", errors)
            ok &= all("error" in r for r in results)
            results = launch(args.workers, [mode], workdir, args, restore=True)[mode]
            print(f"{mode}: restarted from the last checkpoint")
        print(f"{mode}: workers agree: {agree(results)};",
              [r.get("error") or r.get("stats") for r in results],
              "ms/step (median, worker 0):", results[0].get("ms"))
        ok &= agree(results)
        runs[mode] = results
    if args.die_at >= 0 and ok:  # the same weights as an uninterrupted run
        whole = launch(args.workers, [modes[0]], workdir, args, tag="-whole")[modes[0]]
        same = agree(whole) and whole[0]["weights"] == runs[modes[0]][0]["weights"]
        print("restarted run ends at the uninterrupted run's weights:", same)
        ok &= same
    for mode in modes[1:] if modes[0] == "eager" and ok else ():
        same = equals_eager(mode, runs[mode], runs["eager"], args.die_at >= 0)
        ok &= same or mode == "tf.function"  # (told: it may differ by rounding)
    print("OK" if ok else "FAILED", "workdir", workdir)
    return 0 if ok else 1


def launch_in_turn(args, modes: list[str], workdir: str) -> dict[str, list[dict]]:
    """--in-turn: every mode but gpe-run in one launch (each worker trains them in turn,
    in one process), gpe-run in one of its own."""
    launched = {}
    if [mode for mode in modes if mode != "gpe-run"]:
        launched.update(launch(args.workers, [m for m in modes if m != "gpe-run"], workdir,
                               args))
    if "gpe-run" in modes:
        launched.update(launch(args.workers, ["gpe-run"], workdir, args))
    return launched


def equals_eager(mode: str, got: list[dict], eager: list[dict], restarted: bool) -> bool:
    """Prints and returns whether `mode`'s losses (but after a restart) and final weights,
    printed output and host list equal eager's on every worker."""
    same = got[0]["weights"] == eager[0]["weights"] and (
        restarted or got[0]["losses"] == eager[0]["losses"])
    print(f"{mode} equals eager (losses and final weights):", same)
    host = all(g["printed"] == e["printed"] and g["seen"] == e["seen"]
               for g, e in zip(got, eager))
    print(f"{mode}'s host work equals eager's on every worker (printed output, the "
          "losses read back):", host)
    return same and host


if __name__ == "__main__":
    sys.exit(main())
