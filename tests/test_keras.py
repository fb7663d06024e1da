"""Keras's own layers, models and optimizers run in the TF part; a user's own layer class
(which may have Python side effects in `call`) stays on the host."""
import keras
import numpy as np
import tensorflow as tf

from harness import check

RNG = np.random.default_rng(0)
X = tf.constant(RNG.normal(size=(8, 4)).astype(np.float32))
Y = tf.constant(RNG.normal(size=(8, 1)).astype(np.float32))


def model_and_optimizer():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    model(X)  # built before the first step, as most programs do
    return model, keras.optimizers.Adam(0.01)


def weights(model, opt):
    out = {f"w{i}": v for i, v in enumerate(model.weights)}
    out["iterations"] = opt.iterations
    return out


def test_keras_training_step_runs_in_the_graph():
    def make(log):
        model, opt = model_and_optimizer()

        def train_step(x, y):
            with tf.GradientTape() as tape:
                pred = model(x)
                loss = tf.reduce_mean(tf.square(pred - y))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            log.append(float(loss))
            return loss
        step = train_step
        return step, weights(model, opt)
    under = check(make, [(X, Y)] * 6)
    assert len(under.log) == 6


def test_user_layer_with_side_effects_stays_on_the_host():
    def make(log):
        class Noisy(keras.layers.Layer):
            def build(self, shape):
                self.w = self.add_weight(shape=(shape[-1], 1), initializer="ones")

            def call(self, x):
                log.append("called")  # a Python side effect on every call
                return tf.matmul(x, self.w)

        keras.utils.set_random_seed(2)
        layer = Noisy()
        layer(X)
        del log[:]

        def forward(x):
            h = layer(x)
            return tf.reduce_sum(h * h)
        return forward, {"w": layer.w}
    # the layer's call runs eagerly on the host (so "called" is logged every call); what it
    # returns is of a kind the slicer does not know, so the arithmetic on it stays there too
    under = check(make, [(X,)] * 4, host_ops_allowed=frozenset(
        {"MatMul", "ReadVariableOp", "Mul", "Sum"}))
    assert under.log == ["called"] * 4
