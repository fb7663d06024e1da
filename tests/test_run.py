"""`gpe run SCRIPT`: an unmodified script, its functions (and its local modules') sliced.

The scripts a test runs (plainly and under `gpe run`, side by side) depend on nothing the
test does: they run in the background (tests/background.py), and the test asserts on them."""
import os
import re
import sys
import textwrap

import tensorflow as tf

import background
from harness import gpe_cli

HELPERS = """
import tensorflow as tf

def loss_fn(pred, y):
    return tf.reduce_mean(tf.square(pred - y))

def fmt(v):
    return f"{v:.5f}"
"""

TRAIN = """
import sys
import tensorflow as tf
from helpers import fmt, loss_fn

w = tf.Variable(tf.ones([3, 1]))
history = []

def step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    g = tape.gradient(loss, w)
    w.assign_sub(0.1 * g)
    history.append(float(loss))
    return loss

class Scaler:
    def __init__(self, k):
        self.k = k

    def scale(self, x):
        return x * 2.0

if __name__ == "__main__":
    x = tf.reshape(tf.range(12, dtype=tf.float32), [4, 3]) / 10
    y = tf.ones([4, 1])
    for i in range(int(sys.argv[1])):
        l = step(x, y)
    l = step(x[:2], y[:2])  # a smaller last batch
    print("final", fmt(float(l)), [fmt(h) for h in history], w.numpy().ravel().tolist())
    print("loss_fn", fmt(float(loss_fn(x, 1.0))), "scaled", float(Scaler(3).scale(tf.constant(1.5))))
    print("argv", sys.argv[1:], __name__)
"""


# the children of each test below: each test's scripts, run side by side in a folder of their
# own (tests/background.py: in the background, after collection); name: (files, commands)
CHILDREN = {}


def children(test, files, *commands, **options):
    CHILDREN[test] = lambda: background.run_in_folder(files, *commands, **options)


def background_jobs():
    return CHILDREN


def ran(test):
    """The runs of the test's children, in the order of its commands."""
    return background.result(f"{__name__}.{test}", CHILDREN[test])


GPE_RUN = [sys.executable, "-m", "gpe.cli", "run"]
children("test_gpe_run_matches_plain_python_and_reports",
         {"helpers.py": textwrap.dedent(HELPERS), "train.py": textwrap.dedent(TRAIN)},
         [sys.executable, "train.py", "6"], GPE_RUN + ["--report", "train.py", "6"])


def test_gpe_run_matches_plain_python_and_reports():
    plain, sliced = ran("test_gpe_run_matches_plain_python_and_reports")
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert sliced.returncode == 0, sliced.stderr[-2000:]
    assert sliced.stdout == plain.stdout
    report = sliced.stderr[sliced.stderr.index("gpe report"):]
    assert "step: 7 calls, 3 sliced, 4 eager" in report  # 3 profile calls, then sliced
    assert ("guard failed x1: argument x: expected tensor float32(4, 3), got tensor "
            "float32(2, 3)") in report
    assert "variant 1: x: tensor float32(4, 3), y: tensor float32(4, 1)" in report
    assert "loss_fn: 1 calls" in report          # a function of a module next to the script
    assert "fmt" not in report                    # no TF work: plain Python
    assert "function(s) ran as plain Python" in report
    assert_every_eager_call_explained(report)


def assert_every_eager_call_explained(report: str) -> None:
    """Per function of a `--report`: its "eager xN: why" lines add up to its eager calls."""
    blocks = re.split(r"\n  (?=\S)", report)[1:]
    assert blocks, report
    for block in blocks:
        head = re.match(r"(\S+): \d+ calls, \d+ sliced, (\d+) eager", block)
        if head is None:
            continue
        told = sum(int(n) for n in re.findall(r"\n      eager x(\d+):", block))
        assert told == int(head.group(2)), block


TREE = """
import numpy as np
import tensorflow as tf

w = tf.Variable(np.eye(3, dtype=np.float32) * 0.5)
TREE = ((0, 1), (2, (0, 2)))
log = []

def encode(node, leaves):
    if isinstance(node, int):
        return leaves[node]
    return tf.tanh(tf.matmul(encode(node[0], leaves) + encode(node[1], leaves), w))

def scaled(x, k):
    log.append(k)                 # host work: a nested sliced call, not a pure-TF callee
    return x * k + 1.0

def step(x):
    y = scaled(x, 0.5)
    w.assign_add(tf.reduce_mean(y) * tf.eye(3) * 0.01)
    return tf.reduce_sum(encode(TREE, [y[i:i + 1] for i in range(3)]))

x = tf.reshape(tf.range(9, dtype=tf.float32), [3, 3]) / 10
print([round(float(step(x)), 6) for _ in range(6)], w.numpy().sum(), len(log))
"""


children("test_gpe_run_recursion_and_nested_sliced_calls_match_plain_python",
         {"tree.py": TREE}, [sys.executable, "tree.py"], GPE_RUN + ["--report", "tree.py"])


def test_gpe_run_recursion_and_nested_sliced_calls_match_plain_python():
    plain, sliced = ran("test_gpe_run_recursion_and_nested_sliced_calls_match_plain_python")
    assert plain.returncode == 0 and sliced.returncode == 0, sliced.stderr[-2000:]
    assert sliced.stdout == plain.stdout
    report = sliced.stderr[sliced.stderr.index("gpe report"):]
    assert "step: 6 calls, 3 sliced, 3 eager" in report, report


children("test_gpe_run_passes_exit_status_and_errors",
         {"fail.py": "import sys\nsys.exit(3)\n"},
         *(GPE_RUN + [arg] for arg in ("fail.py", "nope.py", "--help")))


def test_gpe_run_passes_exit_status_and_errors():
    failed, missing, helptext = ran("test_gpe_run_passes_exit_status_and_errors")
    assert failed.returncode == 3
    assert missing.returncode != 0 and "no such file" in missing.stderr
    assert "SCRIPT" in helptext.stdout and "--report" in helptext.stdout


def test_plain_functions_become_plain_after_one_call():
    from gpe.run import auto

    def add(a, b):
        return a + b
    wrapped = auto(add)
    assert wrapped(1, 2) == 3 and wrapped.plain
    assert wrapped("a", "b") == "ab"
    stats = wrapped.stats()  # later calls go straight to the function (only counted)
    assert stats["calls"] == stats["eager_calls"] == 2 and stats["variants"] == 0

    def gen():
        yield 1
    assert auto(gen) is gen


class _Loader:
    """A user's data loader."""

    def __iter__(self):
        for i in range(3):
            yield tf.fill([2], float(i))


def _epoch(loader, w):
    total = 0.0
    for x in loader:
        with open(os.devnull, "w") as log:  # a host `with`: the loop stays on the host
            w.assign_add(x)
            print(float(tf.reduce_sum(w)), file=log)
        total += float(tf.reduce_sum(w))
    return total


def test_a_function_whose_tf_work_all_runs_on_the_host_says_why():
    """Under `gpe run` a function whose TF ops are all inside a host statement (here a
    loop holding a host `with`) became plain Python with no reason counted: `--report` listed
    d2l's train_epoch_ch8 as "no TF work". Its first call now counts why."""
    from gpe.host.call.function import SlicedFunction

    w = tf.Variable(tf.zeros([2]))
    wrapped = SlicedFunction(_epoch, auto=True, payoff=False)  # as GPE_PAYOFF=0 wraps it
    assert wrapped(_Loader(), w) == _epoch(_Loader(), tf.Variable(tf.zeros([2])))
    assert wrapped.plain
    (why,) = wrapped.stats()["fallbacks"]
    assert why.startswith("its TF work runs on the host, eagerly: line "
                          f"{_epoch.__code__.co_firstlineno + 2} `for x in loader:`"), why


children("test_gpe_bench_reports_every_crossing", {},
         [sys.executable, "-m", "gpe.cli", "bench", "--calls", "30", "--repeats", "1"])


def test_gpe_bench_reports_every_crossing():
    (done,) = ran("test_gpe_bench_reports_every_crossing")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line]
    rows = [line for line in lines if not line.startswith(("operation", "ratio: "))]
    assert len(rows) == 10  # 7 measures and the 3 floors (bare queue operations)
    ratios = [line for line in lines if line.startswith("ratio: ")]
    assert len(ratios) == 2 and all(" / its floor: " in line for line in ratios), ratios
    for row in rows:
        wall, ratio, cpu = (float(v) for v in row[row.index("  ", 40):].split()[:3])
        assert 0 < wall < 1e6 and 0 < ratio and 0 < cpu < 1e6, row


KERAS_SCRIPT = """
import numpy as np
import tensorflow as tf
import keras

keras.utils.set_random_seed(0)


class Block(keras.layers.Layer):
    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1], self.units), initializer="glorot_uniform")

    def call(self, x):
        return tf.nn.relu(tf.matmul(x, self.w))


class MLP(keras.Model):
    def __init__(self):
        super().__init__()
        self.block = Block(16)
        self.head = keras.layers.Dense(3)

    def call(self, x, training=False):
        return self.head(self.block(x))

    @property
    def depth(self):
        return 2


class Trainer:
    def __init__(self, model):
        self.model = model
        self.opt = keras.optimizers.Adam(1e-2)
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def train_step(self, x, y):
        with tf.GradientTape() as tape:
            logits = self.model(x, training=True)
            loss = self.loss_fn(y, logits)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.opt.apply_gradients(zip(grads, self.model.trainable_variables))
        return loss


x = tf.constant(np.random.RandomState(0).randn(32, 8).astype("float32"))
y = tf.constant(np.random.RandomState(1).randint(0, 3, 32))
trainer = Trainer(MLP())
for i in range(12):
    loss = trainer.train_step(x, y)
    if i % 4 == 0:
        print(i, float(loss))
print("depth", trainer.model.depth)
print("weights", [v.numpy().tolist() for v in trainer.model.trainable_variables])
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3)])
model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
print("fit", model.fit(x, y, epochs=2, verbose=0).history["loss"])
"""


children("test_gpe_run_on_a_keras_subclassed_model_script", {"keras_train.py": KERAS_SCRIPT},
         [sys.executable, "keras_train.py"], GPE_RUN + ["--report", "keras_train.py"])


def test_gpe_run_on_a_keras_subclassed_model_script():
    """Constructors, `build` and properties stay as they are (wrapping them crashed Keras);
    the custom step runs sliced with the user's model in its TF part; `fit` works."""
    plain, sliced = ran("test_gpe_run_on_a_keras_subclassed_model_script")
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert sliced.returncode == 0, sliced.stderr[-2000:]
    assert sliced.stdout == plain.stdout
    report = sliced.stderr[sliced.stderr.index("gpe report"):]
    # first call: the model is not built yet (it counts as the first profile call); then
    # 2 more profile calls; then sliced
    assert "Trainer.train_step: 12 calls, 9 sliced, 3 eager" in report, report
    assert_every_eager_call_explained(report)


PICKLING = """
import multiprocessing as mp
import pickle
import tensorflow as tf

def square(v):
    return v * v

class Box:
    def __init__(self, k):
        self.k = k

    def add(self, v):
        return float(tf.constant(v) + self.k)

if __name__ == "__main__":
    print(pickle.loads(pickle.dumps(square)) is square, pickle.loads(pickle.dumps(Box(2.0).add))(1.0))
    with mp.get_context("spawn").Pool(1) as pool:  # the child resolves the plain function
        print(pool.map(square, [1, 2, 3]), pool.map(Box(1.0).add, [1.0]))
"""


children("test_gpe_run_functions_pickle_by_name", {"pickling.py": PICKLING},
         [sys.executable, "pickling.py"], GPE_RUN + ["pickling.py"])


def test_gpe_run_functions_pickle_by_name():
    """A wrapped function pickles as a function does (by module and qualified name: the same
    wrapper here, the plain function in a spawned child); a sliced bound method as a bound
    method (its instance and name)."""
    plain, sliced = ran("test_gpe_run_functions_pickle_by_name")
    assert plain.returncode == 0 and sliced.returncode == 0, sliced.stderr[-2000:]
    assert sliced.stdout == plain.stdout == "True 3.0\n[1, 4, 9] [2.0]\n"


def test_gpe_cli_bad_input_is_one_line_and_status_2(tmp_path):
    (tmp_path / "mod.py").write_text("import os\n\ndef f(x):\n    return x\n")
    (tmp_path / "pkg").mkdir()
    cases = {("explain", "mod.py:os"): "is not a function", ("explain", "pkg:f"): "not a file",
             ("run", "pkg"): "not a file", ("bench", "--calls", "0"): "--calls must be",
             ("bench", "--repeats", "-2"): "--repeats must be"}
    for args, message in cases.items():
        status, err = gpe_cli(tmp_path, *args)
        last = err.strip().splitlines()[-1]
        assert status == 2 and last.startswith("gpe: ") and message in last, (args, last)
    status, err = gpe_cli(tmp_path, "run")
    assert status == 2 and err.strip().endswith("required: SCRIPT")


MODULE_SCRIPT = """
import keras
import tensorflow as tf

class Dense(tf.Module):               # TF Core's guides: the forward pass is __call__
    def __init__(self, n_in, n_out, seed):
        super().__init__()
        self.w = tf.Variable(tf.random.stateless_normal([n_in, n_out], [seed, 1]) * 0.3)
        self.b = tf.Variable(tf.zeros([n_out]))

    def __call__(self, x):
        return tf.tanh(x @ self.w + self.b)

class MLP(tf.Module):
    def __init__(self):
        super().__init__()
        self.layers = [Dense(4, 8, 1), Dense(8, 1, 2)]

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

class Schedule:                       # plain Python: becomes plain after one call
    def __init__(self, base):
        self.base = base

    def __call__(self):
        return self.base * 0.5

class Scale(keras.layers.Layer):      # a Keras layer's __call__ stays Keras's
    def call(self, x):
        return x * 2.0

model, schedule, scale = MLP(), Schedule(0.2), Scale()

def train_step(x, y):
    lr = schedule()
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    for g, v in zip(grads, model.trainable_variables):
        v.assign_sub(lr * g)
    return loss

x = tf.reshape(tf.range(24, dtype=tf.float32), [6, 4]) / 24.0
y = tf.ones([6, 1])
print([round(float(train_step(x, y)), 6) for i in range(10)])
print([round(float(v), 6) for v in tf.reshape(model(x), [-1])], float(scale(tf.ones([1]))[0]))
"""


children("test_gpe_run_slices_a_tf_module_call", {"modules.py": MODULE_SCRIPT},
         [sys.executable, "modules.py"], GPE_RUN + ["--report", "modules.py"])


def test_gpe_run_slices_a_tf_module_call():
    """`__call__` of a tf.Module (TF Core's guides) is wrapped: run alone it is sliced, and
    inside the step it is part of the step's TF part; a plain class's `__call__` becomes
    plain Python, a Keras layer's is left to Keras."""
    plain, sliced = ran("test_gpe_run_slices_a_tf_module_call")
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert sliced.returncode == 0, sliced.stderr[-2000:]
    assert sliced.stdout == plain.stdout
    report = sliced.stderr[sliced.stderr.index("gpe report"):]
    step = re.search(r"train_step: 10 calls, (\d+) sliced", report)
    assert step and int(step.group(1)) >= 6, report  # after its profile calls
    assert "Dense.__call__" in report  # wrapped: a module's forward pass
    assert "Schedule" not in report and "Scale.__call__" not in report
    assert_every_eager_call_explained(report)


FAILING = """
import helper

def train():
    try:
        helper.go()
    except KeyError as exc:
        raise RuntimeError("wrapped") from exc

train()
"""


children("test_an_error_in_the_script_is_told_as_python_tells_it",
         {"helper.py": "def go():\n    raise KeyError('deep')\n",
          "fails.py": textwrap.dedent(FAILING), "typo.py": "def f(x)\n    return x\n"},
         *([sys.executable, script] for script in ("fails.py", "typo.py")),
         *(GPE_RUN + [script] for script in ("fails.py", "typo.py")))


def test_an_error_in_the_script_is_told_as_python_tells_it():
    """The script's traceback as `python SCRIPT` prints it (gpe's frames, those that started
    the script and those of the functions it wrapped, left out); a syntax error likewise."""
    done = ran("test_an_error_in_the_script_is_told_as_python_tells_it")
    for script, plain, sliced in zip(("fails.py", "typo.py"), done[:2], done[2:]):
        assert plain.returncode == 1 and plain.stderr.startswith(("Traceback", "  File"))
        # (gpe imports TensorFlow, whose C++ start-up lines come first on stderr)
        assert sliced.returncode == 1 and sliced.stderr.endswith("\n" + plain.stderr), script


GRAPH_ERROR = """
import numpy as np
import tensorflow as tf

emb = tf.Variable(tf.ones((10, 2)))


def lookup(ids):
    return tf.reduce_sum(tf.gather(emb, ids))


for i in range(8):
    print(i, float(lookup(np.array([1, 2, 12 if i == 7 else 3]))))
"""


children("test_an_op_error_raised_in_the_graph_is_told_at_the_users_lines",
         {"lookup.py": textwrap.dedent(GRAPH_ERROR)}, GPE_RUN + ["--report", "lookup.py"],
         timeout=300, environment=background.env(GPE_PAYOFF="0"))


def test_an_op_error_raised_in_the_graph_is_told_at_the_users_lines():
    """An op of the user's that fails in a sliced call (an index out of range): the
    traceback under gpe run shows the script's frames only, each at its own line (the
    gather's line in `lookup`, not line 1), as python SCRIPT shows them."""
    (sliced,) = ran("test_an_op_error_raised_in_the_graph_is_told_at_the_users_lines")
    assert sliced.returncode == 1, sliced.stderr[-2000:]
    assert "lookup: 8 calls, 5 sliced" in sliced.stderr, sliced.stderr[-2000:]
    told = sliced.stderr[sliced.stderr.index("Traceback"):]
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', told)
    assert [(os.path.basename(f), int(n), name) for f, n, name in frames] == [
        ("lookup.py", 13, "<module>"), ("lookup.py", 9, "lookup")], told
    assert "return tf.reduce_sum(tf.gather(emb, ids))" in told
    assert "InvalidArgumentError: indices[2] = 12 is not in [0, 10)" in told
