"""gpe.host.facts: what the slicer is told about the objects and arguments a function uses.

Owns the oracle (`classify`: each object a function refers to as a slicer `Kind`, Keras
layers and models judged per instance, and Keras's own methods that are TF work) and
call signatures (`describe`: an argument's entry in the call key and its `ArgFact`).
Plain data out, no graphs run. It imports no other part of gpe.host.
"""
