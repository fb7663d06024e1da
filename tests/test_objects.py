"""Objects: attributes holding variables, layers and optimizers are read in the TF part
(guarded by identity); attributes holding Python values cross as values."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import gpe

X = tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3) / 10)
Y = tf.ones([4, 1])


class Regressor:
    def __init__(self, lr):
        self.w = tf.Variable(tf.ones([3, 1]))
        self.b = tf.Variable(0.0)
        self.lr = lr
        self.steps = 0
        self.history = []

    def step(self, x, y):
        with tf.GradientTape() as tape:
            pred = tf.matmul(x, self.w) + self.b
            loss = tf.reduce_mean(tf.square(pred - y))
        gw, gb = tape.gradient(loss, [self.w, self.b])
        self.w.assign_sub(self.lr * gw)
        self.b.assign_sub(self.lr * gb)
        self.steps += 1
        self.history.append(loss)
        return loss


def test_method_with_attribute_variables_and_a_changing_learning_rate():
    eager, under = Regressor(0.1), Regressor(0.1)
    sliced = gpe.function(Regressor.step)  # the default: 3 profile calls
    for i in range(5):
        if i == 2:
            eager.lr = under.lr = 0.05  # changed between calls: the TF part gets it as a value
        assert np.array_equal(Regressor.step(eager, X, Y).numpy(), sliced(under, X, Y).numpy())
    assert np.array_equal(eager.w.numpy(), under.w.numpy())
    assert np.array_equal(eager.b.numpy(), under.b.numpy())
    assert eager.steps == under.steps == 5
    assert [float(h) for h in eager.history] == [float(h) for h in under.history]
    stats = sliced.stats()
    assert stats["profile_calls"] == 3 and stats["graph_calls"] == 2 and stats["variants"] == 1
    plan_text = gpe.explain(sliced, file=__import__("io").StringIO())
    assert "self.w" in plan_text and "out:" in plan_text


def test_two_objects_alternating_get_one_variant_each():
    first, second = Regressor(0.1), Regressor(0.2)
    twin_a, twin_b = Regressor(0.1), Regressor(0.2)
    sliced = gpe.function(Regressor.step, profile_calls=1)
    for _ in range(4):
        for obj, twin in ((first, twin_a), (second, twin_b)):
            assert np.array_equal(sliced(obj, X, Y).numpy(), Regressor.step(twin, X, Y).numpy())
    assert np.array_equal(first.w.numpy(), twin_a.w.numpy())
    assert np.array_equal(second.w.numpy(), twin_b.w.numpy())
    stats = sliced.stats()
    assert stats["variants"] == 2 and stats["graph_calls"] == 6


class KerasTrainer:
    def __init__(self):
        keras.utils.set_random_seed(3)
        self.model = keras.Sequential([keras.layers.Dense(8, activation="tanh"),
                                       keras.layers.Dense(1)])
        self.model(X)
        self.opt = keras.optimizers.SGD(0.05)

    @gpe.function(profile_calls=1)
    def train(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self.model(x) - y))
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss


def test_decorated_method_with_keras_attributes_runs_in_the_graph():
    eager = KerasTrainer()
    under = KerasTrainer()
    for _ in range(5):
        a = KerasTrainer.train.__wrapped__(eager, X, Y)
        b = under.train(X, Y)
        assert np.array_equal(a.numpy(), np.asarray(b))
    for va, vb in zip(eager.model.weights, under.model.weights):
        assert np.array_equal(va.numpy(), vb.numpy())
    stats = KerasTrainer.train.stats()
    assert stats["graph_calls"] == 4, stats


def test_a_list_of_tf_values_read_on_the_host_stays_a_list():
    from harness import check

    def make(log):
        w = tf.Variable(tf.ones([3, 2]))
        b = tf.Variable(tf.zeros([2]))

        def step(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.matmul(x, w) + b)
            grads = tape.gradient(loss, [w, b])
            log.append((type(grads).__name__, len(grads), [g.shape.as_list() for g in grads]))
            w.assign_sub(0.1 * grads[0])
            return grads
        return step, {"w": w, "b": b}
    check(make, [(X,)] * 4)


def test_a_bound_method_given_to_gpe_function():
    """`step = gpe.function(model.step)`, as users write `tf.function(model.train_step)`:
    the call crashed ("missing 1 required positional argument") before it was fixed."""
    eager, sliced = Regressor(0.1), Regressor(0.1)
    step = gpe.function(sliced.step, adaptive=False, profile_calls=1)
    for _ in range(5):
        expected = eager.step(X, Y)
        assert float(step(X, Y)) == float(expected)
    assert step.__self__ is sliced and sliced.steps == eager.steps == 5
    np.testing.assert_array_equal(sliced.w.numpy(), eager.w.numpy())
    assert step.stats()["graph_calls"] == 4, step.stats()
    assert gpe.function(step) is step


class LoggedModule(tf.Module):
    """A library-style tf.Module: its `__call__` all TF work, a Python list of losses on
    it (tf.Module keeps it as TF's ListWrapper) that its training method appends to."""

    def __init__(self):
        super().__init__(name="logged")
        self.w = tf.Variable(tf.ones([3, 1]))
        self.steps = []

    def __call__(self, x):
        return tf.matmul(x, self.w)

    def fit_step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self(x) - y))
        self.w.assign_sub(0.1 * tape.gradient(loss, self.w))
        self.steps.append(loss)
        return loss


def test_a_list_kept_on_a_tf_module_whose_call_is_tf_work_is_appended_on_the_host():
    """`self.steps` was taken for a TF-side list (as `model.trainable_variables` is) because
    the module's `__call__` is TF work: its append ran once, when the part was traced, so
    sliced calls appended nothing (eager: 6 losses; gpe: 3 and a symbolic tensor)."""
    eager, under = LoggedModule(), LoggedModule()
    sliced = gpe.function(LoggedModule.fit_step)
    for _ in range(6):
        assert float(LoggedModule.fit_step(eager, X, Y)) == float(sliced(under, X, Y))
    assert [float(s) for s in under.steps] == [float(s) for s in eager.steps]
    assert len(under.steps) == 6
    assert np.array_equal(eager.w.numpy(), under.w.numpy())
    assert sliced.stats()["graph_calls"] == 3


@pytest.mark.timeout(120)
def test_profile_calls_of_one_key_with_other_plans_build_each_its_own():
    """Objects of one class whose attributes differ in type (d2l's Residual blocks with and
    without a 1x1 convolution) share a call key until a variant is built, but not a plan:
    the profile runs of the other plan gave the variant its channels' specs (a gate's
    values where the plan has a branch's flag), and its first sliced call raised
    "Signature mismatch" on the host's enqueue where eager returned."""
    import programs
    tf.keras.utils.set_random_seed(0)
    plain, projected = programs.Projected(False), programs.Projected(True)
    x = tf.random.normal((2, 4))
    plain(x), projected(x)  # built
    order = [plain, projected, projected, projected, plain, projected, plain, projected]
    eager = [programs.Projected.call(block, x).numpy() for block in order]
    sliced = gpe.function(programs.Projected.call)
    for i, (block, expected) in enumerate(zip(order, eager)):
        assert np.array_equal(sliced(block, x).numpy(), expected), f"call {i}"
    stats = sliced.stats()
    assert stats["graph_calls"] == 3 and stats["variants"] == 2, stats
