"""Never different from eager (issue 29): what the user sees is eager's."""
import collections
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


def digits(x):
    s = 0
    while x > 0:
        s = s * 10 + x + 2
        x -= 1
    return s


def bumped(x):
    s = 0
    if x > 0:
        s = x + 1
    return s


def reset(x):
    s = 1.5
    while x > 0:
        s = x * 2
        x -= 1
        s = 7
    return s


@pytest.mark.parametrize("fn", [digits, bumped, reset])
def test_a_python_number_the_tf_part_never_rebound_stays_a_python_number(fn):
    """`s = 0; while x > 0: s = ...` with x = 0: eager returns the int 0, sliced calls
    returned an int32 tensor (AutoGraph's `while_with_local_var`): the TF part carries `s`
    as a tensor whatever happened. Where no TF statement rebound it (zero iterations, the
    untaken branch) or host-side Python rebound it last, the host keeps its own value."""
    sliced = gpe.function(fn, profile_calls=2)
    for v in [3, 2, 0, 1, 0, 4, 0, 2]:
        want, got = fn(tf.constant(v)), sliced(tf.constant(v))
        assert type(got) is type(want) or (tf.is_tensor(got) and tf.is_tensor(want)), v
        assert np.array_equal(np.asarray(got), np.asarray(want)), v
    assert sliced.stats()["graph_calls"] == 6


class _Pair(list):
    """A list subclass, as Keras' TrackedList is (`self.state = [h, c]` on a layer)."""


_Named = collections.namedtuple("_Named", "h c")


@pytest.mark.parametrize("kind", ["tracked", "subclass", "namedtuple"])
def test_a_container_subclass_of_tensors_passed_to_a_sliced_helper_is_not_frozen(kind):
    """`helper(TrackedList([x, x * 2.0]))` returned the third call's value from the
    fourth on (issue 29 item 1): a container that is not exactly list/tuple/dict, taken as
    an opaque constant. Each call's contents reach the helper, called directly and from a
    sliced caller, and both run sliced."""
    from keras.src.utils.tracking import TrackedList
    make = {"tracked": TrackedList, "subclass": _Pair,
            "namedtuple": lambda v: _Named(*v)}[kind]

    @gpe.function(profile_calls=1)
    def helper(state):
        return state[0] * 1.0 + state[1] * 0.0

    def step(x):
        return helper(make([x, x * 2.0]))

    caller = gpe.function(step, profile_calls=1)
    direct = [float(helper(make([tf.constant(float(i)), tf.constant(0.0)]))) for i in range(6)]
    nested = [float(caller(tf.constant(float(i)))) for i in range(6)]
    assert direct == nested == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert caller.stats()["graph_calls"] == 5
    assert helper.stats()["graph_calls"] >= 5


class _Holder:
    """A user's object a TF op converts whole (TF's `__tf_tensor__` protocol)."""

    def __init__(self, t):
        self.t = t

    def __tf_tensor__(self, dtype=None, name=None):
        return tf.convert_to_tensor(self.t, dtype=dtype, name=name)


def test_an_object_a_tf_op_takes_whole_is_converted_each_call():
    """`tf.add(held, 1.0)` on an object argument of a user's class: the TF part was traced
    with the first object's tensor and the key described the argument by its type only, so
    every later object, or the same one holding another tensor, ran on the first one's
    value (the class of issue 29 item 1, found again by the fuzzer's seed 343). The
    conversion is host work now, and a function with nothing left for the graph runs
    eagerly (a variant would run its host work behind gpe's crossings)."""
    def helper(held):
        return tf.add(held, 1.0)
    sliced = gpe.function(helper, profile_calls=1)
    fresh = [_Holder(tf.constant(float(i))) for i in range(5)]
    assert [float(sliced(h)) for h in fresh] == [float(helper(h)) for h in fresh]
    held, got, want = _Holder(tf.constant(0.0)), [], []
    for i in range(6):  # the same object, holding this call's tensor
        held.t = tf.constant(float(i))
        got.append(float(sliced(held)))
        want.append(float(helper(held)))
    assert got == want == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    stats = sliced.stats()
    assert stats["graph_calls"] == 0 and any(
        "no statement of it runs in the graph" in r for r in stats["fallbacks"]), stats


def last_of(n):
    i = 7
    for i in n:
        i = i + 1
    return i


def last_of_list(n):
    i = 7
    for i in tf.constant(n, dtype=tf.int32):
        i = i + 1
    return i


def test_a_loop_over_an_empty_tensor_or_a_list_argument_as_eager():
    """`for i in tf.constant(n)`: with `n = []` sliced calls raised FIFOQueueV2's
    "component_types of 0" (issue 29), and a list argument `n` reached tf.constant in the
    TF part as values the host sends, which tracing refused ("Expected int32, but got
    HostValue"): the function ran eagerly throughout."""
    calls = [[1, 2], [3, 4], [], [5, 6], [], [8, 9], [], [2, 1]]
    for fn, arg in ((last_of, lambda n: tf.constant(n, tf.int32)), (last_of_list, list)):
        sliced = gpe.function(fn, profile_calls=1)
        for n in calls:
            want, got = fn(arg(n)), sliced(arg(n))
            assert type(got) is type(want) or tf.is_tensor(got) and tf.is_tensor(want), n
            assert np.array_equal(np.asarray(got), np.asarray(want)), n
        # a tensor: all but the profile call of each shape, (2,) and (0,), ran sliced; a
        # list, whose length the key does not hold: its channel refuses another length, so
        # the empty ones ran eagerly
        assert sliced.stats()["graph_calls"] == (6 if fn is last_of else 4), fn


class _Batches:
    """A data loader the call key does not look into (a tf.data pipeline over a generator,
    batches of any size): its batches' shapes are seen only as the loop runs."""

    def __init__(self):
        self.rows = 3
        self.data = tf.data.Dataset.from_generator(
            self.batches, output_signature=tf.TensorSpec((None, 2), tf.float32))

    def batches(self):
        for i in range(2):
            yield np.arange(self.rows * 2, dtype=np.float32).reshape(self.rows, 2) + i


def row_sum(x):
    total = tf.zeros([2])
    for row in x:  # traced over x's rows: needs its first dimension
        total = total + row * 2.0
    return total


def epoch(batches):
    out = 0.0
    for x in batches:
        out += float(tf.reduce_sum(row_sum(x)))
    return out


def test_loop_values_keep_their_seen_shape_and_a_new_one_is_handed_back():
    """A loop's per-iteration values cross with the dimensions every profiled iteration
    agreed on (the callee's `for row in x` needs x's first one); an iteration whose value
    has another shape hands the call over to the host mid-call, which finishes it eagerly:
    every result is eager's. (Sliced again, with that dimension open, the callee's loop
    over rows cannot be traced: the function then runs eagerly.)"""
    sliced = gpe.function(epoch)
    batches = _Batches()
    for rows in [3, 3, 3, 3, 5, 3, 3, 4, 3]:
        batches.rows = rows
        assert sliced(batches.data) == epoch(batches.data), rows
    stats = sliced.stats()
    assert stats["graph_calls"] >= 1  # the 4th call: its rows unrolled in the graph
    assert [why for why in stats["guard_failures"] if why.startswith("mid-call")] == [
        f"mid-call: gpe: channel 0 (loop x) of epoch at {__file__}:{epoch.__code__.co_firstlineno + 2} "
        "expected tensor float32(3, 2), got tensor float32(5, 2)"], stats
