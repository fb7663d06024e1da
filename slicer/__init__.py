"""gpe.slicer: splits a Python function into a host part and a TF part (no TensorFlow here).

Its names load on first use, and so do the modules of its passes (`slicer.pipeline`,
`slicer.callees`, `slicer.layers`, read as attributes by the host when it slices): a
program that only runs precompiled bundles imports the plan's modules (`slicer.plan`,
`slicer.facts`) and never the passes (gpe.load's time to a first call).
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"Refusal": ".errors", "ArgFact": ".facts", "Facts": ".facts", "Kind": ".facts",
            "slice_function": ".pipeline", "Channel": ".plan", "ChannelKind": ".plan",
            "LineReport": ".plan", "SlicePlan": ".plan"}
_PASSES = frozenset({"pipeline", "callees", "layers"})
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _PASSES:  # (importing a submodule sets it as the package's attribute)
        return importlib.import_module(f".{name}", __name__)
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value
    return value
