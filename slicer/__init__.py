"""gpe.slicer: splits a Python function into a host part and a TF part (no TensorFlow here)."""
from .errors import Refusal
from .facts import ArgFact, Facts, Kind
from .pipeline import slice_function
from .plan import Channel, ChannelKind, LineReport, SlicePlan

__all__ = ["ArgFact", "Channel", "ChannelKind", "Facts", "Kind", "LineReport", "Refusal",
           "SlicePlan", "slice_function"]
