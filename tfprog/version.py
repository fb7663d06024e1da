"""The TensorFlow versions gpe is tested with, checked once when gpe's TF side is imported.

gpe builds FunctionDefs, queues and its sink through TensorFlow internals
(`tensorflow.python...`), which change between releases; the bounds here are the ones
pyproject.toml declares. Set GPE_ALLOW_UNTESTED_TF=1 to import anyway (with a warning).
"""
from __future__ import annotations

import os
import warnings

MINIMUM = (2, 21)   # inclusive
BELOW = (2, 22)     # exclusive
SUPPORTED = f">={MINIMUM[0]}.{MINIMUM[1]},<{BELOW[0]}.{BELOW[1]}"


def parse(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def check(version: str) -> None:
    """Raise ImportError naming the supported range when `version` is outside it."""
    if MINIMUM <= parse(version) < BELOW:
        return
    message = (f"gpe supports TensorFlow {SUPPORTED}; TensorFlow {version} is installed. "
               f"Install a supported version (pip install 'tensorflow{SUPPORTED}'), or set "
               f"GPE_ALLOW_UNTESTED_TF=1 to try this one at your own risk.")
    if os.environ.get("GPE_ALLOW_UNTESTED_TF") == "1":
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        return
    raise ImportError(message)
