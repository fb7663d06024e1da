"""Legacy stateful random ops under a global seed: sliced calls draw eager's numbers.

Each program sets the global seed in its factory, so the eager run and the gpe run start
from the same seed stream; `check` compares results and variables and counts the sliced
calls (falling back to eager would always match).
"""
from __future__ import annotations

import itertools
import math

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops import gen_random_ops as stateful
from tensorflow.python.ops import gen_stateless_random_ops_v2 as stateless

import background
import gpe
from gpe.tfprog import randomness
from harness import check

pytestmark = pytest.mark.timeout(240)


_SEED2 = itertools.count(2**31 - 9, -1)


def _seeds():
    """Distinct (seed, seed2) pairs in this process: a pair used before would reuse eager's
    cached kernel, which continues its stream."""
    seeds = itertools.cycle([1, 87654321, 5])
    return lambda: (next(seeds), next(_SEED2))


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64, tf.half])
def test_stateless_twins_draw_the_stateful_kernels_numbers(dtype):
    """The replacement is bit-exact: a fresh stateful kernel with seeds (s, s2) equals the
    V2 stateless op with key [s] and counter [0, s2] (Philox), for every op replaced."""
    pair = _seeds()
    for shape in ([3], [2, 5], [0], [], [40, 700]):
        shape = tf.constant(shape, tf.int32)
        for op, twin in ((stateful.random_standard_normal, randomness._twin_normal),
                         (stateful.random_uniform, randomness._twin_uniform),
                         (stateful.truncated_normal, randomness._twin_truncated)):
            s, s2 = pair()
            key, counter = tf.constant([s], tf.uint64), tf.constant([0, s2], tf.uint64)
            want = op(shape, dtype, seed=s, seed2=s2)
            got = twin({"shape": shape, "dtype": dtype, "name": None}, key, counter)
            assert want.numpy().tobytes() == got.numpy().tobytes(), (op.__name__, shape)
        s, s2 = pair()
        key, counter = tf.constant([s], tf.uint64), tf.constant([0, s2], tf.uint64)
        alpha = tf.constant([[0.5], [2.0]], dtype)
        want = stateful.random_gamma(tf.constant([6]), alpha, seed=s, seed2=s2)
        got = randomness._twin_gamma({"shape": tf.constant([6]), "alpha": alpha,
                                      "name": None}, key, counter)
        assert want.numpy().tobytes() == got.numpy().tobytes()
    for int_dtype in (tf.int32, tf.int64):
        s, s2 = pair()
        key, counter = tf.constant([s], tf.uint64), tf.constant([0, s2], tf.uint64)
        lo, hi = tf.constant(-3, int_dtype), tf.constant(1000, int_dtype)
        want = stateful.random_uniform_int([4, 9], lo, hi, seed=s, seed2=s2)
        got = stateless.stateless_random_uniform_int_v2([4, 9], key, counter, 1, lo, hi)
        assert np.array_equal(want.numpy(), got.numpy())
    s, s2 = pair()
    key, counter = tf.constant([s], tf.uint64), tf.constant([0, s2], tf.uint64)
    value = tf.reshape(tf.range(60), [12, 5])
    assert np.array_equal(stateful.random_shuffle(value, seed=s, seed2=s2).numpy(),
                          stateless.stateless_shuffle(value, key, counter, 1).numpy())


@pytest.mark.parametrize("seed", [3, 0, 2**31 - 1, 2**40 + 5])
def test_host_draws_are_get_seeds_draws(seed):
    from tensorflow.python.framework import random_seed
    tf.random.set_seed(seed)
    drawn = randomness.draw(40)
    tf.random.set_seed(seed)
    eager = [random_seed.get_seed(None) for _ in range(40)]
    assert [(int(r[0]), int(r[2])) for r in drawn] == eager
    assert not drawn[:, 1].any()


def test_seeded_random_ops_in_a_step():
    def make(log):
        tf.random.set_seed(1)
        v = tf.Variable(tf.zeros([3]))
        counts = tf.Variable(tf.zeros([5], tf.int32))

        def step(x):
            noise = tf.random.normal([3])
            u = tf.random.uniform([3], minval=-1.0, maxval=2.0)
            t = tf.random.truncated_normal([3], stddev=0.5, dtype=tf.float64)
            k = tf.random.uniform([4], maxval=5, dtype=tf.int32)
            order = tf.random.shuffle(tf.range(5))
            v.assign_add(noise * x + u + tf.cast(t, tf.float32))
            counts.assign_add(tf.math.bincount(k, minlength=5, maxlength=5) + order)
            return tf.reduce_sum(v)
        return step, {"v": v, "counts": counts}
    check(make, [(tf.constant(float(i)),) for i in range(6)])


def test_eager_random_ops_between_sliced_calls_continue_the_same_stream():
    """The host's draws advance the seed stream as eager's ops do: eager random ops run
    between calls (outside the function) see the same numbers in both runs."""
    def program(sliced):
        tf.random.set_seed(7)
        v = tf.Variable(tf.zeros([2]))

        def step(x):
            v.assign_add(tf.random.normal([2]) * x)
            return v + tf.random.uniform([2])
        fn = gpe.function(step, profile_calls=1) if sliced else step
        seen = []
        for i in range(5):
            seen.append(fn(tf.constant(1.0 + i)).numpy())
            seen.append(tf.random.normal([2]).numpy())
        return seen, v.numpy(), fn
    eager, eager_v, _ = program(False)
    under, under_v, fn = program(True)
    assert all(np.array_equal(a, b) for a, b in zip(eager, under))
    assert np.array_equal(eager_v, under_v)
    assert fn.stats()["graph_calls"] == 4


class _Vae:
    def __init__(self):
        self.w = tf.Variable([[0.5, -0.2], [0.1, 0.3]])

    def reparameterize(self, mean, logvar):
        eps = tf.random.normal(shape=tf.shape(mean))
        return eps * tf.exp(logvar * 0.5) + mean


def test_vae_reparameterisation_in_a_user_method_inside_a_tape():
    def make(log):
        tf.random.set_seed(2)
        model = _Vae()
        grads = tf.Variable(tf.zeros([2, 2]))

        def step(x):
            with tf.GradientTape() as tape:
                h = tf.matmul(x, model.w)
                z = model.reparameterize(h, h * 0.1)
                z2 = model.reparameterize(h, -h)  # a second call site draws anew
                loss = tf.reduce_mean(z * z + z2)
            g = tape.gradient(loss, model.w)
            grads.assign(g)
            model.w.assign_sub(0.1 * g)
            return loss
        return step, {"w": model.w, "grads": grads}
    check(make, [(tf.constant([[1.0, 2.0], [0.5, -1.0]]),) for _ in range(5)])


def test_dropout_in_a_tf_core_mlp_training_step():
    def make(log):
        tf.random.set_seed(4)
        w1 = tf.Variable(tf.reshape(tf.range(12, dtype=tf.float32), [4, 3]) / 10.0)
        w2 = tf.Variable(tf.ones([3, 2]) / 3.0)

        def train_step(x, y):
            with tf.GradientTape() as tape:
                h = tf.nn.relu(tf.matmul(x, w1))
                h = tf.nn.dropout(h, rate=0.5)
                logits = tf.matmul(h, w2)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=y, logits=logits))
            g1, g2 = tape.gradient(loss, [w1, w2])
            w1.assign_sub(0.1 * g1)
            w2.assign_sub(0.1 * g2)
            return loss
        return train_step, {"w1": w1, "w2": w2}
    x = tf.constant(np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4))
    y = tf.constant([0, 1, 1, 0, 1])
    check(make, [(x, y) for _ in range(6)])


def test_dcgan_style_step_with_keras_models_and_two_tapes():
    keras = tf.keras

    def make(log):
        keras.utils.set_random_seed(1)
        generator = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8),
                                      keras.layers.LeakyReLU(), keras.layers.Dense(6)])
        discriminator = keras.Sequential([keras.Input((6,)), keras.layers.Dense(5),
                                          keras.layers.LeakyReLU(), keras.layers.Dropout(0.3),
                                          keras.layers.Dense(1)])
        loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)
        g_opt, d_opt = keras.optimizers.Adam(1e-3), keras.optimizers.Adam(1e-3)

        def train_step(images):
            noise = tf.random.normal([3, 4])
            with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
                fake = generator(noise, training=True)
                real_out = discriminator(images, training=True)
                fake_out = discriminator(fake, training=True)
                gen_loss = loss_fn(tf.ones_like(fake_out), fake_out)
                disc_loss = (loss_fn(tf.ones_like(real_out), real_out)
                             + loss_fn(tf.zeros_like(fake_out), fake_out))
            g_grads = gen_tape.gradient(gen_loss, generator.trainable_variables)
            d_grads = disc_tape.gradient(disc_loss, discriminator.trainable_variables)
            g_opt.apply_gradients(zip(g_grads, generator.trainable_variables))
            d_opt.apply_gradients(zip(d_grads, discriminator.trainable_variables))
            return gen_loss, disc_loss
        variables = {f"g{i}": v for i, v in enumerate(generator.variables)}
        variables.update({f"d{i}": v for i, v in enumerate(discriminator.variables)})
        return train_step, variables
    images = tf.constant(np.linspace(-1, 1, 18, dtype=np.float32).reshape(3, 6))
    check(make, [(images,) for _ in range(5)])


def _refused(under, text: str) -> None:
    reasons = " | ".join(under.target.stats()["fallbacks"])
    assert text in reasons, reasons


def test_explicit_op_seed_runs_eagerly_and_matches():
    def make(log):
        tf.random.set_seed(1)
        v = tf.Variable(tf.zeros([3]))

        def step(x):
            v.assign_add(tf.random.normal([3], seed=5) * x)  # one stream across calls
            return tf.reduce_sum(v)
        return step, {"v": v}
    under = check(make, [(tf.constant(1.0),) for _ in range(5)], graph_calls=0)
    _refused(under, "test_random.py:")
    _refused(under, "explicit seed")


def test_random_op_in_a_tensor_dependent_branch_runs_eagerly_and_matches():
    def make(log):
        tf.random.set_seed(1)
        v = tf.Variable(tf.zeros([3]))

        def step(x):
            if tf.reduce_sum(v) >= 0.0:
                v.assign_add(tf.random.uniform([3]) * x)
            else:
                v.assign_add(tf.ones([3]))
            return tf.reduce_sum(v)
        return step, {"v": v}
    under = check(make, [(tf.constant(float(i % 3) - 0.5),) for i in range(6)],
                  graph_calls=0)
    _refused(under, "test_random.py:")
    _refused(under, "inside a tf.cond branch")


def test_user_call_on_the_host_before_a_random_op_runs_eagerly_and_matches():
    """A host call before the last random op could draw from the seed stream (here a
    helper's eager random op, in between the step's two) or raise."""
    def make(log):
        tf.random.set_seed(1)
        v = tf.Variable(tf.zeros([2]))

        def helper(x):
            log.append(float(tf.random.uniform([])))
            return x

        def step(x):
            a = tf.random.normal([2])
            helper(len(log))
            v.assign_add(a + tf.random.normal([2]) * x)
            return tf.reduce_sum(v)
        return step, {"v": v}
    under = check(make, [(tf.constant(1.0),) for _ in range(4)], graph_calls=0)
    _refused(under, "test_random.py:")


def test_host_statement_before_a_random_op_is_refused():
    def make(log):
        tf.random.set_seed(1)
        v = tf.Variable(tf.zeros([2]))

        def step(x, n):
            m = math.floor(n / 2)
            v.assign_add(tf.random.normal([2]) * x)
            return tf.reduce_sum(v), m
        return step, {"v": v}
    under = check(make, [(tf.constant(1.0), i) for i in range(4)], graph_calls=0)
    _refused(under, "runs on the host before the random op")


def test_print_after_the_random_ops_still_slices():
    def make(log):
        tf.random.set_seed(1)
        v = tf.Variable(tf.zeros([2]))

        def step(x):
            v.assign_add(tf.random.normal([2]) * x)
            print("step", len(log))
            log.append(1)
            return tf.reduce_sum(v)
        return step, {"v": v}
    check(make, [(tf.constant(1.0),) for i in range(5)])


def test_random_op_after_a_print_still_slices():
    """The TF work after a host effect waits at a gate (a tf.cond that runs unless the
    call is cancelled): its random ops run once per call there."""
    def make(log):
        tf.random.set_seed(1)
        v = tf.Variable(tf.zeros([2]))

        def step(x):
            print("step", len(log))
            log.append(float(tf.reduce_sum(v)))
            v.assign_add(tf.random.normal([2]) * x)
            return tf.reduce_sum(v)
        return step, {"v": v}
    check(make, [(tf.constant(1.0),) for i in range(5)])


def test_random_op_after_a_gate_with_values_runs_eagerly_and_matches():
    """A gate that carries host values can hand the call over to the host (a rescue),
    which then runs the random op eagerly: refused there."""
    def make(log):
        tf.random.set_seed(1)
        v = tf.Variable(tf.ones([2]))

        def step(x):
            n = int(tf.reduce_sum(v).numpy()) % 3
            v.assign_add(tf.random.normal([2]) * x * n)
            return tf.reduce_sum(v)
        return step, {"v": v}
    under = check(make, [(tf.constant(1.0),) for i in range(4)], graph_calls=0)
    _refused(under, "test_random.py:")


def test_unseeded_random_ops_still_slice_and_stay_random():
    tf.random.set_seed(None)  # pytest runs tests in one process: no global seed now
    from tensorflow.python.eager import context
    context.context()._seed = None  # noqa: SLF001 (set_seed(None) keeps an eager seed)
    v = tf.Variable(tf.zeros([4]))

    def step(x):
        v.assign_add(tf.random.normal([4]) * x)
        return tf.random.uniform([4])

    fn = gpe.function(step, profile_calls=1)
    out = [fn(tf.constant(1.0)).numpy() for _ in range(6)]
    assert fn.stats()["graph_calls"] == 5
    assert len({o.tobytes() for o in out}) == 6
    assert all(((0 <= o) & (o < 1)).all() for o in out)


def test_user_function_run_on_the_host_after_the_random_ops_draws_after_them():
    """A user function the host runs eagerly after the step's random op: its own eager
    random op draws after the step's seed, as eagerly."""
    def make(log):
        tf.random.set_seed(6)
        v = tf.Variable(tf.zeros([2]))

        def inner(x):
            log.append(len(log))
            return tf.random.normal([2]) * x

        def step(x):
            a = tf.random.uniform([2]) * x
            y = inner(x)
            v.assign_add(a + y)
            return tf.reduce_sum(v)
        return step, {"v": v}
    under = check(make, [(tf.constant(1.0 + i),) for i in range(5)],
                  host_ops_allowed=frozenset({"RandomStandardNormal", "Mul", "AddV2"}))
    assert not under.target.stats()["fallbacks"]


def test_random_ops_in_a_part_without_entry_values_get_an_entry_for_their_seeds():
    """The seeds travel with the entry values: a function with no argument, or only folded
    ones (a GAN's generator step `g_step(batch)`), had none and ran eagerly every call;
    its part is sliced again with an entry that carries only the seeds (one more eager
    call), and draws eager's numbers."""
    def make(log):
        tf.random.set_seed(6)
        v = tf.Variable(tf.zeros([2]))

        def step():
            v.assign_add(tf.random.normal([2]))
            return tf.reduce_sum(v)
        return step, {"v": v}
    check(make, [() for _ in range(5)], graph_calls=3)

    def make_generator_step(log):
        keras.utils.set_random_seed(21)
        gen = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        opt = keras.optimizers.SGD(0.1)

        def g_step(batch):
            noise = tf.random.normal([batch, 4])
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(gen(noise) ** 2)
            grads = tape.gradient(loss, gen.trainable_variables)
            opt.apply_gradients(zip(grads, gen.trainable_variables))
            return loss
        return g_step, {f"w{i}": w for i, w in enumerate(gen.weights)}
    check(make_generator_step, [(8,) for _ in range(5)], graph_calls=3)


def test_a_seed_pair_drawn_again_runs_that_call_eagerly_continuing_the_kernel():
    """Eager caches a stateful op's kernel by its seeds: an op whose drawn pair was used
    before continues that kernel's stream. Such a call runs eagerly, with the pairs drawn."""
    import copy
    from tensorflow.python.eager import context

    def program(sliced):
        tf.random.set_seed(11)
        v = tf.Variable(tf.zeros([3]))

        def step(x):
            v.assign_add(tf.random.normal([3]) * x)
            return tf.reduce_sum(v)
        fn = gpe.function(step, profile_calls=1) if sliced else step
        out = [fn(tf.constant(1.0)).numpy() for _ in range(3)]
        # an eager op with an explicit seed equal to the pair the next call draws
        upcoming = copy.deepcopy(context.context()._rng).randint(0, 2**31 - 1)  # noqa: SLF001
        out.append(tf.random.normal([3], seed=upcoming % (2**31 - 1)).numpy())
        out += [fn(tf.constant(1.0)).numpy() for _ in range(3)]
        return out, v.numpy(), fn
    eager, eager_v, _ = program(False)
    under, under_v, fn = program(True)
    assert all(np.array_equal(a, b) for a, b in zip(eager, under)), (eager, under)
    assert np.array_equal(eager_v, under_v)
    stats = fn.stats()
    assert stats["graph_calls"] == 4, stats
    assert any("drawn again" in reason for reason in stats["guard_failures"]), stats


OP_SEED_ONLY = '''
import os, sys
import tensorflow as tf
if sys.argv[1] == "gpe":
    import gpe
    wrap = gpe.function
else:
    wrap = lambda f: f
v = tf.Variable(tf.zeros([3]))

def step(x):
    v.assign_add(x * 2.0)
    return tf.reduce_sum(v)

f = wrap(step)
x = tf.random.normal((3,), seed=3)  # an op seed, and no global seed: eager's default pair
for _ in range(6):
    out = f(x)
print("@", x.numpy().tolist(), float(out), tf.random.uniform((2,), seed=5).numpy().tolist())
if sys.argv[1] == "gpe":
    print("@ graph calls", f.stats()["graph_calls"])
'''


def _op_seed_runs():
    """OP_SEED_ONLY run eagerly and under gpe, side by side, in a folder of its own."""
    from test_regressions import eager_and_gpe
    with background.folder() as folder:
        return eager_and_gpe(folder, OP_SEED_ONLY)


def background_jobs():
    """The runs the test below asserts on, started after collection (tests/background.py)."""
    return {"test_op_seed_without_a_global_seed_in_a_fresh_process": _op_seed_runs}


@pytest.mark.timeout(200)
def test_op_seed_without_a_global_seed_in_a_fresh_process():
    """A program that never calls tf.random.set_seed has no eager RNG yet: an op seed
    alone (`tf.random.normal(shape, seed=3)`) failed with AttributeError under gpe."""
    from test_regressions import marked
    eager, under = background.result(
        f"{__name__}.test_op_seed_without_a_global_seed_in_a_fresh_process", _op_seed_runs)
    assert eager.returncode == 0, eager.stderr[-2000:]
    assert under.returncode == 0, under.stderr[-2000:]
    got = marked(under.stdout)
    assert got[:1] == marked(eager.stdout) and got[1] == "graph calls 3", got
