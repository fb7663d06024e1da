"""gpe: run imperative TensorFlow 2 programs at graph speed without changing what they do.

    @gpe.function
    def train_step(x, y): ...

`gpe.explain(fn)` shows where each line runs and which values cross.

The package is one namespace: `gpe` (this API and the CLI), `gpe.slicer` (no TensorFlow),
`gpe.tfprog` and `gpe.host`. The names below load on first use, so that `import
gpe.slicer` does not import TensorFlow.
"""
from __future__ import annotations

import importlib
from typing import Any

from gpe.log import configure as _configure_logging

__version__ = "0.1.0"

_EXPORTS = {
    "function": "gpe.api", "explain": "gpe.api", "load": "gpe.bundles",
    "BundleError": "gpe.tfprog.bundle",
    "GpeWarning": "gpe.host.function", "SlicedFunction": "gpe.host.function",
    "Timing": "gpe.host.timing", "timing": "gpe.host.timing",
}
__all__ = sorted(_EXPORTS)

_configure_logging()


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'gpe' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
