"""gpe's graph options keep every read of a variable ordered with the writes of it.

Grappler's dependency optimizer, with the arithmetic optimizer off (gpe turns it off: it
changes values), dropped a read's control edge to a later write of the same variable as
redundant (another path ordered them), then removed the IdentityN on that path (Keras
optimizers put one over the gradients): the read and the write were left unordered, and
now and then the read saw the update. Found as a WGAN-GP critic step whose pre-update
mean(critic(x)) was, in about 1 run of 15, computed with the updated output kernel: a silent
difference. gpe now leaves the dependency optimizer off. The check is static: TensorFlow
dumps the sink's graph after optimization (TF_DUMP_GRAPH_PREFIX), and every ReadVariableOp
must be ordered (a path either way) with every write of the same variable.
"""
import collections
import contextlib
import glob
import os
import subprocess
import sys
import tempfile

import pytest
import tensorflow as tf
from google.protobuf import text_format
from tensorflow.core.framework import graph_pb2

import background
import gpe

PROGRAM = '''
import tensorflow as tf
import gpe

W1 = tf.Variable(tf.random.stateless_normal([3, 4], seed=[1, 2]))
W2 = tf.Variable(tf.random.stateless_normal([4, 1], seed=[3, 4]))


def step(x, y):
    with tf.GradientTape() as tape:
        pr = tf.reduce_mean(tf.nn.relu(x @ W1) @ W2)  # W2's value reaches only W1's gradient
        loss = pr + tf.reduce_mean(tf.nn.relu(y @ W1) @ W2)
    g1, g2 = tf.identity_n(tape.gradient(loss, [W1, W2]))  # as Keras optimizers do
    W1.assign_sub(0.01 * g1)
    W2.assign_sub(0.01 * g2)
    return pr


sliced = gpe.function(step, adaptive=False, profile_calls=1)
x = tf.random.stateless_normal([6, 3], seed=[5, 6])
for _ in range(3):
    float(sliced(x, x + 1.0))
assert sliced.stats()["graph_calls"] == 2, sliced.stats()
'''
WRITES = ("AssignSubVariableOp", "AssignAddVariableOp", "AssignVariableOp")


def unordered_pairs(graph: graph_pb2.GraphDef) -> list[tuple[str, str]]:
    """(write, read) of one variable with no path between them (loop back edges aside)."""
    nodes = {n.name: n for n in graph.node}
    after = collections.defaultdict(set)
    for node in graph.node:
        for name in node.input:
            source = name.lstrip("^").split(":")[0]
            if node.op != "NextIteration" and getattr(nodes.get(source), "op", "") != \
                    "NextIteration":
                after[source].add(node.name)

    def reaches(a: str, b: str) -> bool:
        seen, stack = {a}, [a]
        while stack:
            for nxt in after[stack.pop()] - seen:
                if nxt == b:
                    return True
                seen.add(nxt)
                stack.append(nxt)
        return False

    reads = [n for n in graph.node if n.op == "ReadVariableOp"]
    return [(w.name, r.name) for w in graph.node if w.op in WRITES for r in reads
            if r.input[0] == w.input[0] and not reaches(r.name, w.name)
            and not reaches(w.name, r.name)]


def _dumped():
    """PROGRAM run with TF's graph dumps on, in a folder of its own (in the background:
    tests/background.py): (its run, {name: text} of the optimized graphs dumped)."""
    with background.folder() as folder:
        with open(os.path.join(folder, "prog.py"), "w") as f:
            f.write(PROGRAM)
        dumps = os.path.join(folder, "dumps")
        env = background.env(TF_DUMP_GRAPH_PREFIX=dumps, TF_DUMP_GRAPH_NAME_FILTER="*",
                             TF_DUMP_GRAPH_GROUPS="main")
        done = subprocess.run([sys.executable, "prog.py"], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=170)
        found = {}
        for path in sorted(glob.glob(os.path.join(dumps, "*after_graph_optimization*"))):
            with open(path) as f:
                found[os.path.basename(path)] = f.read()
        return done, found


def background_jobs():
    return {"test_reads_and_writes_of_a_variable_stay_ordered_after_grappler": _dumped}


@pytest.mark.timeout(180)
def test_reads_and_writes_of_a_variable_stay_ordered_after_grappler():
    done, dumps = background.result(
        f"{__name__}.test_reads_and_writes_of_a_variable_stay_ordered_after_grappler", _dumped)
    assert done.returncode == 0, done.stderr[-2000:]
    assert dumps, "TensorFlow dumped no optimized graph"
    checked = 0
    for name, text in dumps.items():
        graph = graph_pb2.GraphDef()
        text_format.Parse(text, graph)
        checked += sum(n.op in WRITES for n in graph.node)
        assert not unordered_pairs(graph), (name, unordered_pairs(graph))
    assert checked >= 2  # the sink's graph with the part's two writes was checked


# A `print` and a `tf.print` in a loop the host runs: the host's print of one iteration
# comes after the graph's print of the iteration before. The host went on as soon as it had
# what it needed of that iteration (the tensor test, or nothing), and nothing made it wait
# for the graph's print: when the graph was slower than the host (on a loaded machine, now
# and then; here always, the graph's print waiting for a matmul) the two prints of
# consecutive iterations came out swapped. The host now waits there by construction (a
# check before its first statement of an iteration, whose token the graph sends once the
# work of the iteration before is done: tfprog/iterations.py).
SQUARE = tf.random.stateless_normal([256, 256], seed=[7, 8])


def _slow(i):
    """A value the graph's print waits for: slower than the host's way round the loop."""
    return tf.reduce_sum(tf.matmul(SQUARE, tf.matmul(SQUARE, SQUARE))) + tf.cast(i, tf.float32)


def counter_loop(n):
    i = tf.constant(0)
    while i < n:
        print("host", "step")
        tf.print("graph", i, _slow(i) > -1e30)
        i += 1
    return i


def range_loop(n):
    s = tf.constant(0)
    for k in range(3):
        print("host", k)
        tf.print("graph", s, _slow(s) > -1e30)
        s = s + n
    return s


@contextlib.contextmanager
def _one_stream():
    """Python's prints (sys.stdout) and tf.print's (the process's stderr) into one file, in
    the order they were written; gives a function reading it."""
    with tempfile.TemporaryFile() as out:
        saved_fd, saved_stdout = os.dup(2), sys.stdout
        sys.stderr.flush()
        os.dup2(out.fileno(), 2)
        sys.stdout = open(2, "w", buffering=1, closefd=False)
        try:
            yield lambda: (out.seek(0), out.read().decode())[1]
        finally:
            sys.stdout.flush()
            sys.stdout = saved_stdout
            os.dup2(saved_fd, 2)
            os.close(saved_fd)


def _printed(fn, calls: int) -> list[str]:
    with _one_stream() as read:
        for k in range(calls):
            print("call", k)
            fn(tf.constant(3))
        sys.stdout.flush()
        text = read()
    return [line for line in text.splitlines() if line.split(" ")[0] in
            ("call", "host", "graph")]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("loop", [counter_loop, range_loop], ids=["tensor_while", "range_for"])
def test_print_and_tf_print_in_a_loop_keep_eager_order(loop):
    calls = 8
    eager = _printed(loop, calls)
    sliced = gpe.function(loop, adaptive=False)
    assert _printed(sliced, calls) == eager
    assert len(eager) == calls * 7
    stats = sliced.stats()
    assert stats["graph_calls"] == calls - 3, stats  # the loop's TF work ran in the graph
    assert not stats["fallbacks"], stats


VALUES = tf.constant([1.0, 2.0, 3.0])


def gathering_loop(n):
    s = tf.constant(0.0)
    for k in range(3):
        print("host", k)
        s = s + tf.gather(VALUES, n + k)
    return s


@pytest.mark.timeout(120)
def test_an_error_ending_an_iteration_comes_before_the_next_iterations_host_work(capsys):
    """The same class: a gather that fails at the end of an iteration raised only after
    the host had gone on to the next iteration's print (and the error came later)."""
    def run(fn):
        for n in [0, 0, 0, 0, 0, 2]:
            try:
                fn(tf.constant(n))
            except tf.errors.InvalidArgumentError:
                print("raised")
        return capsys.readouterr().out.splitlines()
    eager = run(gathering_loop)
    sliced = gpe.function(gathering_loop, adaptive=False)
    assert run(sliced) == eager
    assert eager[-3:] == ["host 0", "host 1", "raised"]
    assert sliced.stats()["graph_calls"] == 3, sliced.stats()
