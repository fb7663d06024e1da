"""README's programs run as a user runs them: each example program README.md names, started
from the repository root with this interpreter, exits 0 (a checkout imports gpe as the
installed package does: gpe/__init__.py finds host/, slicer/, tfprog/ beside it)."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
NAMED = sorted(set(re.findall(r"\bexamples/\w+\.py\b", README)))
# the fewest steps each needs to train, compare with eager and print its verdict
ARGS = {"examples/train_mlp.py": ["--steps", "60", "--repeats", "1", "--report-every", "10"]}


def test_readme_names_its_examples_and_commands():
    assert "examples/train_mlp.py" in NAMED
    for label in ("# run the example", "# run the tests"):
        lines = README.splitlines()
        assert label in lines, label
        assert lines[lines.index(label) + 1].startswith("python3 -m venv .venv && ")


@pytest.mark.timeout(400)
@pytest.mark.parametrize("program", NAMED)
def test_example_named_in_readme_runs_from_the_root(program):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # as a user's shell
    done = subprocess.run([sys.executable, program, *ARGS.get(program, [])], cwd=ROOT,
                          env=dict(env, TF_CPP_MIN_LOG_LEVEL="2"), capture_output=True,
                          text=True, timeout=360)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    if program == "examples/train_mlp.py":
        assert "losses identical: True, final weights identical: True, history identical: " \
               "True" in done.stdout, done.stdout[-2000:]
        graph_calls = re.search(r"'graph_calls': (\d+)", done.stdout)
        assert graph_calls and int(graph_calls.group(1)) >= 40, done.stdout[-2000:]  # sliced


@pytest.mark.timeout(120)
def test_the_checkout_imports_as_installed():
    """From the root, `import gpe` is the checkout: its subpackages are the folders beside
    gpe/, under the installed names (and `import gpe` alone imports no TensorFlow)."""
    code = ("import sys, gpe; assert 'tensorflow' not in sys.modules; import gpe.slicer; "
            "assert 'tensorflow' not in sys.modules; gpe.function; "
            "import gpe.host.call.function as f, gpe.tfprog.part as p; "
            "print(gpe.__file__, gpe.slicer.__file__, f.__file__, p.__file__)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=100)
    assert done.returncode == 0, done.stderr[-3000:]
    files = done.stdout.split()
    assert files == [str(ROOT / "gpe" / "__init__.py"), str(ROOT / "slicer" / "__init__.py"),
                     str(ROOT / "host" / "call" / "function.py"),
                     str(ROOT / "tfprog" / "part.py")], files
