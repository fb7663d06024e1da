import os
import sys
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(__file__))

import tensorflow  # noqa: E402,F401  imported once, here, for the whole test process

warnings.filterwarnings("ignore", category=DeprecationWarning)
