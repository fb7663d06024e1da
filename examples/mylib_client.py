"""A program that uses mylib's precompiled functions (its bundle) and checks them against eager.

    gpe extract examples/mylib -o /tmp/mylib_bundle      # once, ahead of time
    python examples/mylib_client.py /tmp/mylib_bundle

(or extract to examples/mylib/gpe_bundle: then `import mylib.model` alone uses it).
The same steps run eagerly first (the functions' plain Python), the variables are reset,
and they run again from the bundle: losses, predictions, the variables and mylib's
history must be the same, and every call from the bundle runs in the graph.
"""
import os
import sys
import time

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # finds `mylib`

import gpe  # noqa: E402


def data(step):
    x = tf.random.stateless_normal([32, 8], seed=[step, 0])
    return x, tf.reduce_sum(x[:, :3], axis=1, keepdims=True)


def run(train_step, predict, normalise, steps):
    losses = [train_step(*data(i), tf.constant(0.05)) for i in range(steps)]
    x, _ = data(999)
    return ([float(v) for v in losses], np.asarray(predict(x)), np.asarray(normalise(x)))


def main(bundle: str, steps: int = 50) -> int:
    start = time.perf_counter()
    lib = gpe.load(bundle)
    loaded = time.perf_counter() - start
    from mylib import model
    variables = [model.W1, model.B1, model.head.w, model.head.b]
    initial = [v.numpy() for v in variables]

    eager = run(model.train_step.fn, model.predict.fn, model.normalise, steps)
    eager_vars, eager_history = [v.numpy() for v in variables], [float(h) for h in model.history]
    for v, value in zip(variables, initial):
        v.assign(value)
    model.history.clear()

    sliced = run(lib.train_step, lib.predict, lib.normalise, steps)
    same = (eager[0] == sliced[0] and np.array_equal(eager[1], sliced[1])
            and np.array_equal(eager[2], sliced[2])
            and all(np.array_equal(a, v.numpy()) for a, v in zip(eager_vars, variables))
            and eager_history == [float(h) for h in model.history])
    stats = lib.train_step.stats()
    print(f"loaded {len(lib)} functions in {loaded * 1e3:.0f} ms; loss {eager[0][0]:.4f} -> "
          f"{eager[0][-1]:.4f}")
    print(f"train_step: {stats['calls']} calls, {stats['graph_calls']} in the graph, "
          f"{stats['profile_calls']} profiled")
    print(f"same as eager: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
