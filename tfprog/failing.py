"""Which ops of a TF part can fail at run time on the values they get (the host waits for
those before its next statement; an effect after them is ordered after them)."""
from __future__ import annotations

import numpy as np
from tensorflow.python.framework import tensor_util

# Ops that can fail on the values they get. Shapes into the graph are exact where known,
# so shape errors are found when tracing; where a shape is unknown (a value computed on
# the host mid-call) any op but a few element-wise ones may fail on it too.
_FAILS_ON_VALUES = frozenset({
    "GatherV2", "GatherNd", "ResourceGather", "ResourceGatherNd", "ScatterNd",
    "TensorScatterUpdate", "TensorScatterAdd", "TensorScatterSub", "ResourceScatterUpdate",
    "ResourceScatterAdd", "ResourceScatterSub", "ResourceScatterNdUpdate", "ResourceScatterNdAdd",
    "Assert", "CheckNumerics", "CheckNumericsV2", "UnsortedSegmentSum", "UnsortedSegmentMax",
    "UnsortedSegmentMin", "SegmentSum", "SegmentMean", "SparseToDense", "Cholesky",
    "MatrixInverse", "MatrixDeterminant", "MatrixSolve", "StringToNumber", "DecodeRaw",
    "PyFunc", "EagerPyFunc", "Bincount", "Multinomial", "TensorListGetItem", "Range",
})
# Output ops: the host waits for them as for ops that can fail, so what they write keeps
# its place among the host's output (tf.print, as eagerly).
_FAILS_ON_VALUES |= frozenset({"PrintV2", "Print", "WriteFile"})
# Ops that fail on an index out of range (StridedSlice: only where it takes an element,
# `x[i]`; a range `x[i:j]` is clipped): tracing checks a constant index against a known
# shape, so only an index that reaches the graph at run time (from the host, a loop
# counter) can fail. By op: the inputs that are indices.
_FAILS_ON_INDEX = {"StridedSlice": (1, 2, 3), "Slice": (1, 2)}
_INTEGER_DIVISION = frozenset({"Div", "FloorDiv", "FloorMod", "TruncateDiv", "TruncateMod"})
_SHAPE_SAFE = frozenset({
    "Identity", "Cast", "Const", "NoOp", "Neg", "Abs", "Exp", "Log", "Relu", "Tanh", "Sigmoid",
    "Square", "Sqrt", "Shape", "Size", "Rank", "ReadVariableOp", "QueueDequeueV2",
    "QueueEnqueueV2", "ZerosLike", "OnesLike",
})

def can_fail(op) -> bool:
    """Whether running `op` can raise on the values it gets (beyond what tracing checked)."""
    if op.type == "Range":
        return not _range_is_valid(*(tensor_util.constant_value(t) for t in op.inputs))
    if op.type in _FAILS_ON_VALUES:
        return True
    if op.type in _FAILS_ON_INDEX:
        return _index_can_fail(op.type, op.get_attr, [
            tensor_util.constant_value(op.inputs[i]) is None for i in _FAILS_ON_INDEX[op.type]])
    if op.type in _FUNCTION_ATTRS:
        return any(_body_can_fail(op.graph, name, set()) for name in _bodies_of(op))
    if op.type in _INTEGER_DIVISION and op.inputs[0].dtype.is_integer and not _nonzero(
            tensor_util.constant_value(op.inputs[1])):
        return True  # an integer divided by zero raises
    return op.type not in _SHAPE_SAFE and any(
        not t.shape.is_fully_defined() for t in op.inputs)


def _nonzero(divisor) -> bool:
    """Whether a divisor known when tracing (None: not known) has no zero."""
    return divisor is not None and bool(np.all(divisor != 0))


def _range_is_valid(start, limit, delta) -> bool:
    """Whether `Range` on these values known when tracing (None: not known) cannot fail:
    the kernel's checks (scalars, delta nonzero and towards limit, a size that fits)."""
    if start is None or limit is None or delta is None:
        return False
    if any(np.ndim(v) != 0 for v in (start, limit, delta)) or delta == 0:
        return False
    if (delta > 0 and start > limit) or (delta < 0 and start < limit):
        return False
    size = np.ceil(np.abs((np.float64(limit) - np.float64(start)) / np.float64(delta)))
    return bool(np.isfinite(size) and size < 2 ** 31)


_FUNCTION_ATTRS = {
    "If": ("then_branch", "else_branch"), "StatelessIf": ("then_branch", "else_branch"),
    "While": ("cond", "body"), "StatelessWhile": ("cond", "body"), "Case": ("branches",),
    "StatelessCase": ("branches",), "PartitionedCall": ("f",), "StatefulPartitionedCall": ("f",),
}
"""Ops that run function bodies: they can fail when an op of a body can."""


def _bodies_of(op) -> list[str]:
    names = []
    for attr in _FUNCTION_ATTRS.get(op.type, ()):
        try:
            value = op.get_attr(attr)
        except ValueError:
            continue
        names += [f.name for f in value] if isinstance(value, list) else [value.name]
    return names


def _index_can_fail(kind: str, attr, varies: list[bool]) -> bool:
    """Whether an op of `_FAILS_ON_INDEX` can fail: an index input not constant (`varies`),
    and for a StridedSlice, one that takes an element (`attr`: the op's attributes)."""
    if not any(varies):
        return False
    return kind != "StridedSlice" or bool(attr("shrink_axis_mask")) or varies[2]


def _body_can_fail(graph, name: str, seen: set) -> bool:
    """Whether the function `name` (a body of a control-flow or call op) has an op that can
    fail on its values; unknown functions are assumed to fail."""
    if name in seen:
        return False
    seen.add(name)
    fn = graph._get_function(name)  # pylint: disable=protected-access
    definition = getattr(fn, "definition", None) if fn is not None else None
    if definition is None:
        return True
    constants = {node.name for node in definition.node_def if node.op == "Const"}
    for node in definition.node_def:
        if node.op in _FAILS_ON_VALUES:
            return True
        if node.op in _FAILS_ON_INDEX and _index_can_fail(
                node.op, lambda key, node=node: node.attr[key].i,
                [node.input[i].split(":")[0] not in constants for i in _FAILS_ON_INDEX[node.op]]):
            return True
        for attr in _FUNCTION_ATTRS.get(node.op, ()):
            value = node.attr[attr]
            bodies = [f.name for f in value.list.func] if attr == "branches" else [value.func.name]
            if any(_body_can_fail(graph, b, seen) for b in bodies):
                return True
    return False
