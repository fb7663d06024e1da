"""The slicer: splits a Python function into a host part and a TF part (no TensorFlow here)."""
from slicer.errors import Refusal
from slicer.facts import ArgFact, Facts, Kind
from slicer.pipeline import slice_function
from slicer.plan import Channel, ChannelKind, LineReport, SlicePlan

__all__ = ["ArgFact", "Channel", "ChannelKind", "Facts", "Kind", "LineReport", "Refusal",
           "SlicePlan", "slice_function"]
