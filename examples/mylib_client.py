"""A program that uses mylib's precompiled functions (its bundle) and checks them against eager.

    gpe extract examples/mylib -o /tmp/mylib_bundle      # once, ahead of time
    python examples/mylib_client.py /tmp/mylib_bundle

(or extract to examples/mylib/gpe_bundle: then `import mylib.model` alone uses it).
The same steps run eagerly first (the functions' plain Python), the variables are reset,
and they run again from the bundle: losses, predictions, the variables and mylib's
history must be the same, and every call from the bundle runs in the graph. The same
for the methods of mylib's model class (`Regressor.__call__`, `Regressor.fit_step`), called
on a Regressor the client makes: the bundle's methods bind that object's variables.
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


def methods(model, steps: int = 20) -> bool:
    """A Regressor made here, trained eagerly (the methods' plain Python), reset, and
    trained by the bundle's methods: the same losses, predictions, variables and log."""
    regressor = model.Regressor()
    initial = [v.numpy() for v in regressor.variables]

    def train(fit_step, call):
        losses = [float(fit_step(*data(i), tf.constant(0.05))) for i in range(steps)]
        return losses, np.asarray(call(data(999)[0]))
    eager = train(lambda *a: model.Regressor.fit_step.fn(regressor, *a),
                  lambda x: model.Regressor.__call__.fn(regressor, x))
    eager_vars, eager_fits = [v.numpy() for v in regressor.variables], list(model.fits)
    for v, value in zip(regressor.variables, initial):
        v.assign(value)
    model.fits.clear()
    sliced = train(regressor.fit_step, regressor)
    return (eager[0] == sliced[0] and np.array_equal(eager[1], sliced[1])
            and all(np.array_equal(a, v.numpy()) for a, v in zip(eager_vars, regressor.variables))
            and [float(f) for f in eager_fits] == [float(f) for f in model.fits])


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
    same = same and methods(model)
    stats = lib.train_step.stats()
    print(f"loaded {len(lib)} functions in {loaded * 1e3:.0f} ms; loss {eager[0][0]:.4f} -> "
          f"{eager[0][-1]:.4f}")
    print(f"train_step: {stats['calls']} calls, {stats['graph_calls']} in the graph, "
          f"{stats['profile_calls']} profiled")
    fit = model.Regressor.fit_step.stats()
    print(f"Regressor.fit_step: {fit['calls']} calls, {fit['graph_calls']} in the graph, "
          f"{fit['profile_calls']} profiled")
    print(f"same as eager: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
