"""gpe: run imperative TensorFlow 2 programs at graph speed without changing what they do.

    @gpe.function
    def train_step(x, y): ...

`gpe.explain(fn)` shows where each line runs and which values cross.
"""
from gpe.api import explain, function
from host.function import GpeWarning, SlicedFunction
from host.log import configure as _configure_logging
from host.timing import Timing, timing

_configure_logging()

__all__ = ["GpeWarning", "SlicedFunction", "Timing", "explain", "function", "timing"]
__version__ = "0.1.0"
