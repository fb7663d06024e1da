"""A 2-layer MLP regressor whose functions declare their argument types, so that
`gpe extract` can slice them ahead of time (see README.md in this folder)."""
import tensorflow as tf

import gpe

X = tf.TensorSpec([None, 8], tf.float32)
Y = tf.TensorSpec([None, 1], tf.float32)
LR = tf.TensorSpec([], tf.float32)


class Dense(tf.Module):
    def __init__(self, n_in, n_out, seed):
        super().__init__()
        self.w = tf.Variable(tf.random.stateless_normal([n_in, n_out], seed=[seed, 1]) * 0.3)
        self.b = tf.Variable(tf.zeros([n_out]))


W1 = tf.Variable(tf.random.stateless_normal([8, 16], seed=[1, 2]) * 0.3, name="W1")
B1 = tf.Variable(tf.zeros([16]), name="B1")
head = Dense(16, 1, seed=3)
history = []  # losses appended by train_step (host Python: runs on every call)
fits = []  # losses appended by Regressor.fit_step


def _hidden(x):
    return tf.nn.relu(tf.matmul(x, W1) + B1)


def _predict(x):
    return tf.matmul(_hidden(x), head.w) + head.b


@gpe.function(input_signature=[X])
def predict(x):
    return _predict(x)


@gpe.function(input_signature=[X, Y])
def loss(x, y):
    return tf.reduce_mean(tf.square(_predict(x) - y))


@gpe.function(input_signature=[X, Y, LR])
def train_step(x, y, lr):
    with tf.GradientTape() as tape:
        value = tf.reduce_mean(tf.square(_predict(x) - y))
    g_w1, g_b1, g_w, g_b = tape.gradient(value, [W1, B1, head.w, head.b])
    W1.assign_sub(lr * g_w1)
    B1.assign_sub(lr * g_b1)
    head.w.assign_sub(lr * g_w)
    head.b.assign_sub(lr * g_b)
    history.append(value)
    return value


def normalise(x: X):
    mean = tf.reduce_mean(x, axis=0)
    std = tf.math.reduce_std(x, axis=0) + 1e-6
    return (x - mean) / std


class Regressor(tf.Module):
    """A model as libraries ship them: its variables its own, its methods' argument types
    declared (extracted for `regressor` below; at load, each object called binds its own
    variables, which must match these by name, dtype and shape)."""

    def __init__(self, n_in=8, n_hidden=16, seed=5):
        super().__init__(name="regressor")
        with self.name_scope:
            self.w1 = tf.Variable(tf.random.stateless_normal([n_in, n_hidden], seed=[seed, 1])
                                  * 0.3, name="w1")
            self.w2 = tf.Variable(tf.random.stateless_normal([n_hidden, 1], seed=[seed, 2])
                                  * 0.3, name="w2")

    @gpe.function(input_signature=[X])
    def __call__(self, x):
        return tf.matmul(tf.nn.relu(tf.matmul(x, self.w1)), self.w2)

    @gpe.function(input_signature=[X, Y, LR])
    def fit_step(self, x, y, lr):
        with tf.GradientTape() as tape:
            value = tf.reduce_mean(tf.square(
                tf.matmul(tf.nn.relu(tf.matmul(x, self.w1)), self.w2) - y))
        g1, g2 = tape.gradient(value, [self.w1, self.w2])
        self.w1.assign_sub(lr * g1)
        self.w2.assign_sub(lr * g2)
        fits.append(value)
        return value


regressor = Regressor()  # the instance the methods are extracted for


def summary(values):  # no declared types: `gpe extract` skips it
    return float(tf.reduce_mean(values))


if __name__ == "__main__":  # never runs under `gpe extract` (it only imports the module)
    print(float(loss(tf.ones([4, 8]), tf.zeros([4, 1]))))
