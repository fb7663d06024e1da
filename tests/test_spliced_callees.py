"""A call inside a GradientTape of the user's own method that does host work besides its
TF work (d2l's `Trainer.fit_epoch`: `loss = self.model.training_step(batch)`, which plots
the loss with `.numpy()`) is spliced: its statements join the caller's, each placed on its
own side, and the tape's TF work runs in the graph. Judged whole, the call was host work,
its loss "made by host code inside a `with` block", and the whole step ran eagerly."""
import functools
import io

import numpy as np
import pytest
import tensorflow as tf

from gpe.run import auto
from harness import check, differential
import programs
from gpe.host.facts import oracle
from gpe.host.runtime.opcount import graph_ops
from gpe.slicer import layers

X = tf.constant(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3))
Y = tf.constant(np.array([[1.0], [0.0], [2.0], [1.0]], np.float32))
# the host iterates the dataset and sends each batch to the TF part
ITERATING = frozenset({"AnonymousIteratorV3", "MakeIterator", "IteratorGetNext"})


class Board:
    def __init__(self, log):
        self.log = log

    def draw(self, x, y, label):
        self.log.append((label, x, y))


class Model:
    def __init__(self, log):
        self.w = tf.Variable(tf.ones([3, 1]))
        self.board = Board(log)
        self.step = 0

    def forward(self, x):
        return tf.matmul(x, self.w)

    def loss(self, y_hat, y):
        return tf.reduce_mean(tf.square(y_hat - y))

    def plot(self, key, value, train=True):
        self.step += 1
        self.board.draw(self.step, float(value.numpy()), ("train_" if train else "val_") + key)

    def training_step(self, batch):
        """As d2l's Module.training_step."""
        l = self.loss(self.forward(batch[0]), batch[1])
        self.plot("loss", l, train=True)
        return l

    def validation_step(self, batch):
        """As d2l's Module.validation_step: called as a statement, outside any tape."""
        l = self.loss(self.forward(batch[0]), batch[1])
        self.plot("loss", l, train=False)


class Trainer:
    def __init__(self, model, data):
        self.model, self.train_dataloader, self.train_batch_idx = model, data, 0


def fit_epoch(self):
    """As d2l's Trainer.fit_epoch (without its validation loop)."""
    for batch in self.train_dataloader:
        with tf.GradientTape() as tape:
            loss = self.model.training_step(batch)
        grads = tape.gradient(loss, [self.model.w])
        self.model.w.assign_sub(0.1 * grads[0])
        self.train_batch_idx += 1


def trainer_ops(model_class, step, calls: int) -> dict:
    """`step(trainer)` called `calls` times eagerly and under gpe, compared, all but the
    first two sliced (the profile call, and the first call of the dataset loop's
    speculation); the graph ops of its variant."""
    def make(log):
        model = model_class(log)
        data = tf.data.Dataset.from_tensor_slices((X, Y)).batch(2)
        return step, {"w": model.w}, [(Trainer(model, data),)] * calls
    run = check(make, None, graph_calls=calls - 2, host_ops_allowed=ITERATING,
                adaptive=False)  # (no choice by time: a loaded machine's is not this test's)
    return graph_ops(next(iter(run.target.variants.values())).part)


@pytest.mark.timeout(300)
def test_a_training_step_that_plots_is_spliced_into_the_tape():
    ops = trainer_ops(Model, fit_epoch, 12)
    assert ops["MatMul"] >= 2 and ops["AssignSubVariableOp"] == 1, ops


def validate(self):
    """The validation loop of d2l's Trainer.fit_epoch (its data changing the weights, so
    that each call's losses differ)."""
    for batch in self.train_dataloader:
        self.model.validation_step(batch)
    self.model.w.assign_add(0.125 * self.model.w)


@pytest.mark.timeout(300)
def test_a_validation_step_called_as_a_statement_is_spliced_too():
    """`self.model.validation_step(batch)` outside the tape: judged whole it was host
    work, its forward pass run eagerly each batch (d2l's LeNet epochs under
    `@gpe.function`); spliced, its TF work runs in the graph and its plot on the host."""
    ops = trainer_ops(Model, validate, 8)
    assert ops["MatMul"] >= 1 and ops["Square"] >= 1, ops  # validation's forward and loss


class RunModel(Model):
    """Model as `gpe run` leaves it: each method wrapped (gpe.run.auto)."""


for _name in ("forward", "loss", "plot", "training_step"):
    setattr(RunModel, _name, auto(getattr(Model, _name)))


@pytest.mark.timeout(300)
def test_a_training_step_gpe_run_wrapped_is_spliced_too():
    """Under `gpe run` the method called in the tape is gpe's bound wrapper, not a bound
    method: it was not spliced, and d2l's Trainer ran every epoch eagerly under `gpe run`
    (its `loss`, "made by host code inside a `with` block")."""
    ops = trainer_ops(RunModel, fit_epoch, 12)
    assert ops["MatMul"] >= 2 and ops["AssignSubVariableOp"] == 1, ops


def epoch(ds, w, log, lr):
    for x, y in ds:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
            log.append(float(loss.numpy()))
        w.assign_sub(lr * tape.gradient(loss, w))


@pytest.mark.timeout(300)
def test_loop_values_keep_their_rank_where_the_plan_cannot_hand_them_back():
    """The loop's values took any shape, of unknown rank, where the plan cannot hand a
    misfit back to the host (a host read inside the tape): `tf.matmul` then traced as
    BatchMatMulV2, whose float32 result here is one ulp from eager's MatMul (1.6111536
    against 1.6111538)."""
    w0 = np.array([[-0.5329148769378662], [0.0861663892865181], [0.7052477598190308]],
                  np.float32)

    def make(log):
        w = tf.Variable(w0)
        ds = tf.data.Dataset.from_tensor_slices((X[2:], Y[2:])).batch(2)
        return epoch, {"w": w}, [(ds, w, log, 0.0)] * 4  # (each call from w0)
    run = check(make, None, host_ops_allowed=ITERATING)
    ops = graph_ops(next(iter(run.target.variants.values())).part)
    assert "BatchMatMulV2" not in ops and ops["MatMul"] >= 1, ops


def noisy_loss(w, x, scale=2.0):
    print("loss of", x.shape[0], "rows")
    total = tf.reduce_sum(w * x) * scale
    return total


def noisy_step(w, x):
    with tf.GradientTape() as tape:
        loss = noisy_loss(w, x)
        print("between")
    w.assign_sub(0.1 * tape.gradient(loss, w))
    return loss


@pytest.mark.timeout(300)
def test_a_helper_function_with_a_print_is_spliced_in_program_order():
    """A module-level helper (a default argument too): its print and the caller's keep
    their order, its TF work joins the tape's in the graph."""
    def make(log):
        w = tf.Variable([1.0, -2.0])
        return noisy_step, {"w": w}, [(w, tf.constant([0.5, 1.5]))] * 5
    run = check(make, None, host_ops_allowed=frozenset())
    assert run.stdout.count("loss of 2 rows\nbetween\n") == 5


class Module(tf.keras.Model):
    """As d2l's Module: `call` takes *args and **kwargs and passes on to `forward`."""

    def __init__(self, log):
        super().__init__()
        self.net = tf.keras.layers.Dense(2, kernel_initializer="ones")
        self.log, self.training = log, None

    def call(self, X, *args, **kwargs):
        if kwargs and "training" in kwargs:
            self.training = kwargs['training']
        return self.forward(X, *args)

    def forward(self, X):
        return self.net(X)

    def objective(self, Y_hat, Y):  # (Keras keeps a `loss` attribute on a Model)
        Y_hat = tf.reshape(Y_hat, (-1, Y_hat.shape[-1]))  # a static shape, in the graph
        fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return fn(Y, Y_hat)

    def training_step(self, batch):
        l = self.objective(self(*batch[:-1]), batch[-1])
        self.log.append(float(l.numpy()))
        return l


def module_epoch(model, data, opt):
    for batch in data:
        with tf.GradientTape() as tape:
            loss = model.training_step(batch)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))


def module_epoch_training(model, data, opt):
    for batch in data:
        with tf.GradientTape() as tape:
            loss = model.objective(model(batch[0], training=True), batch[1])
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))


def _module(log, epoch):
    model = Module(log)
    model(X)
    labels = tf.constant([0, 1, 1, 0])
    data = tf.data.Dataset.from_tensor_slices((X, labels)).batch(2)
    opt = tf.keras.optimizers.SGD(0.1)
    variables = {f"v{i}": v for i, v in enumerate(model.trainable_variables)}
    return epoch, variables, [(model, data, opt)] * 6


@pytest.mark.timeout(300)
def test_a_model_whose_call_takes_args_and_kwargs_runs_in_the_graph():
    """`self(*batch[:-1])` on d2l's Module: a `call` taking *args/**kwargs was host work
    whole. It is judged for calls that pass nothing there (its `if kwargs and ...` folds
    away); the spread call is checked when traced."""
    run = check(lambda log: _module(log, module_epoch), None,
                host_ops_allowed=ITERATING)
    ops = graph_ops(next(iter(run.target.variants.values())).part)
    assert ops["MatMul"] >= 2, ops


@pytest.mark.timeout(300)
def test_an_assert_that_the_model_has_the_attribute_it_calls_runs_in_the_graph():
    """`assert hasattr(self, 'net')` before `self.net(X)` (d2l's LeNet and MLP models):
    the read of `self.net` that follows is what the trace depends on, so the assert holds
    whenever the trace does; the model's call is TF work and the step runs sliced."""
    def make(log):
        epoch, variables, calls = _module(log, module_epoch)
        model = programs.AssertingModule()
        model(X)
        variables = {f"v{i}": v for i, v in enumerate(model.trainable_variables)}
        return epoch, variables, [(model,) + calls[0][1:]] * 6
    run = check(make, None, host_ops_allowed=ITERATING)
    ops = graph_ops(next(iter(run.target.variants.values())).part)
    assert ops["MatMul"] >= 2, ops
    other = programs.CheckingOther()
    other.head = None
    other(X)
    kind, why = layers.judge_layer_call(type(other).call, other, oracle.classify)
    assert kind is None, why


@pytest.mark.timeout(300)
def test_a_keyword_into_such_a_call_stays_on_the_host():
    """`model(x, training=True)` would set `self.training` (host work the judgement assumed
    away): that call stays on the host, and so does the step (identical to eager)."""
    run = check(lambda log: _module(log, module_epoch_training), None, graph_calls=0)
    assert run.target.stats()["graph_calls"] == 0


class Config:
    def __init__(self, clip):
        self.clip = clip


def clipped_step(cfg, w, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * x)
    g = tape.gradient(loss, w)
    if cfg.clip > 0:  # d2l's `if self.gradient_clip_val > 0:` before its host helper
        print("clipping at", cfg.clip)
        g = g * 0.5
    w.assign_sub(0.1 * g)
    return loss


@pytest.mark.timeout(300)
def test_a_comparison_of_a_number_the_key_guards_takes_its_branch():
    """`if cfg.clip > 0:` with host work inside: the `if` ran on the host each call (its
    branch's values crossing both ways); the key guards `cfg.clip` by value, so the `if`
    becomes the branch it takes. A call with another value slices again (still eager's)."""
    def make(log):
        w = tf.Variable([1.0, -2.0])
        x = tf.constant([0.5, 1.5])
        calls = [(Config(0), w, x)] * 4 + [(Config(2), w, x)] * 3
        return clipped_step, {"w": w}, calls
    run = check(make, None, graph_calls=5, host_ops_allowed=frozenset())
    assert "if cfg.clip" not in run.target.last_plan.host_source


def scaled_loss(y_hat, y, scale=1.0):
    print("scaled")
    return tf.reduce_sum(tf.square(y_hat - y)) * scale


class Holder:
    def __init__(self, w):
        self.w, self.loss_fn = w, scaled_loss  # a plain function an object holds


def held_function_step(h, x, y):
    with tf.GradientTape() as tape:
        loss = h.loss_fn(x * h.w, y)
    h.w.assign_sub(0.1 * tape.gradient(loss, h.w))
    return loss


@pytest.mark.timeout(300)
def test_a_function_an_object_holds_is_spliced_without_a_receiver():
    """`h.loss_fn(a, b)` calls a plain function the object holds: no `self` is bound (a
    first version took `h` for its first parameter: `scale` got `y`)."""
    def make(log):
        w = tf.Variable([1.0, -2.0])
        h = Holder(w)
        return held_function_step, {"w": w}, [(h, tf.constant([0.5, 1.5]),
                                                tf.constant([1.0, 1.0]))] * 4
    check(make, None, host_ops_allowed=frozenset())


class Private:
    def __init__(self, w):
        self.__w = w

    def loss(self, x):
        print("private")
        return tf.reduce_sum(self.__w * x)

    @property
    def w(self):
        return self.__w


def private_step(p, x):
    with tf.GradientTape() as tape:
        loss = p.loss(x)
    p.w.assign_sub(0.1 * tape.gradient(loss, p.w))
    return loss


@pytest.mark.timeout(300)
def test_a_method_reading_a_private_attribute_is_not_spliced():
    """`self.__w` is `self._Private__w` in Private's methods only: written out in the caller
    it would read another attribute. Such a method stays a call (identical to eager)."""
    def make(log):
        w = tf.Variable([1.0, -2.0])
        return private_step, {"w": w}, [(Private(w), tf.constant([0.5, 1.5]))] * 4
    check(make, None, graph_calls=0)


def logged(f):
    @functools.wraps(f)
    def inner(w, x):
        print("logged call")
        return f(w, x)
    return inner


@logged
def logged_loss(w, x):
    print("in the loss")
    return tf.reduce_sum(w * x)


def loss_step(loss_fn, w, x):
    with tf.GradientTape() as tape:
        loss = loss_fn(w, x)
    w.assign_sub(0.1 * tape.gradient(loss, w))
    return loss


@pytest.mark.timeout(300)
def test_a_decorated_helper_keeps_its_decorator():
    """A helper behind a decorator (functools.wraps): splicing the function it wraps would
    drop the decorator's own work (its print). It stays a call."""
    def make(log):
        w = tf.Variable([1.0, -2.0])
        return loss_step, {"w": w}, [(logged_loss, w, tf.constant([0.5, 1.5]))] * 4
    run = check(make, None, graph_calls=0)
    assert run.stdout.count("logged call\nin the loss\n") == 4


def defaulted_loss(w, x, scale=1.0):
    print("defaulted")
    return tf.reduce_sum(w * x) * scale


defaulted_loss.__defaults__ = (3.0,)  # code may set them: the literal is not the value


@pytest.mark.timeout(300)
def test_a_default_changed_at_run_time_is_not_spliced_as_written():
    def make(log):
        w = tf.Variable([1.0, -2.0])
        return loss_step, {"w": w}, [(defaulted_loss, w, tf.constant([0.5, 1.5]))] * 4
    check(make, None, graph_calls=0)


W_RULE = tf.Variable([1.0, 2.0])


S_RULE = tf.Variable([0.0, 0.0])


def rule(params, grads, states, hyperparams):
    """As d2l's adagrad."""
    for p, s, g in zip(params, states, grads):
        s[:].assign(s + tf.math.square(g))
        p[:].assign(p - hyperparams["lr"] * g / tf.math.sqrt(s + 1e-6))


def train_with(fn, data):
    for x, y in data:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(x * W_RULE - y))
        grads = tape.gradient(loss, [W_RULE])
        fn([W_RULE], grads, (S_RULE,), {"lr": 0.1})


@pytest.mark.timeout(300)
def test_a_sliced_function_passed_in_is_called_not_spliced():
    """d2l's `train_ch11(adagrad, ...)` calls `trainer_fn(...)` as a statement, once a batch:
    `adagrad` is a function gpe slices (`gpe run` wrapped it). Spliced into the caller's
    profile call (its only call), its updates ran eagerly there and it was never called
    (d2l_opt_adagrad under `gpe run`: 0 calls of its 120, was 100% sliced)."""
    made = []

    def program(wrap, log):
        W_RULE.assign([1.0, 2.0])
        S_RULE.assign([0.0, 0.0])
        step = rule
        if wrap(rule) is not rule:  # under gpe: wrapped as `gpe run` wraps it
            step = auto(rule)
            made.append(step)
        wrap(train_with)(step, tf.data.Dataset.from_tensor_slices(
            (tf.reshape(tf.range(24.0), (12, 2)) / 24.0, tf.ones((12, 2)))).batch(1))
        return [W_RULE.read_value()], {"w": W_RULE}
    trainer = differential(program)[-1]
    stats = made[0].stats()
    # train_with's loop runs its body as a function gpe slices from the fourth batch on
    # (slicer/outline.py): the rule is called by the first four passes (sliced in the
    # fourth, as its profile calls are done), then traced into the body's TF part
    (body,) = trainer.builder.outlined.bodies.values()
    assert stats["calls"] == 4 and stats["graph_calls"] == 1, stats
    assert body.stats()["calls"] == 9 and body.stats()["graph_calls"] == 8, body.stats()


class MomentsInLists(tf.Module):
    """TF Core's Adam (guide core/optimizers_core): its moments, tensors, kept in lists on
    the object and replaced at every step."""

    def __init__(self, learning_rate=0.01, beta_1=0.9, beta_2=0.999, ep=1e-7):
        self.beta_1, self.beta_2, self.learning_rate, self.ep = beta_1, beta_2, learning_rate, ep
        self.t = 1.
        self.v_dvar, self.s_dvar = [], []
        self.built = False

    def apply_gradients(self, grads, vars):
        if not self.built:
            for var in vars:
                self.v_dvar.append(tf.Variable(tf.zeros(shape=var.shape)))
                self.s_dvar.append(tf.Variable(tf.zeros(shape=var.shape)))
            self.built = True
        for i, (d_var, var) in enumerate(zip(grads, vars)):
            self.v_dvar[i] = self.beta_1 * self.v_dvar[i] + (1 - self.beta_1) * d_var
            self.s_dvar[i] = self.beta_2 * self.s_dvar[i] + (1 - self.beta_2) * tf.square(d_var)
            v_dvar_bc = self.v_dvar[i] / (1 - (self.beta_1 ** self.t))
            s_dvar_bc = self.s_dvar[i] / (1 - (self.beta_2 ** self.t))
            var.assign_sub(self.learning_rate * (v_dvar_bc / (tf.sqrt(s_dvar_bc) + self.ep)))
        self.t += 1.


@pytest.mark.timeout(300)
def test_an_optimizer_keeping_tensors_in_lists_is_called_not_spliced():
    """`optimizer.apply_gradients(grads, [w])` outside the tape, of TF Core's Adam: spliced,
    the step's key held the moments, new tensors at every call, and the step never left
    its profile calls (tfcore_mlp under `@gpe.function`: 0 of 120 sliced). The update runs
    on the host as the call it is; the step's forward and gradient run in the graph."""
    x = tf.constant(np.arange(32, dtype=np.float32).reshape(8, 4) / 32.0)
    y = tf.constant(np.linspace(-1.0, 1.0, 8, dtype=np.float32).reshape(8, 1))

    def make(log):
        w = tf.Variable(tf.ones((4, 1)))
        opt = MomentsInLists()

        def train_step(x, y, w, optimizer):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
            grads = tape.gradient(loss, [w])
            optimizer.apply_gradients(grads, [w])
            return loss
        return train_step, {"w": w}, [(x, y, w, opt)] * 6
    under = check(make, None, host_ops_allowed=frozenset({
        "Mul", "AddV2", "Sub", "Square", "RealDiv", "Sqrt", "AssignSubVariableOp",
        "ReadVariableOp", "Pow"}))
    assert "MatMul" not in under.host_ops, under.host_ops


def test_slicing_again_names_the_spliced_temporaries_alike():
    """A spliced callee's locals are renamed per call site; the names once came from a
    process-wide counter, so each slicing of the same function named them anew, and a
    plan sliced again with "`var_gpe_s0` cannot cross: on the host" met `var_gpe_s1`, then
    `var_gpe_s2`...: TF Core's MLP step (its hand-written Adam spliced) profiled every call
    and never ran sliced. Per function now: slicing again gives the same names; messages
    and explain give the callee's own names (`l`, not `l_gpe_s0`)."""
    import gpe
    epoch, _, calls = _module([], module_epoch)
    sources = []
    for _ in range(2):  # two functions of the same code, each slicing it once
        f = gpe.function(epoch, adaptive=False)
        f(*calls[0])
        sources.append(f.builder.last_plan.host_source)
    assert "_gpe_s0" in sources[0] and sources[0] == sources[1]
    # and what gpe tells the user names the callee's locals as the callee does
    told = gpe.explain(f, file=io.StringIO())
    assert "_gpe_" not in told and "l = model.objective(" in told, told
