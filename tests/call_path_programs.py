"""Programs for tests/test_call_path_keys.py (outside the test module: pytest rewrites a
test module's source, which gpe would refuse as changed)."""
import tensorflow as tf

SCALE = tf.Variable(2.0)  # rebound by the test: the call key guards the global's identity


def scaled(x):
    return x * SCALE


class Holder:
    def __init__(self, value):
        self.value = value


def through(holder, x):
    return x * holder.value  # guarded through the first parameter: holder.value


def shifted(x, n):
    return x + n  # n, a Python int, folded into the TF part (in the key by value)
