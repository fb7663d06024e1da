"""README's programs run as a user runs them: each example program README.md names, started
from the repository root with this interpreter, exits 0 (a checkout imports gpe as the
installed package does: gpe/__init__.py finds host/, slicer/, tfprog/ beside it)."""
import pathlib
import re
import subprocess
import sys

import pytest

import background

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
NAMED = sorted(set(re.findall(r"\bexamples/\w+\.py\b", README)))
# the fewest steps each needs to train, compare with eager and print its verdict; the
# fewest repeats (each way measured once: every step of the bench, 8 processes instead of 24)
ARGS = {"examples/train_mlp.py": ["--steps", "60", "--repeats", "1", "--report-every", "10"],
        "examples/bench_bundle.py": ["--repeats", "1"]}


def test_readme_names_its_examples_and_commands():
    assert "examples/train_mlp.py" in NAMED
    for label in ("# run the example", "# run the tests"):
        lines = README.splitlines()
        assert label in lines, label
        assert lines[lines.index(label) + 1].startswith("python3 -m venv .venv && ")


def _user_env():
    """The collection-time environment without PYTHONPATH: as a user's shell."""
    return {k: v for k, v in background.env().items() if k != "PYTHONPATH"}


def _programs():
    """Each program NAMED run from the root, in turn (in the background after collection:
    tests/background.py): {program: its run}."""
    return {program: subprocess.run([sys.executable, program, *ARGS.get(program, [])],
                                    cwd=ROOT, env=dict(_user_env(), TF_CPP_MIN_LOG_LEVEL="2"),
                                    capture_output=True, text=True, timeout=360)
            for program in NAMED}


IMPORTS = ("import sys, gpe; assert 'tensorflow' not in sys.modules; import gpe.slicer; "
           "assert 'tensorflow' not in sys.modules; gpe.function; "
           "import gpe.host.call.function as f, gpe.tfprog.part as p; "
           "print(gpe.__file__, gpe.slicer.__file__, f.__file__, p.__file__)")


def _imports():
    return subprocess.run([sys.executable, "-c", IMPORTS], cwd=ROOT, env=_user_env(),
                          capture_output=True, text=True, timeout=100)


def background_jobs():
    return {"test_example_named_in_readme_runs_from_the_root": _programs,
            "test_the_checkout_imports_as_installed": _imports}


_RUNS: dict = {}


@pytest.mark.timeout(400 * len(NAMED))  # (its job runs every program NAMED)
@pytest.mark.parametrize("program", NAMED)
def test_example_named_in_readme_runs_from_the_root(program):
    if not _RUNS:  # every program's run, taken once
        _RUNS.update(background.result(
            f"{__name__}.test_example_named_in_readme_runs_from_the_root", _programs))
    done = _RUNS[program]
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
    done = background.result(f"{__name__}.test_the_checkout_imports_as_installed", _imports)
    assert done.returncode == 0, done.stderr[-3000:]
    files = done.stdout.split()
    assert files == [str(ROOT / "gpe" / "__init__.py"), str(ROOT / "slicer" / "__init__.py"),
                     str(ROOT / "host" / "call" / "function.py"),
                     str(ROOT / "tfprog" / "part.py")], files
