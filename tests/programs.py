"""Programs whose statements pytest must not rewrite (it rewrites `assert` in test modules,
which would make the eager run's messages differ from the sliced run's)."""
import contextlib

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
