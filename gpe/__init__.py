"""gpe: run imperative TensorFlow 2 programs at graph speed without changing what they do.

    @gpe.function
    def train_step(x, y): ...

`gpe.explain(fn)` shows where each line runs and which values cross.

The package is one namespace: `gpe` (this API and the CLI), `gpe.slicer` (no TensorFlow),
`gpe.tfprog` and `gpe.host`. The names below load on first use, so that `import
gpe.slicer` does not import TensorFlow.

Installed, the three subpackages lie in gpe/; in a checkout they lie beside it, at the top
of the repository (pyproject.toml maps them), and `_Checkout` finds them there: a script or
`python -m pytest` run from the root imports the same files under the same names as the
installed package.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys
from typing import Any

__version__ = "0.1.0"

_SUBPACKAGES = ("slicer", "tfprog", "host")


class _Checkout(importlib.abc.MetaPathFinder):
    """Finds `gpe.slicer`, `gpe.tfprog` and `gpe.host` in the repository root (on first
    import, as any subpackage is found); their own modules then load from their folders."""

    def __init__(self, root: str):
        self.root = root

    def find_spec(self, name, path, target=None):
        prefix, _, sub = name.partition(".")
        if prefix != __name__ or sub not in _SUBPACKAGES:
            return None
        folder = os.path.join(self.root, sub)
        return importlib.util.spec_from_file_location(
            name, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])


def _find_checkout_subpackages() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    installed = all(os.path.isdir(os.path.join(here, s)) for s in _SUBPACKAGES)
    checkout = all(os.path.isfile(os.path.join(root, s, "__init__.py")) for s in _SUBPACKAGES)
    if not installed and checkout and \
            not any(isinstance(f, _Checkout) for f in sys.meta_path):
        sys.meta_path.append(_Checkout(root))


_find_checkout_subpackages()

from .log import configure as _configure_logging  # noqa: E402 (after the finder)

_EXPORTS = {
    "function": ".api", "explain": ".api", "load": ".bundles",
    "BundleError": ".tfprog.bundle",
    "GpeWarning": ".host.diagnostics.stats", "SlicedFunction": ".host.call.function",
    "Timing": ".host.diagnostics.timing", "timing": ".host.diagnostics.timing",
    "profile": ".host.diagnostics.profile",
}
__all__ = sorted(_EXPORTS)

_configure_logging()


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'gpe' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
