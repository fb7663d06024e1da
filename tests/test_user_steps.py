"""Training steps written the way users write them, which ran correctly but eagerly on
every call: each program runs eagerly and under gpe, compared on everything observable
(results, final variables, side effects, printed output; tests/harness.py), and its
calls after the profile call(s) must run sliced.

- a Keras subclassed model's own step calling Keras's `self.compute_loss(...)` (the
  "Customizing what happens in fit" guide), then `self.optimizer.apply_gradients`;
- a plain `Trainer` whose step gets the model's output from another method of its own
  (`logits = self.forward(x)`), its model built by the first step;
- a loop over a list argument that is empty on every call (`for e in extra:`).
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

import gpe
from harness import check, differential

pytestmark = pytest.mark.timeout(180)

RNG = np.random.default_rng(0)
X = tf.constant(RNG.normal(size=(8, 4)).astype(np.float32))
Y = tf.constant(RNG.normal(size=(8, 1)).astype(np.float32))
LABELS = tf.constant(RNG.integers(0, 3, size=8))


class Regressor(keras.Model):
    """The guide's model: layers in __init__, a `call`, and a step of its own that asks
    Keras for the compiled loss."""

    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(8, activation="relu")
        self.out = keras.layers.Dense(1)

    def call(self, x, training=False):
        return self.out(self.hidden(x))

    def train_step_fn(self, x, y):
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return loss


def regressor():
    keras.utils.set_random_seed(1)
    return Regressor()


def compiled_regressor(loss="mse"):
    model = regressor()
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss=loss)
    model(X)
    return model


def model_weights(model):
    out = {f"w{i}": v for i, v in enumerate(model.weights)}
    out["iterations"] = model.optimizer.iterations
    return out


def test_keras_compute_loss_in_a_models_own_step_runs_in_the_graph():
    def make(log):
        model = compiled_regressor()
        return Regressor.train_step_fn, model_weights(model), [(model, X, Y)] * 6

    # Keras builds the compiled loss at its first call: that call runs eagerly (gpe
    # slices again once it is built), then one profile call
    under = check(make, None, graph_calls=4)
    assert under.target.stats()["eager_calls"] == 2


def test_compute_loss_with_y_and_y_pred_only_decorated_method():
    """`self.compute_loss(y=y, y_pred=y_pred)` in a method decorated with gpe.function,
    called as `model.train_step_fn(x, y)` in a loop, with a metric and a print."""
    def program(wrap, log):
        class Model(Regressor):
            @wrap
            def train_step_fn(self, x, y):
                with tf.GradientTape() as tape:
                    y_pred = self(x, training=True)
                    loss = self.compute_loss(y=y, y_pred=y_pred)
                grads = tape.gradient(loss, self.trainable_variables)
                self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
                self.tracker.update_state(loss)
                return loss

        keras.utils.set_random_seed(2)
        model = Model()
        model.tracker = keras.metrics.Mean()
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mae")
        model(X)
        losses = []
        for step in range(6):
            loss = model.train_step_fn(X, Y)
            losses.append(loss)
            if step % 2:
                print(step, float(loss))
        variables = dict(model_weights(model), total=model.tracker.variables[0])
        return losses, variables

    (step,) = differential(program)
    assert step.stats()["graph_calls"] == 4  # (the compiled loss built, then a profile call)


def test_recompiled_loss_is_not_the_one_traced():
    """`model.compile(loss=...)` again between calls: the next step uses the new loss, as
    eagerly (the TF part captured the old one: the call key holds the compiled loss)."""
    def program(wrap, log):
        model = compiled_regressor()
        step = wrap(Regressor.train_step_fn)
        losses = []
        for i in range(8):
            if i == 4:
                model.compile(optimizer=model.optimizer, loss="mae")
            losses.append(step(model, X, Y))
        return losses, model_weights(model)

    (step,) = differential(program)
    assert step.stats()["graph_calls"] == 4  # two eager calls after each compile


def guide_step(model, x, y):
    with tf.GradientTape() as tape:
        loss = model.compute_loss(y=y, y_pred=model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    model.optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


def sequential():
    keras.utils.set_random_seed(5)
    return keras.Sequential([keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])


@pytest.mark.parametrize("make_model", [regressor, sequential])
def test_keras_compute_loss_of_a_user_loss_with_side_effects_stays_eager(make_model):
    """A user's loss function that appends to a log: Keras calls it inside compute_loss,
    so the call is host work (traced once, the log would get one entry: it did for a
    Sequential model, any of whose Keras methods counted as TF work)."""
    def program(wrap, log):
        def noisy_mse(y_true, y_pred):
            log.append("loss")
            return tf.reduce_mean(tf.square(y_true - y_pred), axis=-1)
        model = make_model()
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss=noisy_mse)
        model(X)
        step = wrap(guide_step)
        return [step(model, X, Y) for _ in range(4)], model_weights(model)

    differential(program)


def test_keras_compute_loss_of_a_sequential_model_runs_in_the_graph():
    def program(wrap, log):
        model = sequential()
        model.compile(optimizer=keras.optimizers.Adam(0.01),
                      loss=keras.losses.Huber(delta=0.5))
        model(X)
        step = wrap(guide_step)
        return [step(model, X, Y) for _ in range(6)], model_weights(model)

    (step,) = differential(program)
    assert step.stats()["graph_calls"] == 4


class Net(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(8, activation="relu")
        self.out = keras.layers.Dense(3)

    def call(self, inputs, training=False):
        h = self.hidden(inputs)
        if training:
            h = h * 0.5
        return self.out(h)


class Trainer:
    """A plain class holding a model; the forward pass is a method of its own."""

    def __init__(self, model):
        self.model = model
        self.opt = keras.optimizers.Adam(0.01)
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def forward(self, x):
        return self.model(x, training=True)

    def step(self, x, y):
        with tf.GradientTape() as tape:
            logits = self.forward(x)
            loss = self.loss_fn(y, logits)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss


def test_trainer_forward_method_with_a_model_built_by_the_first_step():
    """The model is built by the first step (as most trainers leave it): the forward
    method was judged host work while the model was unbuilt, and that judgement was kept
    after the model was built (every call ran eagerly: "`logits`: a tensor made by host
    code inside a `with` block")."""
    def make(log):
        keras.utils.set_random_seed(3)
        trainer = Trainer(Net())  # not called yet
        calls = [(X, LABELS)] * 6
        return trainer.step, {}, calls

    under = check(make, None, graph_calls=4)
    assert under.target.stats()["eager_calls"] == 2  # the unbuilt call, then the profile call
    assert under.target.stats()["fallbacks"] == {}


def test_trainer_forward_method_with_a_built_model():
    def make(log):
        keras.utils.set_random_seed(4)
        model = Net()
        model(X)
        trainer = Trainer(model)
        variables = {f"w{i}": v for i, v in enumerate(model.weights)}
        return trainer.step, variables, [(X, LABELS)] * 5

    check(make, None)


class CompiledTrainer(Trainer):
    """The loss is the model's compiled one, asked for in a method of the trainer."""

    def loss(self, y, logits):
        return self.model.compute_loss(y=y, y_pred=logits)

    def step(self, x, y):
        with tf.GradientTape() as tape:
            logits = self.forward(x)
            loss = self.loss(y, logits)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss


def test_trainer_methods_asking_for_the_compiled_loss_judged_again_after_compile():
    """`self.loss(y, logits)` is judged TF work once, for this trainer; compiled again with
    a user's loss that logs, the method is judged again (host work: the log gets an entry
    every call, as eagerly), not taken from what was judged for the first loss."""
    def program(wrap, log):
        def logged(y, logits):
            log.append("loss")
            return keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)

        keras.utils.set_random_seed(6)
        model = Net()
        model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        trainer, step, losses = CompiledTrainer(model), wrap(CompiledTrainer.step), []
        for i in range(8):
            if i == 5:
                model.compile(loss=logged)
            losses.append(step(trainer, X, LABELS))
        return losses, {f"w{i}": v for i, v in enumerate(model.weights)}

    (step,) = differential(program)
    assert step.stats()["graph_calls"] == 3  # calls 3 to 5 (the model built, a profile)


def loop_over_extra(log):
    w = tf.Variable(2.0)

    def step(x, extra):
        for e in extra:
            x = x + e
        return tf.reduce_sum(x * w)
    return step, {"w": w}


def test_a_loop_over_an_empty_list_argument():
    """An empty list is described by its type only (plain data of any length), so the loop
    is the host's and each iteration would send `e`: no profile call ever reached that
    crossing (16 profile calls, then eager for good). The loop never iterated: gpe
    slices again with `x + e` on the host (as eager runs it) and the rest in the graph."""
    under = check(loop_over_extra, [(X, [])] * 6, graph_calls=4)
    assert under.target.stats()["profile_calls"] == 2


def test_a_loop_over_a_list_argument_empty_on_the_first_calls():
    """The same function given numbers later (the same call key: a plain list): the host
    adds them as eager does, on the TF part's value."""
    calls = [(X, [])] * 3 + [(X, [1.0]), (X, []), (X, [2.0, np.float32(3.0)]), (X, [])]
    under = check(loop_over_extra, calls, graph_calls=5,
                  host_ops_allowed=frozenset({"AddV2"}))
    assert under.host_ops == {"AddV2": 3}  # x + e, once per element, on the host


LOUD_LOG = []


class QuietBlock(keras.layers.Layer):
    def __init__(self):
        super().__init__()
        self.d = keras.layers.Dense(4)

    def call(self, x):
        return self.d(x)


class LoudBlock(QuietBlock):
    def call(self, x):
        LOUD_LOG.append("loud block called")  # host work: a side effect per call
        return self.d(x)


class BlockNet(keras.Model):
    def __init__(self, block):
        super().__init__()
        self.block = block
        self.out = keras.layers.Dense(1)

    def call(self, x):
        return self.out(self.block(x))


def swap_step(trainer, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(trainer.model(x) - y))
    grads = tape.gradient(loss, trainer.model.trainable_variables)
    trainer.opt.apply_gradients(zip(grads, trainer.model.trainable_variables))
    return loss


def test_a_model_swapped_for_another_of_its_class_with_a_host_layer_keeps_its_effects():
    """A trainer's model replaced by another instance of the same class whose sublayer has
    a side effect: the plan sliced for the first model (its calls all TF work) was taken
    for the second (the plan was shared by the captures' types), so the side effect ran
    only while tracing (a few log entries where eager has one per call). A model's
    calls are judged per instance: the second is sliced on its own (host work in the tape:
    it runs eagerly)."""
    class Trainer:
        pass

    def run(sliced):
        keras.utils.set_random_seed(5)
        LOUD_LOG.clear()
        trainer = Trainer()
        trainer.model, trainer.opt = BlockNet(QuietBlock()), keras.optimizers.SGD(0.05)
        quiet = [float(sliced(trainer, X, Y)) for _ in range(8)]
        trainer.model, trainer.opt = BlockNet(LoudBlock()), keras.optimizers.SGD(0.05)
        loud = [float(sliced(trainer, X, Y)) for _ in range(12)]
        return quiet, loud, list(LOUD_LOG)

    eager = run(swap_step)
    step = gpe.function(swap_step, profile_calls=1, adaptive=False)
    under = run(step)
    assert under == eager and len(eager[2]) >= 12  # (Keras builds the model by calls too)
    assert step.stats()["graph_calls"] >= 6  # the quiet model's calls ran sliced
