"""A tensor iterated while gpe traces a TF part: its rows, as eager gives them.

Eagerly `for x in t` gives `t[0]`, `t[1]`, ... and `len(t)` is `t.shape[0]`; a symbolic
tensor refuses both, so a callee the TF part traces whole (an RNN cell looping `for X in
inputs`, slicer/reproduced.py) failed to trace and its caller ran eagerly. The TF part's
shapes are the call key's, so where a tensor's first dimension is known when traced, the
loop unrolls over `t[i]` (the same slicing op eager runs) and `len(t)` is that dimension;
where it is not known, tracing fails saying so (a scalar: TF's own error), and the call
runs eagerly. Only while this thread traces a gpe part (exact.traces_here); nowhere else.
"""
from __future__ import annotations

from tensorflow.python.framework import ops

from .exact import traces_here

_originals: dict[str, object] = {}


def _rows(t) -> int | None:
    shape = t.shape
    if not traces_here() or shape.rank == 0:
        return None
    if shape.rank is None or shape[0] is None:
        raise TypeError(f"a loop over the rows of a tensor shaped {shape}: their number "
                        "varies from call to call, so the TF part cannot unroll it "
                        "(eagerly it runs row by row)")
    return shape[0]


def install() -> None:
    if _originals:
        return
    cls = ops.SymbolicTensor
    _originals["iter"], _originals["len"] = cls.__iter__, cls.__len__

    def __iter__(self):
        n = _rows(self)
        return _originals["iter"](self) if n is None else iter([self[i] for i in range(n)])

    def __len__(self):
        n = _rows(self)
        return _originals["len"](self) if n is None else n

    cls.__iter__, cls.__len__ = __iter__, __len__
