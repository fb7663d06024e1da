import os
import sys
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# `gpe run` builds a function only once its calls have paid for it (host/payoff.py); the
# tests of what gets sliced count calls of short programs, so they build at once, as
# `gpe.function` does (tests/test_payoff.py tests the rule itself, and sets it there)
os.environ.setdefault("GPE_PAYOFF", "0")
sys.path.insert(0, os.path.dirname(__file__))

import tensorflow  # noqa: E402,F401  imported once, here, for the whole test process

warnings.filterwarnings("ignore", category=DeprecationWarning)
