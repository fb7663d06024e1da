"""Step shapes from TensorFlow's own guides that fell back on every call: variables in a
dict (the TF Core APIs' `params = {"w": ..., "b": ...}` with `tape.gradient(loss, params)`)
and `del tape` after a persistent tape (the autodiff guide). Each runs eagerly and under
gpe, compared on everything observable, and its calls after the profile call run sliced."""
import numpy as np
import pytest
import tensorflow as tf

from harness import check

X = tf.constant(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3))
Y = tf.constant(np.arange(8, dtype=np.float32).reshape(4, 2) / 8)


def test_variables_in_a_dict():
    def make(log):
        params = {"w": tf.Variable(tf.ones([3, 2])), "b": tf.Variable(tf.zeros([2]))}

        def train_step(x, y, lr=0.1):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((x @ params["w"] + params["b"] - y) ** 2)
            grads = tape.gradient(loss, params)
            for name in params:
                params[name].assign_sub(lr * grads[name])
            return loss
        return train_step, params

    check(make, [(X, Y)] * 4)


def test_a_dict_of_variables_changed_between_calls_is_read_anew():
    def make(log):
        params = {"w": tf.Variable(tf.ones([3, 2]))}
        calls = []
        for i in range(6):
            calls.append((X,))
        swap = tf.Variable(tf.fill([3, 2], 2.0))

        def step(x):
            if len(log) == 3:
                params["w"] = swap  # host work: another variable under the same key
            log.append(len(params))
            return tf.reduce_sum(x @ params["w"])
        return step, {"swap": swap, **params}, calls

    check(make, None, graph_calls=4)


def test_del_of_a_persistent_tape():
    def make(log):
        w = tf.Variable([[0.5], [-0.5], [1.0]])

        def step(x):
            with tf.GradientTape(persistent=True) as tape:
                y = x @ w
                loss = tf.reduce_sum(y ** 2)
            dw = tape.gradient(loss, w)
            dy = tape.gradient(loss, y)
            del tape
            w.assign_sub(0.01 * dw)
            return loss, dy
        return step, {"w": w}

    check(make, [(X,)] * 4)


class Dense(tf.Module):  # TF Core's guides: a module whose forward pass is `__call__`
    def __init__(self, n_in, n_out, seed):
        super().__init__()
        self.w = tf.Variable(tf.random.stateless_normal([n_in, n_out], [seed, 1]) * 0.3)
        self.b = tf.Variable(tf.zeros([n_out]))

    def __call__(self, x):
        return tf.tanh(x @ self.w + self.b)


class MLP(tf.Module):
    def __init__(self):
        super().__init__()
        self.layers = [Dense(3, 8, 1), Dense(8, 2, 2)]

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class Schedule:
    def __init__(self):
        self.base = 0.2

    def __call__(self):
        return self.base * 0.5


def test_a_tf_module_model_with_its_layers_in_a_list():
    """TF Core's MLP: tf.Modules called as functions, the layers in a list on the model;
    each module's `__call__` is all TF work, so the model is called in the TF part."""
    def make(log):
        model = MLP()

        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y))
            grads = tape.gradient(loss, model.trainable_variables)
            for g, v in zip(grads, model.trainable_variables):
                v.assign_sub(0.1 * g)
            return loss
        return train_step, {f"v{i}": v for i, v in enumerate(model.trainable_variables)}

    check(make, [(X, Y)] * 5)


@pytest.mark.xfail(strict=True, reason=(
    "a host call inside a loop over variables makes the whole loop host-driven: the update "
    "ops run eagerly (12 Mul + AssignSubVariableOp over 3 calls); the TF part should unroll "
    "the loop and receive the host value per iteration"))
def test_a_host_number_inside_the_update_loop():
    """`v.assign_sub(schedule() * g)` in the update loop: the schedule is a plain object
    called on the host; its value crosses and the loop stays in the TF part."""
    def make(log):
        model, schedule = MLP(), Schedule()

        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y))
            grads = tape.gradient(loss, model.trainable_variables)
            for g, v in zip(grads, model.trainable_variables):
                v.assign_sub(schedule() * g)
            return loss
        return train_step, {f"v{i}": v for i, v in enumerate(model.trainable_variables)}

    check(make, [(X, Y)] * 5)


XS = np.array([3.3, 4.4, 5.5, 6.71, 6.93, 4.168, 9.779], dtype=np.float32)  # NumPy data
YS = np.array([1.7, 2.76, 2.09, 3.19, 1.694, 1.573, 3.366], dtype=np.float32)


def test_user_functions_given_numpy_data_run_in_the_tf_part():
    """The classic TF2 linear regression: `linear_regression(X)` and `mean_square(pred, Y)`
    on NumPy globals inside the tape, and a loss function of no arguments; they fell back
    ("`loss` ... a tensor made by host code inside a `with` block cannot cross into it"):
    a user function called with NumPy data and no TF value was never judged as TF work."""
    def make(log):
        w, b = tf.Variable(0.3), tf.Variable(-0.2)

        def linear_regression(x):
            return w * x + b

        def mean_square(y_pred, y_true):
            return tf.reduce_mean(tf.square(y_pred - y_true))

        def penalty():
            return 0.01 * (w * w + b * b)

        def run_optimization(lr):
            with tf.GradientTape() as g:
                pred = linear_regression(XS)
                loss = mean_square(pred, YS) + penalty()
            dw, db = g.gradient(loss, [w, b])
            w.assign_sub(lr * dw)
            b.assign_sub(lr * db)
            return loss
        return run_optimization, {"w": w, "b": b}

    check(make, [(0.01,)] * 5)


def test_variables_gathered_from_dicts_into_one_list():
    """aymericdamien's TF2 examples: `trainable_variables = list(weights.values()) +
    list(biases.values())` inside the step fell back ("`trainable_variables` cannot cross
    into the TF part")."""
    def make(log):
        weights = {"h1": tf.Variable(tf.ones([3, 4]) * 0.1), "out": tf.Variable(tf.ones([4, 2]) * 0.2)}
        biases = {"b1": tf.Variable(tf.zeros([4])), "out": tf.Variable(tf.zeros([2]))}
        optimizer = tf.optimizers.SGD(0.1)

        def run_optimization(x, y):
            with tf.GradientTape() as g:
                h = tf.nn.sigmoid(x @ weights["h1"] + biases["b1"])
                loss = tf.reduce_mean(tf.square(h @ weights["out"] + biases["out"] - y))
            trainable_variables = list(weights.values()) + list(biases.values())
            gradients = g.gradient(loss, trainable_variables)
            optimizer.apply_gradients(zip(gradients, trainable_variables))
            return loss
        return run_optimization, {**weights, **{"b_" + k: v for k, v in biases.items()}}

    check(make, [(X, Y)] * 5)


class CustomNet(tf.keras.Model):  # older TF2 examples: a Keras model with its own __call__
    def __init__(self):
        super().__init__()
        self.layer1 = tf.keras.layers.Dense(4, kernel_initializer=tf.keras.initializers.Constant(0.1))
        self.out = tf.keras.layers.Dense(2, kernel_initializer=tf.keras.initializers.Constant(-0.2))

    def __call__(self, x, is_training=False):
        x = tf.nn.relu(self.layer1(x))
        x = self.out(x)
        if not is_training:
            x = tf.nn.softmax(x)
        return x


def test_a_keras_model_with_its_own_call_method():
    """A Keras model whose forward pass overrides `__call__` (it fell back: "a tensor made
    by host code inside a `with` block"): judged by that `__call__`, as a tf.Module's."""
    def make(log):
        net = CustomNet()
        net(X)  # its layers are built by the first call, as in the example
        optimizer = tf.optimizers.SGD(0.1)

        def run_optimization(x, y):
            with tf.GradientTape() as g:
                pred = net(x, is_training=True)
                loss = tf.reduce_mean(tf.square(pred - y))
            gradients = g.gradient(loss, net.trainable_variables)
            optimizer.apply_gradients(zip(gradients, net.trainable_variables))
            return loss
        return run_optimization, {f"v{i}": v for i, v in enumerate(net.trainable_variables)}

    check(make, [(X, Y)] * 5)


class _Clip:
    eps = 0.2


def _number_steps(hp):
    """The steps, each its own function (the statement must be in the sliced function)."""
    def negated(x, c):
        return tf.reduce_sum(x * -c)

    def clip(x, c):
        return tf.reduce_sum(tf.clip_by_value(x, -c, c))

    def ppo(x, c):
        return tf.reduce_mean(tf.clip_by_value(x, 1 - hp.eps, 1 + hp.eps) * c)

    def absolute(x, c):
        return tf.reduce_sum(x * abs(c))

    def halved(x, c):
        return tf.reduce_sum(x * (c / 2))

    def printed(x, c):
        print("loss", float(tf.reduce_sum(x * (1.0 - c))))
        return c
    return [negated, clip, ppo, absolute, halved, printed]


@pytest.mark.parametrize("step", range(6))
def test_python_number_arithmetic_inside_tf_work_of_a_host_statement(step):
    """`return tf.reduce_mean(tf.clip_by_value(ratio, 1 - hp.eps, 1 + hp.eps) * adv)` (PPO's
    clipped objective), `x * -c`, `tf.clip_by_value(g, -c, c)` with `c` a Python number
    argument: in a host statement (a return, a print) the TF part cannot compute `1 - eps`
    with Python's semantics, so the whole statement stayed on the host (under `gpe run`
    the function was judged to have no TF work). The arithmetic on numbers is computed on
    the host first and the TF work runs in the graph."""
    def make(log):
        return _number_steps(_Clip())[step], {}
    check(make, [(X, 0.5), (X, 1.5), (X, -2.0), (X, 3.0)])
