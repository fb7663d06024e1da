"""Programs whose statements pytest must not rewrite (it rewrites `assert` in test modules,
which would make the eager run's messages differ from the sliced run's)."""
import contextlib

import numpy as np
import tensorflow as tf


def host_with_and_assert(log):
    @contextlib.contextmanager
    def section(name):
        log.append(("enter", name))
        yield
        log.append(("exit", name))

    def step(x):
        y = tf.reduce_max(x)
        with section("report"):
            log.append(float(y))
        assert float(y) < 10, "too big"
        return y * 3.0
    return step, {}


def scaled_by_a_checked_helper(log):
    """A helper that checks its inputs with `assert` (on static shapes and a default
    Python number), called inside the tape."""
    w = tf.Variable(np.ones((3, 2), np.float32) * 0.5)

    def dense(x, rate=0.5):
        assert len(x.shape) == 2 and x.shape[1] == w.shape[0], "x must be (batch, 3)"
        assert 0 <= rate <= 1
        return tf.matmul(x, w) * (1.0 - rate)

    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(dense(x) ** 2)
        w.assign_sub(0.1 * tape.gradient(loss, w))
        return loss

    x = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    return step, {"w": w}, [(x,)] * 4


DROPOUT = 0.25  # a module-level rate, as d2l's `dropout1` (read by the step, passed on)


def dropout_like(x, rate):
    """d2l's `dropout_layer`, without its randomness: checks and branches on its rate."""
    assert 0 <= rate <= 1
    if rate == 1:
        return tf.zeros_like(x)
    if rate == 0:
        return x
    return x * (1.0 - rate)


def helper_given_a_module_number(log):
    """The step passes a module-level number to a helper inside the tape."""
    w = tf.Variable(np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2))

    def step(x):
        with tf.GradientTape() as tape:
            h = dropout_like(tf.matmul(x, w), DROPOUT)
            loss = tf.reduce_sum(h ** 2)
        w.assign_sub(0.1 * tape.gradient(loss, w))
        return loss

    x = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    return step, {"w": w}, [(x,)] * 4


class AssertingModule(tf.keras.Model):
    """As d2l's Module, whose `forward` checks that the model has its network first."""

    def __init__(self):
        super().__init__()
        self.net = tf.keras.layers.Dense(2, kernel_initializer="ones")

    def call(self, X, *args, **kwargs):
        if kwargs and "training" in kwargs:
            self.training = kwargs['training']
        return self.forward(X, *args)

    def forward(self, X):
        assert hasattr(self, 'net'), 'Neural network is defined'
        return self.net(X)

    def objective(self, Y_hat, Y):
        fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return fn(Y, Y_hat)

    def training_step(self, batch):
        return self.objective(self(*batch[:-1]), batch[-1])


class CheckingOther(AssertingModule):
    def forward(self, X):
        assert hasattr(self, 'head')  # an attribute it does not read: nothing guards it
        return self.net(X)


def conv_epoch(ds, conv, log, lr):
    """An epoch over a dataset of images with a Keras Conv2D layer, the loss read on the
    host inside the tape (the plan cannot hand a misfit back: tests/test_exact_arithmetic)."""
    for x, y in ds:
        with tf.GradientTape() as tape:
            out = tf.reduce_mean(conv(x), axis=[1, 2, 3])
            loss = tf.reduce_mean(tf.square(out - tf.cast(y, tf.float32)))
            log.append(float(loss.numpy()))
        grads = tape.gradient(loss, conv.trainable_variables)
        for grad, var in zip(grads, conv.trainable_variables):
            var.assign_sub(lr * grad)


class ConvTrainer:
    """d2l's Trainer in small: an epoch over the dataset it holds (`self.loader`), the loss
    read on the host inside the tape (tests/test_exact_arithmetic)."""

    def __init__(self, conv, loader, log):
        self.conv, self.loader, self.log = conv, loader, log

    def fit_epoch(self):
        for batch in self.loader:
            with tf.GradientTape() as tape:
                out = tf.reduce_mean(self.conv(batch[0]), axis=[1, 2, 3])
                loss = tf.reduce_mean(tf.square(out - tf.cast(batch[1], tf.float32)))
                self.log.append(float(loss.numpy()))
            grads = tape.gradient(loss, self.conv.trainable_variables)
            for grad, var in zip(grads, self.conv.trainable_variables):
                var.assign_sub(0.5 * grad)


class ConvBlock(tf.keras.Model):
    """d2l's Residual in small: blocks of several widths share one `call`, so its argument
    takes a third shape, and its dimensions that changed are relaxed to any size
    (tests/test_exact_arithmetic)."""

    def __init__(self, channels):
        super().__init__()
        self.conv = tf.keras.layers.Conv2D(channels, 3, padding="same")

    def call(self, X):
        return tf.nn.relu(self.conv(X))


class Projected(tf.keras.Model):
    """d2l's Residual's shape: blocks with and without a projection of X share one `call`,
    whose plans differ (the `if` on a None attribute is host work; tests/test_objects)."""

    def __init__(self, project):
        super().__init__()
        self.dense = tf.keras.layers.Dense(4)
        self.proj = tf.keras.layers.Dense(4) if project else None

    def call(self, X):
        Y = self.dense(X)
        if self.proj is not None:
            X = self.proj(X)
        Y += X
        return tf.nn.relu(Y)
