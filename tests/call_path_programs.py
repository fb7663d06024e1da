"""Programs for tests/test_call_path_keys.py (outside the test module: pytest rewrites a
test module's source, which gpe would refuse as changed)."""
import tensorflow as tf

SCALE = tf.Variable(2.0)  # rebound by the test: the call key guards the global's identity


def scaled(x):
    return x * SCALE


def closure_scaled():
    """A closure variable of the module global's name: the closure's is guarded."""
    SCALE = tf.Variable(3.0)  # noqa: N806

    def scaled_here(x):
        return x * SCALE

    def rebind(value):
        nonlocal SCALE
        SCALE = value
    return scaled_here, rebind


class Holder:
    """An object whose attribute a sliced function reads (guarded by the attribute's
    identity, through the parameter that holds the object)."""

    value: tf.Variable

    def __init__(self, value):
        self.value = value


def through(holder, x):
    return x * holder.value  # guarded through the first parameter: holder.value


def shifted(x, n):
    return x + n  # n, a Python int, folded into the TF part (in the key by value)


def no_entry(log):
    """A part with no entry values (its dispatch queue carries the word alone)."""
    v = tf.Variable(1.0)

    def bump():
        v.assign_add(1.0)
    return bump, {"v": v}, [()] * 4


def mixed_entry(log):
    """Entry values of several dtypes, a variable updated, a value read back."""
    v = tf.Variable(tf.zeros([3]))

    def step(x, n, flags):
        v.assign_add(x * tf.cast(n, tf.float32))
        return tf.reduce_sum(v) + tf.cast(tf.reduce_sum(tf.cast(flags, tf.int32)), tf.float32)
    x = tf.constant([1.0, 2.0, 3.0])
    return step, {"v": v}, [(x, tf.constant(2), tf.constant([True, False]))] * 4


TABLE = tf.random.stateless_normal([64, 64], seed=[5, 6])  # captured by value (held)


def held_constant(log):
    """A large tensor the part captured by value: read from the variable holding it."""
    v = tf.Variable(tf.zeros([64]))

    def step(x):
        v.assign_add(tf.linalg.matvec(TABLE, x))
        return tf.reduce_max(v)
    return step, {"v": v}, [(tf.ones([64]),)] * 4


NAMES = tf.constant(["a", "bb", "ccc"])  # a string tensor: no variable holds it


def captured_strings(log):
    """A capture the wrapper captures itself (a string tensor): that wrapper is traced."""
    v = tf.Variable(0)

    def step(x):
        v.assign_add(tf.reduce_sum(tf.strings.length(NAMES)) + x)
        return v.read_value()
    return step, {"v": v}, [(tf.constant(1),)] * 4
