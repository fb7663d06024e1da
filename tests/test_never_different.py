"""Never different from eager (issue 29): what the user sees is eager's."""
import contextlib
import io
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

import gpe

pytestmark = pytest.mark.timeout(240)


def show(x):
    tf.print("x is", x)
    return tf.reduce_sum(tf.constant([1.0]))


def _printed(fn, calls):
    """What tf.print wrote (to the process's stderr) over `calls` calls."""
    read, write = os.pipe()
    saved = os.dup(2)
    os.dup2(write, 2)
    try:
        for x in calls:
            fn(x)
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(write)
    with os.fdopen(read) as f:
        return [line for line in f.read().splitlines() if line.startswith("x is")]


def test_tf_print_of_a_numpy_argument_prints_as_eager_does():
    """Eagerly tf.print formats a NumPy array as Python does (`array([1, 2, 3])`), in a
    graph as a tensor (`[1 2 3]`): once sliced, the output changed."""
    calls = [np.array([1, 2, 3])] * 5
    sliced = gpe.function(show, profile_calls=1)
    assert _printed(sliced, calls) == _printed(show, calls) == ["x is array([1, 2, 3])"] * 5
    assert sliced.stats()["graph_calls"] == 4  # the rest of the function still sliced
    # the call stays on the host; a tensor argument still prints in the graph
    tensor_calls = [tf.constant([1, 2, 3])] * 5
    again = gpe.function(show, profile_calls=1)
    assert _printed(again, tensor_calls) == _printed(show, tensor_calls) == \
        ["x is [1 2 3]"] * 5
    assert again.stats()["graph_calls"] == 4
