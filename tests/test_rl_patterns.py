"""Step shapes from public reinforcement-learning code (actor-critic, DQN) that never ran
sliced: a Keras loss object constructed inside the function that uses it, on every call
(`ce = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True); ce(a, logits)`),
and one called inline (`tf.keras.losses.MeanSquaredError()(y, p)`). Each runs eagerly and
under gpe, compared on everything observable, and its calls after the profile call run
sliced."""
import numpy as np
import tensorflow as tf

from harness import check

STATES = tf.constant(np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4))
ACTIONS = np.array([0, 1, 1, 0, 1])
ADVANTAGES = np.linspace(-0.5, 0.5, 5).astype(np.float32).reshape(5, 1)
TARGETS = np.linspace(0, 1, 5).astype(np.float32).reshape(5, 1)


def _model(n_out, seed):
    tf.keras.utils.set_random_seed(seed)
    return tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="relu"),
                                tf.keras.layers.Dense(n_out)])


class Actor:
    def __init__(self):
        self.model = _model(2, 11)
        self.opt = tf.keras.optimizers.Adam(0.01)

    def compute_loss(self, actions, logits, advantages):
        ce = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        actions = tf.cast(actions, tf.int32)
        return ce(actions, logits, sample_weight=tf.stop_gradient(advantages))

    def train(self, states, actions, advantages):
        with tf.GradientTape() as tape:
            logits = self.model(states, training=True)
            loss = self.compute_loss(actions, logits, advantages)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss


def test_a_loss_object_made_inside_the_loss_function():
    def make(log):
        actor = Actor()
        weights = {f"w{i}": v for i, v in enumerate(actor.model.trainable_variables)}
        return actor.train, weights, [(STATES, ACTIONS, ADVANTAGES)] * 4

    check(make, None)


def test_a_loss_object_called_inline():
    def make(log):
        model = _model(1, 12)
        opt = tf.keras.optimizers.SGD(0.05)

        def train(states, targets):
            with tf.GradientTape() as tape:
                values = model(states, training=True)
                loss = tf.keras.losses.MeanSquaredError()(targets, values)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            log.append("trained")
            return loss
        weights = {f"w{i}": v for i, v in enumerate(model.trainable_variables)}
        return train, weights, [(STATES, TARGETS)] * 4

    check(make, None)


def test_a_loss_made_per_call_from_a_host_value_that_changes():
    def make(log):
        model = _model(1, 13)
        opt = tf.keras.optimizers.SGD(0.05)
        agent = type("Agent", (), {})()
        agent.delta = 0.5

        def train(states, targets):
            with tf.GradientTape() as tape:
                values = model(states, training=True)
                loss = tf.keras.losses.Huber(delta=agent.delta)(targets, values)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            agent.delta *= 0.5  # host state the next call's loss is made from
            return loss
        weights = {f"w{i}": v for i, v in enumerate(model.trainable_variables)}
        return train, weights, [(STATES, TARGETS * 4)] * 4

    check(make, None)


def test_a_metric_made_per_call_stays_on_the_host():
    # a Keras metric object makes variables when constructed: it is not made in the TF part
    def make(log):
        def evaluate(x):
            mean = tf.keras.metrics.Mean()
            mean.update_state(tf.reduce_sum(x, axis=1))
            log.append(float(mean.result()))
            return tf.reduce_max(x) * 2.0
        return evaluate, {}, [(STATES,)] * 3

    # the metric's own ops run eagerly on the host, as they must; the rest is sliced
    run = check(make, None, host_ops_allowed=frozenset(
        {"AssignAddVariableOp", "ReadVariableOp", "Sum", "Cast", "Size", "DivNoNan",
         "VarHandleOp", "AssignVariableOp", "Fill", "Reshape", "Identity", "Const",
         "DestroyResourceOp", "Mul", "AddV2", "Shape"}))
    assert run.target.stats()["graph_calls"] == 2
