import os
import signal
import sys
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# a run started in the background of a non-interactive shell ignores SIGINT, and a child
# would inherit that (Python then installs no KeyboardInterrupt handler, nor gpe its own):
# with a handler here, every child starts with SIGINT's default, as in a terminal. (Not a
# preexec_fn per child: a forked child runs the at-fork hooks first, and gpe's ran TF ops
# there, which deadlocked while another thread of this process held a TF lock.)
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# `gpe run` builds a function only once its calls have paid for it (host/speculation/payoff.py); the
# tests of what gets sliced count calls of short programs, so they build at once, as
# `gpe.function` does (tests/test_payoff.py tests the rule itself, and sets it there)
os.environ.setdefault("GPE_PAYOFF", "0")
sys.path.insert(0, os.path.dirname(__file__))

import tensorflow  # noqa: E402,F401  imported once, here, for the whole test process

import gpe  # noqa: E402

# the scripts and commands the tests start (`python -m gpe.cli`, `gpe run`) import the gpe
# this process imports: the checkout's where `python -m pytest` ran from the root
_GPE_HOME = os.path.dirname(os.path.dirname(os.path.abspath(gpe.__file__)))
if os.path.isfile(os.path.join(_GPE_HOME, "pyproject.toml")):
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [_GPE_HOME] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

warnings.filterwarnings("ignore", category=DeprecationWarning)


def pytest_configure(config):
    # GPE_EXAMPLES=1 (the older switch, named in examples/TRAINING_PROGRAMS.md) runs the slow
    # tests with the others, as `-m ''` does
    if os.environ.get("GPE_EXAMPLES") and config.option.markexpr == "not slow":
        config.option.markexpr = ""


def pytest_collection_finish(session):
    # child processes that some selected tests assert on, queued in the order of the tests
    # and run in the background from the queue's end (tests/background.py); a job's key is
    # the name of the fixture or the test that takes its result
    if session.config.option.collectonly:
        return
    import background
    background.snapshot_environment()
    for item in session.items:
        module = getattr(item, "module", None)
        jobs = getattr(module, "background_jobs", None)
        for key, fn in (jobs() if jobs else {}).items():
            if key in getattr(item, "fixturenames", ()) or item.originalname == key:
                background.start(f"{module.__name__}.{key}", fn)
