"""A sliced call's results, used as a program uses eager tensors (issue 13: never silently
different): every observation of them under gpe equals eager's, and they stay pipelined
(not waited for) until a use needs the value.

The one observation gpe cannot answer as eager is the class itself: `type(r)` and
`isinstance(r, tf.Tensor)` (see host/runtime/pending.py's docstring for why faking it is unsafe);
the test names those and checks they are the only differences.
"""
from __future__ import annotations

import copy
import json
import pickle
import weakref

import keras
import numpy as np
import tensorflow as tf

import gpe

# type() and isinstance(r, tf.Tensor / EagerTensor): a Pending is a core.Tensor, not a
# tf.Tensor (host/runtime/pending.py says why it cannot claim to be one)
CLASS_ONLY = {"type", "type is EagerTensor", "isinstance tf.Tensor", "isinstance (ndarray, Tensor)",
              "isinstance EagerTensor"}


def _observe(o, r, s):  # noqa: PLR0915: one line per observation
    o("type", lambda: type(r).__name__)
    o("type is EagerTensor", lambda: type(r) is type(tf.constant(1.0)))
    o("isinstance tf.Tensor", lambda: isinstance(r, tf.Tensor))
    o("isinstance (ndarray, Tensor)", lambda: isinstance(r, (np.ndarray, tf.Tensor)))
    o("isinstance EagerTensor", lambda: isinstance(r, type(tf.constant(1.0))))
    o("isinstance Variable / ndarray", lambda: (isinstance(r, tf.Variable), isinstance(r, np.ndarray)))
    o("tf.is_tensor", lambda: tf.is_tensor(r))
    o("keras.ops.is_tensor", lambda: keras.ops.is_tensor(r))
    o("nest", lambda: tf.nest.flatten({"a": r, "b": [s]}))
    o("nest map", lambda: tf.nest.map_structure(lambda t: t * 2, {"a": r, "b": [s]}))
    o("keras tree", lambda: keras.tree.flatten({"a": r}))
    o("hasattr numpy", lambda: hasattr(r, "numpy") and "numpy" in dir(r))
    o("dtype shape ndim", lambda: (r.dtype, r.shape, r.ndim, r.get_shape(), r.device))
    o("repr str", lambda: (repr(r), str(r), f"{r}"))
    o("format", lambda: (f"{s:.3f} {s}", "{:.2f}".format(s), "%.2f" % s))
    o("compare", lambda: (s > 1.0, r == r, r == None, bool(s > 1.0)))  # noqa: E711
    o("sorted max", lambda: (sorted([s, s - 1]), max(s, 0.5)))
    o("iter len index", lambda: (list(r), len(r), r[0], 2.0 in r))
    o("numpy interop", lambda: (np.asarray(r), np.mean(r), np.add(r, 1), np.array([s, s]),
                                np.stack([r, r]), np.float32(s)))
    o("numpy priority", lambda: (np.ones([2, 2], np.float32) + r, np.float32(2) * s,
                                 np.ones([1, 2], np.float32) @ r))
    o("python numbers", lambda: (float(s), int(s), json.dumps(float(s)), abs(r), s ** 2))
    o("round", lambda: round(s))
    o("divmod shift", lambda: divmod(s, 2.0))
    o("hash", lambda: hash(r))
    o("set", lambda: r in {1})
    o("ref", lambda: (r.ref().deref() is r, r.experimental_ref() == r.ref()))
    o("copy", lambda: (copy.copy(r) is r, copy.deepcopy(r) is r))
    o("weakref", lambda: weakref.ref(r)() is r)
    o("pickle", lambda: pickle.loads(pickle.dumps(r)))
    o("tf ops", lambda: (tf.reduce_mean(r), tf.cast(r, tf.int32), tf.concat([r, r], 0),
                         tf.stack([s, s]), tf.shape(r), tf.where(r > 7.0, r, 0.0), r @ r, 2 * r))
    o("conversion", lambda: (tf.convert_to_tensor(r), tf.constant(r), tf.identity(r)))
    o("variable", lambda: (tf.Variable(r).numpy(), tf.Variable(tf.zeros([2, 2])).assign(r)))
    o("tensor array", lambda: tf.TensorArray(tf.float32, 1).write(0, r).stack())
    o("composite", lambda: (tf.RaggedTensor.from_tensor(r), tf.sparse.to_dense(tf.sparse.from_dense(r))))
    o("specs", lambda: (tf.TensorSpec.from_tensor(r), tf.type_spec_from_value(r)))
    o("tf.function", lambda: tf.function(lambda t: t + 1)(r))
    o("keras", lambda: (keras.ops.sum(r), keras.ops.convert_to_numpy(r),
                        keras.layers.Dense(1, kernel_initializer="ones")(r)))
    o("tf.data", lambda: (list(tf.data.Dataset.from_tensor_slices(r)),
                          list(tf.data.Dataset.from_tensors((r, s)))))
    o("dlpack", lambda: tf.experimental.dlpack.from_dlpack(tf.experimental.dlpack.to_dlpack(r)))
    o("tape", lambda: _gradient(r))


def _gradient(r):
    with tf.GradientTape() as tape:
        tape.watch(r)
        y = r * r
    return tape.gradient(y, r)


def _plain(value):
    """A comparable form of an observation (tensors and arrays as (kind, dtype, values))."""
    if isinstance(value, (list, tuple)):
        return type(value).__name__, [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if hasattr(value, "_gpe_pending"):
        value = value.resolve()
    if isinstance(value, (tf.Tensor, tf.Variable)):
        return "tensor", value.dtype.name, value.numpy().tolist()
    if isinstance(value, np.ndarray):
        return "array", value.dtype.str, value.tolist()
    if isinstance(value, (tf.RaggedTensor, tf.TypeSpec)):
        return repr(value)
    return type(value).__name__, repr(value) if isinstance(value, np.generic) else value


def _observations(sliced: bool):
    v = tf.Variable(tf.ones([2, 3]))

    def step(x):
        y = tf.matmul(x, v, transpose_b=True)
        return y, tf.reduce_sum(y)

    f = gpe.function(step, profile_calls=1) if sliced else step
    x = tf.constant([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    for _ in range(3):
        r, s = f(x)
    untouched = [getattr(t, "_value", "eager") for t in (r, s)]
    # what needs no value does not wait for it
    quiet = (tf.is_tensor(r), r.dtype, r.ref().deref() is r, copy.copy(r) is r)
    untouched += [getattr(t, "_value", "eager") for t in (r, s)]
    seen = {}

    def o(name, use):
        try:
            seen[name] = _plain(use())
        except Exception as exc:  # an exception is an observation like any other
            seen[name] = ("raised", type(exc).__name__, str(exc))
    _observe(o, r, s)
    return seen, untouched, quiet, (f.stats() if sliced else None)


def test_results_answer_as_eager_tensors():
    eager, _, eager_quiet, _ = _observations(sliced=False)
    under, untouched, quiet, stats = _observations(sliced=True)
    assert stats["graph_calls"] == 2, stats
    assert untouched == [None] * 4, "the results were waited for before any use needed them"
    assert _plain(quiet) == _plain(eager_quiet)
    assert eager.keys() == under.keys()
    differ = {name for name in eager if eager[name] != under[name]}
    for name in differ - CLASS_ONLY:
        raise AssertionError(f"{name}: eager {eager[name]!r}, gpe {under[name]!r}")
    assert differ == CLASS_ONLY, f"now the same as eager: {CLASS_ONLY - differ}"
