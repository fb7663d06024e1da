"""`gpe run` leaves alone a function that reads its caller's frame: wrapped, the caller's
frame would be gpe's (d2l's HyperParameters.save_hyperparameters sets nothing and the
program dies where eager runs: 5 of 5 d2l object-oriented chapters). A step calling
`tf.stack` is not such a function (it was left unwrapped: `.stack` counted as
`inspect.stack`)."""
import sys
import textwrap

import pytest

import background

SCRIPT = '''
import inspect
import tensorflow as tf


class HyperParameters:
    def save_hyperparameters(self, ignore=[]):
        frame = inspect.currentframe().f_back
        _, _, _, local_vars = inspect.getargvalues(frame)
        for k, v in local_vars.items():
            if k not in set(ignore + ["self"]) and not k.startswith("_"):
                setattr(self, k, v)


class Data(HyperParameters):
    def __init__(self, num_train=8, batch_size=4):
        self.save_hyperparameters()

    def batches(self):
        x = tf.reshape(tf.range(self.num_train, dtype=tf.float32), (-1, 1))
        return [x[i:i + self.batch_size] for i in range(0, self.num_train, self.batch_size)]


w = tf.Variable([[0.5]])


def step(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.stack([tf.square(tf.matmul(x, w) - 1.0)]))  # (no frame)
    w.assign_sub(0.01 * tape.gradient(loss, w))
    return loss


data = Data()
for epoch in range(6):
    for x in data.batches():
        loss = step(x)
print("@", data.num_train, data.batch_size, float(loss), float(w[0, 0]))
'''


def _runs():
    """SCRIPT eagerly and under `gpe run --report`, side by side in a folder of their own (in
    the background: tests/background.py)."""
    eager, gpe_run = background.run_in_folder(
        {"train.py": textwrap.dedent(SCRIPT)}, [sys.executable, "train.py"],
        [sys.executable, "-m", "gpe.cli", "run", "--report", "train.py"], timeout=180,
        environment=background.env(TF_CPP_MIN_LOG_LEVEL="3", GPE_PAYOFF="0"))
    return {"eager": eager, "gpe": gpe_run}


def background_jobs():
    return {"test_gpe_run_leaves_a_frame_reading_method_alone_and_still_slices": _runs}


@pytest.mark.timeout(200)
def test_gpe_run_leaves_a_frame_reading_method_alone_and_still_slices():
    runs = background.result(
        f"{__name__}.test_gpe_run_leaves_a_frame_reading_method_alone_and_still_slices", _runs)
    for way, done in runs.items():
        assert done.returncode == 0, (way, done.stderr[-2000:])
    marked = {way: [l for l in d.stdout.splitlines() if l.startswith("@")]
              for way, d in runs.items()}
    assert marked["gpe"] == marked["eager"] and marked["eager"]
    report = runs["gpe"].stdout + runs["gpe"].stderr
    assert "step: 12 calls, 9 sliced" in report, report[-2000:]
