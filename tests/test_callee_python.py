"""Callees whose Python a trace reproduces (slicer/reproduced.py): the plain-TensorFlow style
of textbooks and research code, where the training step calls the user's own classes and
helpers inside the tape. Each program matches eager and runs its calls sliced (issue 28)."""
import numpy as np
import pytest
import tensorflow as tf

import programs
from harness import check

pytestmark = pytest.mark.timeout(240)

NUM_STEPS = 4
TOKENS = tf.constant(np.linspace(-1, 1, 3 * NUM_STEPS * 4, dtype=np.float32).reshape(
    3, NUM_STEPS, 4))


class Cell:
    """An LSTM cell as a plain Python class holding variables (not a tf.Module)."""

    def __init__(self, seed):
        rng = np.random.default_rng(seed)
        self.w = tf.Variable(rng.normal(size=(8, 16)).astype(np.float32) * 0.3)
        self.b = tf.Variable(np.zeros(16, np.float32))

    def __call__(self, x, h, c):
        z = tf.matmul(tf.concat([x, h], 1), self.w) + self.b
        i, f, o, g = tf.split(z, 4, axis=1)
        c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
        h = tf.sigmoid(o) * tf.tanh(c)
        return h, c


class LanguageModel:
    def __init__(self, seed=0):
        self.cell = Cell(seed)
        self.out = tf.Variable(np.eye(4, dtype=np.float32) * 0.5)

    def loss(self, tokens):
        batch = tokens.shape[0]
        h, c = tf.zeros((batch, 4)), tf.zeros((batch, 4))
        total = 0.0
        for t in range(NUM_STEPS):
            h, c = self.cell(tokens[:, t, :], h, c)
            logits = tf.matmul(h, self.out)
            total += tf.reduce_mean(tf.square(logits - tokens[:, t, :]))
        return total / NUM_STEPS

    def outputs(self, tokens):
        h = c = tf.zeros((tokens.shape[0], 4))
        outs = []
        for t in range(tokens.shape[1]):
            h, c = self.cell(tokens[:, t, :], h, c)
            outs.append(tf.matmul(h, self.out))
        return tf.stack(outs, axis=1)

    @property
    def trainable(self):
        return [self.cell.w, self.cell.b, self.out]

    def variables(self):
        return [self.cell.w, self.cell.b, self.out]


class Trainer:
    def __init__(self, model, lr=0.1):
        self.model, self.lr, self.history = model, lr, []

    def step(self, tokens):
        with tf.GradientTape() as tape:
            loss = self.model.loss(tokens)
        params = self.model.trainable
        grads = tape.gradient(loss, params)
        for v, g in zip(params, grads):
            v.assign_sub(self.lr * g)
        self.history.append(loss)
        return loss

    def step_on_outputs(self, tokens):
        with tf.GradientTape() as tape:
            pred = self.model.outputs(tokens)
            loss = tf.reduce_mean(tf.square(pred - tokens))
        grads = tape.gradient(loss, self.model.variables())
        for v, g in zip(self.model.variables(), grads):
            v.assign_sub(self.lr * g)
        return loss


def _trainer(method):
    def make(log):
        model = LanguageModel()
        trainer = Trainer(model)
        trainer.history = log  # the losses it keeps, compared with eager's
        variables = {"w": model.cell.w, "b": model.cell.b, "out": model.out}
        return getattr(trainer, method), variables  # the bound method, sliced
    return make


def test_a_plain_model_object_unrolling_a_cell_over_a_constant_range():
    """`self.model.loss(tokens)` inside the tape: a plain class's method with a static
    shape, a Python accumulator, a loop over range(NUM_STEPS) calling another plain
    object's __call__ (tuple unpacking of tf.split): all traced, the step sliced."""
    check(_trainer("step"), [(TOKENS,)] * 5)


def test_a_method_returning_the_models_variables_and_a_local_list_of_outputs():
    """`self.model.variables()` (a list of the object's variables, traced inline: the TF
    part gets the variables, not their values) and a callee filling its own list."""
    check(_trainer("step_on_outputs"), [(TOKENS,)] * 5)


def test_a_trainer_method_itself_sliced_with_the_plain_model_captured():
    import gpe
    trainers = {way: Trainer(LanguageModel(seed=3)) for way in ("eager", "gpe")}
    sliced = gpe.function(trainers["gpe"].step)
    eager = [float(trainers["eager"].step(TOKENS)) for _ in range(6)]
    got = [float(sliced(TOKENS)) for _ in range(6)]
    assert got == eager
    assert sliced.stats()["graph_calls"] == 3  # all but the 3 profile calls
    for a, b in zip(trainers["eager"].model.variables(), trainers["gpe"].model.variables()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert [float(x) for x in trainers["gpe"].history] == \
        [float(x) for x in trainers["eager"].history]


SCALE = {"value": 2.0}


def scaled(x, log):
    total = 0.0
    for k in range(3):
        log.append(k)  # a side effect: eager runs it each call
        total += x * k
    return total


def test_a_callee_with_a_host_side_effect_in_its_loop_stays_on_the_host():
    def make(log):
        w = tf.Variable(1.0)

        def step(x):
            with tf.GradientTape() as tape:
                y = scaled(x * w, log)
            w.assign_sub(0.1 * tape.gradient(y, w))
            return y
        return step, {"w": w}
    check(make, [(tf.constant(1.5),)] * 4, graph_calls=0)


# Python a trace reproduces, in the step itself (issue 28, class 3) ------------------------
X4 = tf.constant(np.linspace(-1, 1, 24, dtype=np.float32).reshape(6, 4))
Y4 = tf.constant(np.linspace(0, 1, 24, dtype=np.float32).reshape(6, 4))


def test_a_local_alias_of_a_tf_function_inside_the_tape():
    def make(log):
        w = tf.Variable(np.eye(4, dtype=np.float32) * 0.5)

        def step(x, y):
            bce = tf.nn.sigmoid_cross_entropy_with_logits  # both sides bind the alias
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(bce(labels=y, logits=tf.matmul(x, w)))
            w.assign_sub(0.1 * tape.gradient(loss, w))
            return loss
        return step, {"w": w}
    check(make, [(X4, Y4)] * 4)


def test_numbers_unpacked_from_a_tuple_are_constants_a_trace_needs():
    """`a, b = 2, 2` then `tf.split(x, a * b)`: the TF part needs a real Python int (a
    number sent from the host failed tracing: 'Rank-0 tensors are not supported')."""
    def make(log):
        w = tf.Variable(np.eye(4, dtype=np.float32))

        def step(x, y):
            a, b = 2, 2
            with tf.GradientTape() as tape:
                parts = tf.split(x, a * b, axis=1)
                h = tf.matmul(tf.concat(parts[::-1], axis=1), w)
                loss = tf.reduce_mean(tf.square(h - y))
            w.assign_sub(0.1 * tape.gradient(loss, w))
            log.append(a + b)  # still Python ints on the host
            return loss
        return step, {"w": w}
    under = check(make, [(X4, Y4)] * 4)
    assert under.log == [4, 4, 4, 4] and all(type(v) is int for v in under.log)


class _Attack:
    """Settings and layers on a plain object the step reaches through its globals."""

    def __init__(self):
        self.convs = [tf.keras.layers.Dense(4, kernel_initializer="ones") for _ in range(2)]
        for conv in self.convs:
            conv.build((None, 4))
        self.targeted = True
        self.sizes = [0.5, 0.25]


ATTACK = _Attack()


def _attack_step(log):
    def step(x, y):
        with tf.GradientTape() as tape:
            h = x
            for i, k in enumerate(ATTACK.sizes):  # numbers on an object, guarded
                h = ATTACK.convs[i](h) * k  # a layer of a list, by the loop counter
            if ATTACK.targeted:  # a bool on an object, guarded
                loss = tf.reduce_mean(tf.square(h - y))
            else:
                loss = -tf.reduce_mean(tf.square(h - y))
        variables = [v for conv in ATTACK.convs for v in conv.trainable_variables]
        for v, g in zip(variables, tape.gradient(loss, variables)):
            v.assign_sub(0.01 * g)
        return loss
    return step


def _reset_attack():
    for conv in ATTACK.convs:
        conv.kernel.assign(tf.ones((4, 4)))
        conv.bias.assign(tf.zeros(4))
    ATTACK.targeted, ATTACK.sizes = True, [0.5, 0.25]


def test_a_loop_over_numbers_and_layers_and_a_flag_on_a_global_object():
    def make(log):
        _reset_attack()
        variables = {f"{i}{v.name}": v for i, c in enumerate(ATTACK.convs)
                     for v in c.trainable_variables}
        return _attack_step(log), variables
    check(make, [(X4, Y4)] * 5)


def test_the_guarded_settings_change_between_calls_as_eager_sees_them():
    import gpe

    def run(fn):
        _reset_attack()
        out = []
        for i in range(12):
            if i == 5:
                ATTACK.targeted = False
            if i == 8:
                ATTACK.sizes = [1.0, 0.5]
            if i == 10:
                ATTACK.sizes[1] = 2.0  # changed in place
            out.append(float(fn(X4, Y4)))
        return out
    step = _attack_step([])
    sliced = gpe.function(step, profile_calls=1)
    assert run(sliced) == run(step)
    assert sliced.stats()["graph_calls"] >= 6, sliced.stats()


def test_a_loop_header_reading_the_tape_with_a_filtered_list_of_variables():
    """`for v, g in zip(variables, tape.gradient(loss, variables))` with `variables` a
    filtered comprehension: the TF part builds the list (its filter reads what the trace
    knows of each variable); before, the host program read `tape`, which exists in the TF
    part only: UnboundLocalError from the second sliced call on (gpe only)."""
    def make(log):
        ws = [tf.Variable(1.0), tf.Variable(np.ones((2, 2), np.float32)), tf.Variable(2.0)]

        def step(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(x * ws[0] * ws[1] * ws[2])
            variables = [v for v in ws if len(v.shape) > 1 or v is ws[0]]
            for v, g in zip(variables, tape.gradient(loss, variables)):
                v.assign_sub(0.1 * g)
            return loss
        return step, {f"w{i}": w for i, w in enumerate(ws)}
    check(make, [(tf.constant(1.0),)] * 5)


def _listed(ws, log):
    log.append(len(ws))  # host work: the list is the host's
    return list(ws)


def test_a_host_loop_header_reading_the_tape_runs_eagerly_not_unbound():
    """The list comes from host work, so the loop over zip(variables, tape.gradient(...))
    is the host's; the tape exists in the TF part only: refused (the call runs eagerly),
    never an UnboundLocalError in the host program (as from the second sliced call)."""
    def make(log):
        ws = [tf.Variable(1.0), tf.Variable(2.0)]

        def step(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(x * ws[0] * ws[1])
            variables = _listed(ws, log)
            for v, g in zip(variables, tape.gradient(loss, variables)):
                v.assign_sub(0.1 * g)
            return loss
        return step, {"a": ws[0], "b": ws[1]}
    under = check(make, [(tf.constant(1.0),)] * 4, graph_calls=0)
    assert any("`tape` exists in the TF part only" in reason
               for reason in under.target.stats()["fallbacks"])


class _PassThrough(tf.keras.layers.Layer):
    """A layer whose `call` takes **kwargs (d2l's Module): judging it crashed the slicer
    (TypeError: cannot unpack non-iterable NoneType object) and every call ran eagerly."""

    def __init__(self):
        super().__init__()
        self.dense = tf.keras.layers.Dense(2, kernel_initializer="ones")

    def call(self, x, *args, **kwargs):
        if kwargs and "training" in kwargs:
            self.training = kwargs["training"]
        return self.dense(x, *args)


def test_a_layer_whose_call_takes_kwargs_is_judged_without_crashing_the_slicer():
    import gpe
    layer = _PassThrough()
    layer(X4)

    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(x))
        return tape.gradient(loss, layer.trainable_variables)[0]
    sliced = gpe.function(step, profile_calls=1)
    for _ in range(3):
        np.testing.assert_array_equal(sliced(X4).numpy(), step(X4).numpy())
    reasons = " ".join(sliced.stats()["fallbacks"])
    assert "slicer-error" not in reasons and "cannot unpack" not in reasons, reasons


def test_isinstance_of_an_object_argument_inside_the_tape_takes_its_branch():
    """d2l's train_epoch_ch3: `if isinstance(loss, tf.keras.losses.Loss):` inside the tape.
    The call key holds the object's identity, so the test is fixed for the call: the branch
    it takes replaces the `if` (was: 'a loop, if or sliced call the host decides inside a
    TF with block', every call eager)."""
    def make(log):
        w = tf.Variable(np.ones((4, 1), np.float32))
        opt = tf.keras.optimizers.SGD(0.1)
        keras_loss = tf.keras.losses.MeanSquaredError()

        def plain_loss(y_hat, y):
            return tf.reduce_mean(tf.abs(y_hat - y))

        def step(x, y, loss, updater):
            with tf.GradientTape() as tape:
                y_hat = tf.matmul(x, w)
                if isinstance(loss, tf.keras.losses.Loss):
                    value = loss(y, y_hat)
                else:
                    value = loss(y_hat, y)
            updater.apply_gradients(zip(tape.gradient(value, [w]), [w]))
            return value
        y = Y4[:, :1]
        calls = [(X4, y, keras_loss, opt)] * 4 + [(X4, y, plain_loss, opt)] * 4
        return step, {"w": w}, calls
    check(make, None, graph_calls=6)  # 2 profile calls: one per loss object


def test_a_helper_asserting_on_what_the_key_fixes_runs_in_the_graph():
    """`assert` kept the helper on the host (host work inside the tape: every call
    eager); on static shapes and fixed numbers the trace checks it as eager does."""
    check(programs.scaled_by_a_checked_helper, None, graph_calls=3)


def test_a_helper_given_a_module_level_number_runs_in_the_graph():
    """d2l's `dropout_layer(X, dropout1)` with `dropout1` a module-level number: the helper
    asserts and branches on it, which kept it on the host (every call eager); the number
    is fixed for the call (the key guards it), so the trace checks it as eager does."""
    check(programs.helper_given_a_module_number, None, graph_calls=1, profile_calls=3)


def test_a_module_level_number_changed_between_calls_is_seen(monkeypatch):
    """The guard on that number: set to 0 at the sixth call (the helper takes another
    branch) and to 0.5 at the eleventh, gpe's results follow eager's; the number folded
    again after its first change runs sliced again."""
    import gpe

    def calls(wrap):
        monkeypatch.setattr(programs, "DROPOUT", 0.25)
        step, variables, args = programs.helper_given_a_module_number([])
        step = wrap(step)
        out = []
        for i in range(12):
            if i in (5, 10):
                monkeypatch.setattr(programs, "DROPOUT", 0.0 if i == 5 else 0.5)
            out.append(float(step(*args[0])))
        return out, variables["w"].numpy(), step

    eager, w_eager, _ = calls(lambda f: f)
    sliced, w_sliced, fn = calls(lambda f: gpe.function(f, adaptive=False))
    assert sliced == eager and (w_sliced == w_eager).all()
    # the number is folded in the step's own TF part too (a module's number no code of it
    # rebinds): 3 profile calls, one after each change, and the other 7 sliced
    assert fn.stats()["graph_calls"] == 7 and fn.stats()["profile_calls"] == 5, fn.stats()


def masked_relu(x, mask=None):
    if mask is not None:
        x = x * mask
    return tf.nn.relu(x)


def test_a_helper_with_a_none_default_runs_in_the_graph():
    """`def f(x, mask=None): if mask is not None:` called without the mask: the test is
    on a value fixed for the call (the default), as a trace decides it."""
    w = tf.Variable(np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2))

    def make(log):
        w.assign(np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2))

        def step(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(masked_relu(tf.matmul(x, w)) ** 2)
            w.assign_sub(0.1 * tape.gradient(loss, w))
            return loss
        return step, {"w": w}, [(tf.ones([2, 3]),)] * 4
    check(make, None, graph_calls=3)


def test_a_reshape_to_a_scalar_shape_runs_in_the_graph():
    """`tf.reshape(t, (-1))` (a scalar shape: eagerly the kernel reads it as one element;
    graph shape inference refuses it) made tracing fail and every call run eagerly."""
    w = tf.Variable(np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2))

    def make(log):
        w.assign(np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2))

        def step(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.reshape(tf.matmul(x, w), (-1)) ** 2)
            w.assign_sub(0.1 * tape.gradient(loss, w))
            return loss
        return step, {"w": w}, [(tf.ones([2, 3]),)] * 4
    check(make, None, graph_calls=3)


def _squared_loss(y_hat, y):
    return (y_hat - y) ** 2


def test_a_conditional_expression_on_a_fixed_isinstance_takes_its_side():
    """d2l's `l * float(tf.size(y)) if isinstance(loss, tf.keras.losses.Loss) else
    tf.reduce_sum(l)`: the test is fixed for the call (the key holds `loss`), but the
    expression was judged whole, the side never taken (a `float` of a tensor) keeping it on
    the host with its TF ops. The side the test takes is what runs, in the graph."""
    w = tf.Variable(np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2))

    def make(log):
        w.assign(np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2))

        def step(x, y, loss):
            with tf.GradientTape() as tape:
                l = loss(tf.matmul(x, w), y)
            w.assign_sub(0.1 * tape.gradient(l, w))
            l_sum = l * float(tf.size(y)) if isinstance(
                loss, tf.keras.losses.Loss) else tf.reduce_sum(l)
            return l_sum
        return step, {"w": w}, [(tf.ones([2, 3]), tf.zeros([2, 2]), _squared_loss)] * 4
    check(make, None, graph_calls=3)


class _LazyLogistic(tf.Module):
    """TF core's logistic regression tutorial: the variables are made on the first call."""

    def __init__(self):
        super().__init__()
        self.built = False

    def __call__(self, x, train=True):
        if not self.built:
            self.w = tf.Variable(tf.ones([x.shape[-1], 1]) * 0.1)
            self.b = tf.Variable(0.0)
            self.built = True
        z = tf.squeeze(tf.add(tf.matmul(x, self.w), self.b), axis=1)
        if train:
            return z
        return tf.sigmoid(z)


def test_a_model_built_on_its_first_call_runs_in_the_graph():
    """`if not self.built:` (make the variables, set the flag): the branch's writes marked
    the model changed, so its flag was not fixed for the call and the call was host work
    inside the tape (every call eager). The flag is folded (guarded by value): only the
    branch it takes is the callee's."""
    model = _LazyLogistic()
    model(tf.ones([2, 3]))  # built, as the tutorial does before training

    def make(log):
        model.w.assign(tf.ones([3, 1]) * 0.1)
        model.b.assign(0.0)

        def step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x) - y) ** 2)
            for g, v in zip(tape.gradient(loss, model.variables), model.variables):
                v.assign_sub(0.1 * g)
            return loss
        return step, {"w": model.w, "b": model.b}, [(tf.ones([2, 3]), tf.zeros([2]))] * 4
    check(make, None, graph_calls=3)
