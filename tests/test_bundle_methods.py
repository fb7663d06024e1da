"""Bundles of methods: a library's model class with `@gpe.function(input_signature=...)`
methods extracts, and at load each object the methods are called on binds its own
variables; an object whose variables differ (shape, name, count) is refused with a clear
BundleError, never run with the wrong variables. One extraction, one client subprocess.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import background
from side_by_side import side_by_side

MODULE = """
import tensorflow as tf
import gpe

X = tf.TensorSpec([None, 3], tf.float32)
log = []


class Net(tf.Module):
    def __init__(self, width=4, name="net"):
        super().__init__(name=name)
        with self.name_scope:
            self.w = tf.Variable(tf.reshape(tf.range(3 * width, dtype=tf.float32), [3, width])
                                 / 10, name="w")
            self.b = tf.Variable(tf.ones([width]), name="b")

    @gpe.function(input_signature=[X])
    def __call__(self, x):
        return tf.reduce_sum(tf.nn.relu(tf.matmul(x, self.w) + self.b), axis=1)

    @gpe.function(input_signature=[X, tf.TensorSpec([], tf.float32)])
    def step(self, x, lr):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, self.w) + self.b))
        gw, gb = tape.gradient(loss, [self.w, self.b])
        self.w.assign_sub(lr * gw)
        self.b.assign_sub(lr * gb)
        log.append(float(loss))
        return loss


class NeedsArgs(tf.Module):
    def __init__(self, width):
        super().__init__()
        self.v = tf.Variable(tf.zeros([width]))

    @gpe.function(input_signature=[X])
    def __call__(self, x):
        return x * tf.reduce_sum(self.v)


net = Net()
"""

CLIENT = """
import json, sys
import numpy as np
import tensorflow as tf
import gpe
from gpe.host.bundles import bundle_load

lib = gpe.load(sys.argv[1])
import mlib.nets as m
report = {"loaded": sorted(lib.functions), "registered_at_load": len(bundle_load.registered)}
xs = [tf.constant(np.random.RandomState(i).rand(5, 3), tf.float32) for i in range(6)]

def train(net, step, call):
    return [float(step(net, x, tf.constant(0.1))) for x in xs], np.asarray(call(net, xs[0]))

mine = m.Net()
start = [v.numpy() for v in mine.variables]
eager = train(mine, m.Net.step.fn, m.Net.__call__.fn)
eager_vars, eager_log = [v.numpy() for v in mine.variables], list(m.log)
for v, s in zip(mine.variables, start):
    v.assign(s)
m.log.clear()
sliced = train(mine, lambda n, *a: n.step(*a), lambda n, x: n(x))
report["same"] = (eager[0] == sliced[0] and np.array_equal(eager[1], sliced[1]) and
                  all(np.array_equal(a, v.numpy()) for a, v in zip(eager_vars, mine.variables))
                  and eager_log == m.log)
report["library_net_untouched"] = all(np.array_equal(a, v.numpy())
                                      for a, v in zip(start, m.net.variables))
other = m.Net()  # a second object: its own variables, the first's unchanged
before = [v.numpy() for v in mine.variables]
other.step(xs[0], tf.constant(0.5))
report["second_object_own_vars"] = all(np.array_equal(a, v.numpy())
                                       for a, v in zip(before, mine.variables))
report["step"] = m.Net.step.stats()
report["call"] = m.Net.__call__.stats()
refused = {}
for label, obj in [("shape", m.Net(width=5)), ("name", m.Net(name="other"))]:
    try:
        obj(xs[0])
        refused[label] = None
    except gpe.BundleError as exc:
        refused[label] = [exc.kind, str(exc)]
report["refused"] = refused
print(json.dumps(report))
"""


def run(args, cwd, timeout=300):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=background.env(TF_CPP_MIN_LOG_LEVEL="3"))


def _extract_and_load():
    """mlib extracted, then `gpe inspect` and the client side by side (both only read the
    bundle), in a folder of their own: (extraction, inspect, client); None for the two not
    run when the extraction failed."""
    with background.folder() as folder:
        os.makedirs(os.path.join(folder, "mlib"))
        open(os.path.join(folder, "mlib", "__init__.py"), "w").close()
        with open(os.path.join(folder, "mlib", "nets.py"), "w") as f:
            f.write(textwrap.dedent(MODULE))
        out = os.path.join(folder, "bundle")
        done = run([sys.executable, "-m", "gpe.cli", "extract", "mlib", "-o", out], folder)
        if done.returncode != 0:
            return done, None, None
        with open(os.path.join(folder, "client.py"), "w") as f:
            f.write(textwrap.dedent(CLIENT))
        inspected, client = side_by_side(
            lambda: run([sys.executable, "-m", "gpe.cli", "inspect", out], folder),
            lambda: run([sys.executable, "client.py", out], folder))
        return done, inspected, client


def background_jobs():
    """The runs the test below asserts on, started after collection (tests/background.py)."""
    return {"test_methods_extract_and_bind_the_called_objects_variables": _extract_and_load}


@pytest.mark.timeout(600)
def test_methods_extract_and_bind_the_called_objects_variables():
    done, inspected, client = background.result(
        f"{__name__}.test_methods_extract_and_bind_the_called_objects_variables",
        _extract_and_load)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "mlib.nets.Net.__call__ ... ok" in done.stderr
    assert "mlib.nets.Net.step ... ok" in done.stderr
    assert "mlib.nets.NeedsArgs.__call__ ... skipped: a method of NeedsArgs: no instance" \
        in done.stderr
    assert "captures self.variables[0] net/b:0 float32[4]" in inspected.stdout or \
        "captures self.variables[1] net/b:0 float32[4]" in inspected.stdout, inspected.stdout
    assert client.returncode == 0, client.stderr[-3000:]
    report = json.loads(client.stdout.splitlines()[-1])
    assert report["loaded"] == ["mlib.nets.Net.__call__", "mlib.nets.Net.step"]
    assert report["registered_at_load"] == 0  # bound per object, at its first call
    assert report["same"] and report["library_net_untouched"]
    assert report["second_object_own_vars"]
    step = report["step"]
    # every call in the graph or timed eagerly against it; none profiled or traced
    assert step["profile_calls"] == 0 and step["graph_calls"] >= 4
    assert step["variants"] == 2  # one per object, both from the bundle
    assert all(b.endswith("(from bundle)") for b in step["variants_built"])
    assert report["call"]["profile_calls"] == 0 and report["call"]["graph_calls"] >= 1
    kind, message = report["refused"]["shape"]
    assert kind == "binding" and "float32[3, 5]" in message and "float32[3, 4]" in message
    kind, message = report["refused"]["name"]
    assert kind == "binding" and "other/" in message and "net/" in message
