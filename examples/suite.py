"""A suite of small imperative TF2 functions, for differential tests and benchmarks.

Each entry is `make(log) -> (fn, variables, calls)`: `fn` the function, `variables` the
tf.Variables it may change, `calls` the argument tuples to call it with. `log` collects
side effects. SEPARABLE lists the programs whose TF work gpe keeps entirely in the graph.

    python examples/suite.py          # speed of each program: eager vs gpe (median ratios)
"""
from __future__ import annotations

import math
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

RNG = np.random.default_rng(0)
X = tf.constant(RNG.normal(size=(8, 16)).astype(np.float32))
Y = tf.constant(RNG.normal(size=(8, 4)).astype(np.float32))
SEQ = tf.constant(RNG.normal(size=(8, 6, 16)).astype(np.float32))
PROGRAMS = {}
SEPARABLE = set()


def program(separable: bool):
    def register(make):
        PROGRAMS[make.__name__] = make
        if separable:
            SEPARABLE.add(make.__name__)
        return make
    return register


def weights(*shape, scale=0.1, seed=0):
    """A variable with the same values every time the program is made."""
    rng = np.random.default_rng([seed, *shape])
    return tf.Variable(rng.normal(scale=scale, size=shape).astype(np.float32))


def dense(x, w, b):
    return tf.nn.relu(tf.matmul(x, w) + b)


def mse(pred, y):
    d = pred - y
    return tf.reduce_mean(d * d)


# --- straight-line TF work -------------------------------------------------------------
@program(True)
def linear_forward(log):
    w = weights(16, 4)

    def f(x):
        return tf.matmul(x, w)
    return f, {"w": w}, [(X,)] * 6


@program(True)
def mlp_forward(log):
    w1, w2 = weights(16, 32), weights(32, 4)

    def f(x):
        h = tf.nn.relu(tf.matmul(x, w1))
        return tf.nn.softmax(tf.matmul(h, w2))
    return f, {"w1": w1, "w2": w2}, [(X,)] * 6


@program(True)
def sgd_step(log):
    w = weights(16, 4)

    def f(x, y):
        with tf.GradientTape() as tape:
            loss = mse(tf.matmul(x, w), y)
        w.assign_sub(0.1 * tape.gradient(loss, w))
        return loss
    return f, {"w": w}, [(X, Y)] * 6


@program(True)
def two_layer_training(log):
    w1, b1, w2 = weights(16, 32), tf.Variable(tf.zeros([32])), weights(32, 4)

    def f(x, y):
        with tf.GradientTape() as tape:
            loss = mse(tf.matmul(dense(x, w1, b1), w2), y)
        g1, gb, g2 = tape.gradient(loss, [w1, b1, w2])
        w1.assign_sub(0.05 * g1)
        b1.assign_sub(0.05 * gb)
        w2.assign_sub(0.05 * g2)
        return loss
    return f, {"w1": w1, "b1": b1, "w2": w2}, [(X, Y)] * 6


@program(True)
def training_with_history(log):
    w = weights(16, 4)

    def f(x, y):
        with tf.GradientTape() as tape:
            loss = mse(tf.matmul(x, w), y)
        w.assign_sub(0.1 * tape.gradient(loss, w))
        log.append(loss)
        return loss
    return f, {"w": w}, [(X, Y)] * 6


@program(True)
def float_loss_to_list(log):
    w = weights(16, 4)

    def f(x, y):
        loss = mse(tf.matmul(x, w), y)
        log.append(float(loss))
        return loss
    return f, {"w": w}, [(X, Y)] * 6


@program(True)
def print_every_call(log):
    def f(x):
        s = tf.reduce_sum(x * x)
        print(f"sum of squares {float(s):.4f}")
        return s
    return f, {}, [(X,)] * 6


@program(True)
def numpy_statistics(log):
    def f(x):
        m = tf.reduce_mean(x, axis=0)
        arr = m.numpy()
        log.append(float(np.std(arr)))
        return m * 2.0
    return f, {}, [(X,)] * 6


@program(True)
def host_value_fed_back(log):
    v = tf.Variable(tf.ones([16]))

    def f(x):
        loss = tf.reduce_sum(tf.square(x)) + tf.reduce_sum(v)
        scale = 1.0 / (1.0 + float(loss))
        v.assign(v * scale + 0.5)
        return v.read_value()
    return f, {"v": v}, [(X,)] * 6


@program(True)
def numpy_sort_back_to_tf(log):
    def f(x):
        a = tf.reduce_sum(x, axis=1).numpy()
        order = np.argsort(a).astype(np.int32)
        return tf.gather(x, tf.constant(order))
    return f, {}, [(X,)] * 6


@program(True)
def variable_counter(log):
    v = tf.Variable(0.0)

    def f(x):
        v.assign_add(tf.reduce_sum(x))
        log.append(v.numpy())
        return v.read_value()
    return f, {"v": v}, [(X,)] * 6


@program(True)
def python_float_hyperparameter(log):
    w = weights(16, 4)

    def f(x, y, lr):
        with tf.GradientTape() as tape:
            loss = mse(tf.matmul(x, w), y)
        w.assign_sub(lr * tape.gradient(loss, w))
        return loss
    return f, {"w": w}, [(X, Y, 0.1), (X, Y, 0.05), (X, Y, 0.01), (X, Y, 0.1), (X, Y, 0.2)]


@program(True)
def split_and_concat(log):
    def f(x):
        a, b = tf.split(x, 2, axis=1)
        return tf.concat([b, a * 2.0], axis=1)
    return f, {}, [(X,)] * 6


@program(True)
def keyword_defaults(log):
    def f(x, scale=2.0, *, shift=1.0):
        return x * scale + shift
    return f, {}, [(X,), (X, 3.0), (X,), (X, 0.5), (X,)]


@program(True)
def tuple_argument(log):
    def f(pair):
        a, b = pair
        return tf.reduce_sum(a * b)
    return f, {}, [((X, X + 1.0),)] * 6


@program(True)
def star_args(log):
    def f(*tensors):
        return tf.add_n(list(tensors))
    return f, {}, [(X, X, X)] * 6


@program(True)
def global_python_value(log):
    def f(x):
        return x * SCALE
    return f, {}, [(X,)] * 6


SCALE = 1.5


@program(True)
def assign_then_read(log):
    v = tf.Variable(tf.zeros([8, 16]))

    def f(x):
        v.assign(x)
        y = v * 2.0
        v.assign_sub(y * 0.25)
        return v.read_value() + y
    return f, {"v": v}, [(X,)] * 6


@program(True)
def pure_callee(log):
    w, b = weights(16, 4), tf.Variable(tf.zeros([4]))

    def f(x, y):
        return mse(dense(x, w, b), y)
    return f, {"w": w, "b": b}, [(X, Y)] * 6


@program(True)
def float64_math(log):
    def f(x):
        d = tf.cast(x, tf.float64)
        return tf.reduce_sum(tf.exp(-d * d) / 3.0)
    return f, {}, [(X,)] * 6


@program(True)
def integer_arithmetic(log):
    def f(x):
        k = tf.cast(tf.abs(x) * 10.0, tf.int32)
        return tf.reduce_sum(k // 3 + k % 3)
    return f, {}, [(X,)] * 6


@program(True)
def argmax_and_one_hot(log):
    def f(x):
        labels = tf.argmax(x, axis=1)
        return tf.reduce_sum(tf.one_hot(labels, 16) * x)
    return f, {}, [(X,)] * 6


# --- control flow ----------------------------------------------------------------------
@program(True)
def unrolled_rnn(log):
    w, u = weights(16, 16), weights(16, 16, seed=1)

    def f(seq, steps):
        h = tf.zeros([8, 16])
        for t in range(steps):
            h = tf.tanh(tf.matmul(seq[:, t], w) + tf.matmul(h, u))
        return tf.reduce_sum(h)
    return f, {"w": w, "u": u}, [(SEQ, 6)] * 6


@program(True)
def training_flag(log):
    w = weights(16, 4)

    def f(x, training):
        h = tf.matmul(x, w)
        if training:
            h = h * 0.5
        return tf.reduce_sum(h)
    return f, {"w": w}, [(X, True)] * 3 + [(X, False)] * 3


@program(True)
def host_if_around_tf(log):
    w = weights(16, 4)

    def f(x, step):
        loss = tf.reduce_sum(tf.matmul(x, w))
        if step % 2 == 0:
            log.append(float(loss))
        w.assign_sub(0.01 * tf.ones([16, 4]))
        return loss
    return f, {"w": w}, [(X, 0.0), (X, 1.0), (X, 2.0), (X, 3.0), (X, 4.0)]


@program(True)
def raise_on_large_loss(log):
    v = tf.Variable(1.0)

    def f(x):
        loss = tf.reduce_mean(x * x) * v
        if loss.numpy() > 3.0:
            raise FloatingPointError("loss too large")
        v.assign(v * 1.5)
        return loss
    return f, {"v": v}, [(X,)] * 6


@program(True)
def early_return(log):
    v = tf.Variable(0.0)

    def f(x, skip):
        total = tf.reduce_sum(x)
        if skip:
            return total
        v.assign_add(total)
        return v.read_value()
    return f, {"v": v}, [(X, False), (X, True)] * 3


@program(True)
def try_except_on_host(log):
    def f(x, d):
        s = tf.reduce_sum(x)
        try:
            r = float(s) / d
        except ZeroDivisionError:
            r = 0.0
        return s * 2.0 + r
    return f, {}, [(X, 2.0), (X, 0.0)] * 3


@program(True)
def host_loop_of_python(log):
    def f(x, n):
        total = 0.0
        for i in range(int(n)):
            total += math.sqrt(i)
        return x * total
    return f, {}, [(X, 4.0), (X, 5.0)] * 3


@program(True)
def while_on_host_counter(log):
    def f(x):
        k = 0
        while k < 3:
            k += 1
            log.append(k)
        return tf.reduce_sum(x) * k
    return f, {}, [(X,)] * 6


@program(True)
def error_from_graph(log):
    def f(x, i):
        return tf.gather(x, i) * 2.0
    return f, {}, [(X, tf.constant(1)), (X, tf.constant(2)), (X, tf.constant(99)),
                   (X, tf.constant(0))]


# --- objects and Keras -----------------------------------------------------------------
class Model:
    def __init__(self):
        self.w = weights(16, 4)
        self.lr = 0.1
        self.steps = 0

    def step(self, x, y):
        with tf.GradientTape() as tape:
            loss = mse(tf.matmul(x, self.w), y)
        self.w.assign_sub(self.lr * tape.gradient(loss, self.w))
        self.steps += 1
        return loss


@program(True)
def method_on_object(log):
    model = Model()
    return Model.step, {"w": model.w}, [(model, X, Y)] * 6


@program(True)
def keras_training(log):
    import keras
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(4)])
    model(X)
    opt = keras.optimizers.Adam(0.01)

    def f(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return f, {f"w{i}": v for i, v in enumerate(model.weights)}, [(X, Y)] * 6


@program(True)
def keras_inference(log):
    import keras
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.layers.Dense(8, activation="tanh"),
                              keras.layers.Dense(2)])
    model(X)

    def f(x):
        return tf.argmax(model(x), axis=1)
    return f, {}, [(X,)] * 6


# --- TF work the host still runs (inside control flow decided at run time) --------------
@program(True)
def loop_over_list_of_tensors(log):
    def f(parts):
        total = tf.zeros([8, 16])
        for p in parts:
            total = total + p * 2.0
        return total
    return f, {}, [([X, X, X],)] * 6


@program(True)
def while_on_tensor(log):
    def f(x):
        s = tf.reduce_sum(tf.abs(x))
        while s > 1.0:
            s = s / 2.0
        return s
    return f, {}, [(X,)] * 6


@program(True)
def loop_over_float_count(log):
    w = weights(16, 16)

    def f(x, n):
        h = x
        for _ in range(int(n)):
            h = tf.tanh(tf.matmul(h, w))
        return tf.reduce_sum(h)
    return f, {"w": w}, [(X, 3.0)] * 6


@program(True)
def data_dependent_branch(log):
    def f(x):
        m = tf.reduce_mean(x)
        if m > 0:
            y = x * 2.0
        else:
            y = x - 1.0
        return tf.reduce_sum(y)
    return f, {}, [(X,), (-X,)] * 3


@program(False)
def callee_with_host_work(log):
    def noisy(t):
        log.append("called")
        return t * t

    def f(x):
        return tf.reduce_sum(noisy(x))
    return f, {}, [(X,)] * 6


@program(False)
def recursion_over_tree(log):
    w = weights(16, 16)
    tree = ((0, 1), (2, (3, 4)))

    def encode(node, leaves):
        if isinstance(node, int):
            return leaves[node]
        left = encode(node[0], leaves)
        right = encode(node[1], leaves)
        return tf.tanh(tf.matmul(left + right, w))

    def f(x):
        leaves = [x[i:i + 1] for i in range(5)]
        return tf.reduce_sum(encode(tree, leaves))
    return f, {"w": w}, [(X,)] * 6


@program(True)
def list_comprehension_of_tf(log):
    def f(x):
        parts = [tf.reduce_sum(x[i]) for i in range(4)]
        return tf.add_n(parts)
    return f, {}, [(X,)] * 6


@program(False)
def generator_function(log):
    def f(x):
        yield x * 2.0
    return f, {}, [(X,)] * 3


# --- timing ----------------------------------------------------------------------------
def _materialise(value):
    if isinstance(value, (list, tuple)):
        return [_materialise(v) for v in value]
    if hasattr(value, "numpy") or hasattr(value, "_gpe_pending"):
        return np.asarray(value)
    if hasattr(value, "__next__"):
        return list(value)
    return value


WARMUP = 40  # past gpe's profile call and its comparison with eager (2 + 16 + 16 calls)


def time_program(name: str, calls: int = 100, repeats: int = 7) -> tuple[float, float]:
    """Median seconds per call, eagerly and under gpe (after warm-up, incl. final wait).

    Each side has its own fresh state; their runs alternate (eager, gpe, eager, ...) so
    that the machine's drift hits both alike. The warm-up covers gpe's profile calls,
    building, and its timing of the first sliced calls against eager (after which a
    function faster eagerly runs eagerly)."""
    import gpe
    targets = []
    for sliced in (False, True):
        fn, _, args_list = PROGRAMS[name]([])
        targets.append((gpe.function(fn) if sliced else fn, args_list[0]))
    times: list[list[float]] = [[], []]
    try:
        for target, args in targets:
            for _ in range(WARMUP):
                _materialise(target(*args))
        for _ in range(repeats):
            for side, (target, args) in enumerate(targets):
                start = time.perf_counter()
                out = [target(*args) for _ in range(calls)]
                _materialise(out[-1])
                times[side].append((time.perf_counter() - start) / calls)
    except Exception:  # a program whose calls raise (error_from_graph)
        return float("nan"), float("nan")
    return statistics.median(times[0]), statistics.median(times[1])


def main() -> int:
    import contextlib
    import io
    import warnings
    warnings.simplefilter("ignore")
    print(f"{'program':<30} {'eager us':>9} {'gpe us':>9} {'ratio':>6}")
    ratios = []
    for name in PROGRAMS:
        if name == "error_from_graph":
            continue
        with contextlib.redirect_stdout(io.StringIO()):  # the programs' own prints
            eager, sliced = time_program(name)
        ratio = eager / sliced
        ratios.append(ratio)
        mark = "" if name in SEPARABLE else "  (TF work partly on the host)"
        print(f"{name:<30} {eager * 1e6:9.1f} {sliced * 1e6:9.1f} {ratio:6.2f}{mark}")
    print(f"median ratio {statistics.median(ratios):.2f}, min {min(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
