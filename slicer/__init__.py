"""gpe.slicer: splits a Python function into a host part and a TF part (no TensorFlow here)."""
from gpe.slicer.errors import Refusal
from gpe.slicer.facts import ArgFact, Facts, Kind
from gpe.slicer.pipeline import slice_function
from gpe.slicer.plan import Channel, ChannelKind, LineReport, SlicePlan

__all__ = ["ArgFact", "Channel", "ChannelKind", "Facts", "Kind", "LineReport", "Refusal",
           "SlicePlan", "slice_function"]
