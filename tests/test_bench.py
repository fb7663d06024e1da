"""`gpe bench PROGRAM`: the comparison it rests on (a planted difference is reported), the
program contract's errors, the JSON it writes and one real run of a tiny program."""
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gpe import cli
from gpe.bench_program import run_metrics
from gpe.compare import compare, verdict
import background
from side_by_side import side_by_side

TINY = textwrap.dedent('''
    import os
    import tensorflow as tf

    DEFAULT_STEPS = 8
    w = tf.Variable([1.0, 2.0])
    seen = []


    def train_step(x):
        seen.append(1)                 # host Python: tf.function runs it once, at trace time
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((w * x - 1.0) ** 2)
        w.assign_sub(0.1 * tape.gradient(loss, w))
        return loss


    def main(steps):
        losses = [float(train_step(tf.constant([0.5, 0.25]))) for _ in range(steps)]
        sliced = "Sliced" in type(getattr(train_step, "inner", None)).__name__
        if os.environ.get("PLANT") and sliced:  # a difference planted in the gpe run only
            losses[-1] += 1e-3
        print("steps run:", len(seen))
        return {"losses": losses, "weights": [w.numpy()], "state": {"seen": len(seen)}}
''')


def result(losses=(1.0, 0.5), weight=(1.0, 2.0), seen=8):
    return {"losses": list(losses), "weights": [np.array(weight, np.float32)],
            "state": {"seen": seen}}


def record(res=None, stdout="steps run: 8\n", error=None):
    return {"result": res, "stdout": stdout, "error": error}


# --- the comparison ---------------------------------------------------------------------

def test_identical_runs_match():
    v = verdict(record(result()), record(result()))
    assert v["status"] == "identical" and v["short"] == "identical", v


def test_a_planted_difference_in_each_part_is_reported():
    eager = record(result())
    for other, part in ((result(losses=(1.0, 0.6)), "losses"),
                        (result(weight=(1.0, 2.5)), "weights"),
                        (result(seen=1), "state")):
        v = verdict(eager, record(other))
        assert v["status"] == "differs" and part in v["short"], (part, v)
        assert v["parts"][part] == "differs", v
    printed = verdict(eager, record(result(), stdout="steps run: 1\n"))
    assert printed["status"] == "differs" and "printed output" in printed["short"], printed
    extra = verdict(eager, record(result(), stdout="steps run: 8\nmore\n"))
    assert extra["status"] == "differs", extra


def test_float_drift_is_close_not_identical_and_a_large_one_differs():
    close = verdict(record(result(losses=(1.0, 0.5))), record(result(losses=(1.0, 0.5000001))))
    assert close["status"] == "close" and close["short"].startswith("close"), close
    far = verdict(record(result(losses=(1.0, 0.5))), record(result(losses=(1.0, 0.501))))
    assert far["status"] == "differs", far
    assert compare(np.array([1, 2]), np.array([1.0, 2.0]))[0] == "differs"  # int vs float
    assert compare([1.0], [1.0, 2.0])[0] == "differs"
    assert compare(float("nan"), float("nan"))[0] == "identical"


def test_errors_are_reported_and_an_error_eager_also_raises_matches():
    failed = verdict(record(result()), record(error="ValueError: bad"))
    assert failed["status"] == "error" and "ValueError" in failed["short"], failed
    same = verdict(record(error="ValueError: bad"), record(error="ValueError: bad"))
    assert same["status"] == "identical", same
    other = verdict(record(error="ValueError: bad"), record(error="TypeError: no"))
    assert other["status"] == "error", other
    late = verdict(record(result()), record(result(), error="RuntimeError: after"))
    assert late["status"] == "error", late


def test_run_metrics_times_steps_and_counts_builds_and_eager_calls():
    starts = [0.0, 1.0, 1.5, 1.51, 1.52, 1.53, 1.54, 1.55]
    kinds = ["p", "p", "b", "s", "s", "e", "s", "s"]
    durations = [0.5, 0.4, 0.49, 0.005, 0.005, 0.02, 0.005, 0.005]
    rec = {"calls": {"train_step": {"starts": starts, "durations": durations, "kinds": kinds}},
           "timed": None, "end": 1.6}
    m = run_metrics(rec, warmup=2)
    assert m["step"] == "train_step" and m["warmup"] == 4  # the second half of the calls
    assert m["ms_per_step"] == pytest.approx(10.0)
    step = m["per_step"]["train_step"]
    assert (step["calls"], step["sliced"], step["eager"], step["builds"]) == (8, 4, 1, 1)
    assert m["build_s"] == pytest.approx(0.49 - 0.005)
    assert m["overhead"] is None  # no calibration
    rec["calibration"] = {"train_step": {"plain_s": [0.010, 0.011, 0.012],
                                         "gpe_eager_s": [0.0115, 0.0125, 0.013]}}
    assert run_metrics(rec, warmup=20)["overhead"] == pytest.approx(0.125 / 0.11 - 1)


# --- the command line ---------------------------------------------------------------------

def bench_cli(capsys, *args):
    status = cli.main(["bench", *args])
    return status, capsys.readouterr().err.strip().splitlines()


def test_bad_input_ends_in_one_line(tmp_path, capsys):
    (tmp_path / "nomain.py").write_text("def train_step(x):\n    return x\n")
    (tmp_path / "nostep.py").write_text("def main(steps):\n    return {}\n")
    (tmp_path / "broken.py").write_text("def main(steps:\n")
    (tmp_path / "ok.py").write_text("def main(steps):\n    return {}\n\ndef train_step():\n"
                                    "    pass\n")
    cases = {
        ("missing.py",): "no such file: missing.py",
        (str(tmp_path),): "not a file",
        (str(tmp_path / "nomain.py"),): "has no top-level function main(steps)",
        (str(tmp_path / "nostep.py"),): "has no step function",
        (str(tmp_path / "broken.py"),): "syntax error",
        (str(tmp_path / "ok.py"), "--steps", "-1"): "--steps must be at least 1, got -1",
        (str(tmp_path / "ok.py"), "--repeats", "0"): "--repeats must be at least 1",
        (str(tmp_path / "ok.py"), "--calls", "5"): "--calls applies to --crossing",
        (str(tmp_path / "ok.py"), "--json", str(tmp_path / "no" / "x.json")): "no such dir",
        ("--crossing", str(tmp_path / "ok.py")): "--crossing takes no PROGRAM",
        ("--crossing", "--steps", "3"): "--steps applies to a PROGRAM",
    }
    if importlib.util.find_spec("matplotlib") is None:
        cases[(str(tmp_path / "ok.py"), "--plot", "x.png")] = "--plot needs matplotlib"
    for args, message in cases.items():
        status, err = bench_cli(capsys, *args)
        assert status == 2 and len(err) == 1, (args, err)
        assert err[0].startswith("gpe: ") and message in err[0], (args, err)


def test_every_option_has_help(capsys):
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    text = capsys.readouterr().out
    for option in ("--steps", "--repeats", "--warmup", "--json", "--plot", "--no-adaptive",
                   "--timeout", "--crossing", "--calls"):
        assert option in text, option
    assert "main(steps)" in text and "tf.function" in text


# --- a real run -----------------------------------------------------------------------------

def run_bench(cwd, *args, env=None):
    return subprocess.run([sys.executable, "-m", "gpe.cli", "bench", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=240,
                          env=background.env(TF_CPP_MIN_LOG_LEVEL="3", **(env or {})))


PLOT = importlib.util.find_spec("matplotlib") is not None


def _bench_and_planted():
    """The real run and its planted twin, side by side (each its own bench and children),
    in a folder of their own: (run, planted run, out.json's text, steps.png's first bytes)."""
    with background.folder() as cwd:
        with open(os.path.join(cwd, "tiny.py"), "w") as f:
            f.write(TINY)
        done, planted = side_by_side(
            lambda: run_bench(cwd, "tiny.py", "--steps", "8", "--repeats", "1", "--json",
                              "out.json", *(["--plot", "steps.png"] if PLOT else [])),
            lambda: run_bench(cwd, "tiny.py", "--steps", "8", "--repeats", "1",
                              env={"PLANT": "1"}))
        written = {}
        for name in ("out.json", "steps.png"):
            if os.path.exists(os.path.join(cwd, name)):
                with open(os.path.join(cwd, name), "rb") as f:
                    written[name] = f.read()
        return done, planted, written


def background_jobs():
    """The runs the test below asserts on, started after collection (tests/background.py)."""
    return {"test_bench_runs_a_program_three_ways_and_reports_a_planted_difference":
            _bench_and_planted}


@pytest.mark.timeout(300)
def test_bench_runs_a_program_three_ways_and_reports_a_planted_difference():
    done, planted, written = background.result(
        f"{__name__}.test_bench_runs_a_program_three_ways_and_reports_a_planted_difference",
        _bench_and_planted)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    for way in ("eager", "tf.function", "gpe"):  # progress on stderr
        assert f"[tiny] {way}, run 1 of 1" in done.stderr
    rows = {line.split("|")[1].strip(): line for line in done.stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| way")}
    assert set(rows) == {"eager", "tf.function", "gpe"}, done.stdout
    assert "DIFFERS: state, printed output" in rows["tf.function"]  # `seen`: once, at trace
    assert rows["gpe"].rstrip(" |").endswith("identical"), rows["gpe"]
    data = json.loads(written["out.json"])
    assert data["schema"] == 1 and data["settings"]["repeats"] == 1
    program, = data["programs"]
    assert program["program"] == "tiny" and program["steps"] == 8
    ways = program["ways"]
    assert set(ways) == {"eager", "tf.function", "gpe"}
    for way, row in ways.items():
        assert row["ms_per_step"] > 0 and row["calls"] == 8, (way, row)
        assert row["vs_eager"] > 0 and row["vs_tf_function"] > 0, (way, row)
        assert len(row["ms_per_step_runs"]) == 1 and row["intervals_ms"], (way, row)
    assert ways["eager"]["vs_eager"] == 1.0 and ways["eager"]["build_s"] is None
    assert ways["tf.function"]["status"] == "differs"
    gpe_row = ways["gpe"]
    assert gpe_row["status"] == "identical" and gpe_row["stdout"] == "identical"
    assert gpe_row["sliced_calls"] >= 3 and gpe_row["build_s"] > 0, gpe_row  # ran in the graph
    assert gpe_row["stats"]["train_step"]["graph_calls"] == gpe_row["sliced_calls"]
    assert {"eager_calls", "fallback_overhead", "reasons", "calibration"} <= set(gpe_row)
    if PLOT:
        assert written["steps.png"][:4] == b"\x89PNG"
    assert planted.returncode == 1, planted.stdout + planted.stderr[-3000:]
    gpe_line = next(line for line in planted.stdout.splitlines() if line.startswith("| gpe "))
    assert "DIFFERS: losses" in gpe_line, planted.stdout
    assert "losses[7]" in planted.stdout  # where: the last loss
    assert planted.stderr.strip().splitlines()[-1] == \
        "gpe: gpe's results differ from eager's or gpe failed: tiny"
