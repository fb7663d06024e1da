"""`gpe.explain` and `gpe explain FILE:FUNCTION`."""
import contextlib
import io
import os
import sys
import textwrap

import tensorflow as tf

import background
import gpe
from side_by_side import run_all

W = tf.Variable(tf.ones([3, 1]))


def step(x):
    y = tf.matmul(x, W)
    loss = tf.reduce_sum(y)
    print(float(loss))
    W.assign_sub(0.01 * W * loss)
    return loss


def rows(text):
    return {line.split()[0]: line for line in text.splitlines()[1:] if line.split()
            and line.split()[0].isdigit()}


def test_explain_lists_place_reason_and_crossings_per_line():
    out = io.StringIO()
    text = gpe.explain(step, file=out)
    assert out.getvalue() == text
    first = step.__code__.co_firstlineno
    lines = rows(text)
    assert "TF" in lines[str(first + 1)] and "tf.matmul" in lines[str(first + 1)]
    assert "host" in lines[str(first + 3)] and "float" in lines[str(first + 3)]
    assert "changes TF state" in lines[str(first + 4)]
    assert "out: loss (TF->host)" in text
    assert "in: x (host->TF when the call starts)" in text
    assert "waits for the host to get here" in text


def test_explain_after_calls_uses_the_real_argument_types():
    sliced = gpe.function(step)
    sliced(tf.ones([2, 3]))
    text = gpe.explain(sliced, file=io.StringIO())
    assert "assumed" not in text


def test_explain_reports_refusal():
    def numbers(x):
        yield x
    text = gpe.explain(numbers, file=io.StringIO())
    assert "runs eagerly" in text and "generators and coroutines are not sliced yet" in text


def _cli_runs():
    """`gpe explain` of a script's function, of a name it lacks, and --help, side by side in a
    folder of their own (in the background: tests/background.py)."""
    with background.folder() as folder:
        script = os.path.join(folder, "model.py")
        with open(script, "w") as f:
            f.write(textwrap.dedent("""
                import tensorflow as tf
                def forward(x, w):
                    h = tf.matmul(x, w)
                    print(h.numpy())
                    return tf.nn.relu(h)
            """))
        return run_all(
            *([sys.executable, "-m", "gpe.cli", "explain", arg]
              for arg in (f"{script}:forward", f"{script}:nope", "--help")),
            capture_output=True, text=True, timeout=120,
            env=background.env(TF_CPP_MIN_LOG_LEVEL="3"), cwd=folder)


def background_jobs():
    return {"test_cli_explain": _cli_runs}


def test_cli_explain():
    done, bad, helptext = background.result(f"{__name__}.test_cli_explain", _cli_runs)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "forward" in done.stdout and "tf.matmul" in done.stdout
    assert "out: h (TF->host)" in done.stdout
    assert bad.returncode != 0 and "no function 'nope'" in bad.stderr
    assert "FILE:FUNCTION" in helptext.stdout


class _Trainer:
    def __init__(self):
        self.w = tf.Variable(tf.ones([3, 1]))
        self.losses = []

    def step(self, x):
        loss = tf.reduce_sum(tf.matmul(x, self.w))
        self.losses.append(loss)
        return loss


def test_explain_a_sliced_bound_method_before_and_after_calls():
    trainer = _Trainer()
    sliced = gpe.function(trainer.step)  # bound: the object is `self`
    before = gpe.explain(sliced, file=io.StringIO())
    assert "_Trainer.step" in before and "assumed" in before
    lines = {line.split()[0]: line for line in before.splitlines()[2:] if line.split()
             and line.split()[0].isdigit()}
    matmul = next(l for l in lines.values() if "tf.matmul" in l)
    append = next(l for l in lines.values() if "append" in l)
    assert matmul.split()[1] == "TF" and append.split()[1] == "host", before
    for _ in range(5):
        sliced(tf.ones([2, 3]))
    assert sliced.stats()["graph_calls"] == 2
    after = gpe.explain(sliced, file=io.StringIO())
    assert "assumed" not in after and "_Trainer.step" in after
    assert gpe.explain(trainer.step, file=io.StringIO()).splitlines()[2:] == \
        before.splitlines()[2:]  # the plain bound method: the same plan


# why a step runs eagerly, named through its callees (issue 28) ----------------------------
def _scaled(scale):
    def loss_fn(y_hat, y):  # a closure: not spliced into the tape
        print("computing the loss")
        return tf.reduce_mean(tf.square(y_hat - y)) * scale
    return loss_fn


LOSS_FN = _scaled(1.0)


def closure_loss_step(x, y):
    with tf.GradientTape() as tape:
        l = LOSS_FN(tf.matmul(x, W), y)
        l2 = l * 2.0
    W.assign_sub(0.01 * tape.gradient(l2, W))
    return l


class Forwarding(tf.keras.Model):
    """As d2l's Module: `call` passes on to `forward`, which does host work."""

    def __init__(self):
        super().__init__()
        self.net = tf.keras.layers.Dense(1)

    def call(self, X, *args, **kwargs):
        return self.forward(X, *args)

    def forward(self, X):
        print("forward")
        return self.net(X)


def test_the_fallback_names_the_host_line_inside_the_callee_that_made_the_value():
    """`l2 = l * 2.0` crossed into the tape as a tensor host code made; the message named
    only `l2`. It follows `l2` back to `l = LOSS_FN(...)` and into LOSS_FN, to its print."""
    f = gpe.function(closure_loss_step)
    x, y = tf.ones((2, 3)), tf.ones((2, 1))
    with contextlib.redirect_stdout(io.StringIO()):
        for _ in range(3):
            f(x, y)
    (reason,) = f.stats()["fallbacks"]
    here = os.path.basename(__file__)
    line = closure_loss_step.__code__.co_firstlineno + 2
    assert f"`l = LOSS_FN((tf.matmul(x, W)), y)` ({here}:{line}) runs on the host" in reason, reason
    printing = _scaled.__code__.co_firstlineno + 2
    assert f"loss_fn: `print(\"computing the loss\")` ({here}:{printing}) runs on the host" \
        in reason, reason


def test_a_layer_whose_forward_does_host_work_names_that_line():
    """d2l's Module.call is `return self.forward(X, *args)`: the reason was "its `call`
    does host work"; it names `forward`'s host statement."""
    from gpe.host.facts import oracle
    from gpe.slicer.layers import judge_layer_call
    model = Forwarding()
    with contextlib.redirect_stdout(io.StringIO()):
        model(tf.ones((2, 3)))
    kind, why = judge_layer_call(Forwarding.call, model, oracle.classify)
    here = os.path.basename(__file__)
    line = Forwarding.forward.__code__.co_firstlineno + 1
    assert kind is None and why == (
        f"`return self.forward(X, *args)` ({here}:{line - 3}) calls Forwarding.forward, "
        f"where `print(\"forward\")` ({here}:{line}) runs on the host"), why
