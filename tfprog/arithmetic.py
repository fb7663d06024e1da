"""What a traced TF part computes with kernels of its own choosing: its contractions and
convolutions, and whatever it has compiled with XLA.

Library code chooses its ops from the static shapes it is traced with: Keras'
convolution, not knowing its input's channels, runs the op compiled with XLA
(keras/src/backend/tensorflow/nn.py, `_conv_xla`), whose sums round otherwise than the
Conv2D kernels eager runs. A part traced for an argument of any size (host/speculation:
relaxed dimensions) then computes other bits than eager does for the call's own size.
`differences(a, b)` compares two traces of one part by those ops, nested functions
(calls, branches, loop bodies) included and ops compiled with XLA told apart. Elementwise
ops and the rest are not compared: each rounds a value once, as eager's kernel does, and
a trace for unknown sizes has more of them where nothing is computed differently (a
gradient's sum over the dimensions it broadcast, which are none at run time; a shape's
arithmetic).
"""
from __future__ import annotations

import collections

XLA = "_XlaMustCompile"
MAX_DEPTH = 16
# ops whose kernels pick the order of their sums (blocking, algorithm, library)
CHOSEN = frozenset({
    "MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum", "SparseMatMul",
    "Conv", "Conv2D", "Conv3D", "DepthwiseConv2dNative", "Conv2DBackpropInput",
    "Conv2DBackpropInputV2", "Conv2DBackpropFilter", "Conv2DBackpropFilterV2",
    "Conv3DBackpropInputV2", "Conv3DBackpropFilterV2",
    "DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter",
    "FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", "FusedBatchNormGrad",
    "FusedBatchNormGradV2", "FusedBatchNormGradV3", "_FusedConv2D", "_FusedMatMul",
    "_FusedBatchMatMulV2"})


def computes(function) -> collections.Counter:
    """{op type: count} of the ops of CHOSEN a concrete function runs ("xla:" before those
    it compiles with XLA), through the functions its nodes call, and the number of
    functions it has XLA compile (each compiled whole: XLA fuses their elementwise ops too)."""
    graph = function.graph.as_graph_def()
    library = {f.signature.name: f for f in graph.library.function}
    counts: collections.Counter = collections.Counter()
    _count(graph.node, library, "", counts, 0)
    return counts


def differences(relaxed, exact) -> str:
    """How the ops `computes` counts differ between concrete function `relaxed` and
    `exact` (the same part traced for known sizes), or "" where they do not."""
    a, b = computes(relaxed), computes(exact)
    if a == b:
        return ""
    only = lambda c: ", ".join(f"{op} x{n}" for op, n in sorted(c.items())) or "nothing"
    return f"for any size {only(a - b)}, for the call's sizes {only(b - a)}"


def _count(nodes, library: dict, prefix: str, counts: collections.Counter,
           depth: int) -> None:
    for node in nodes:
        if node.op in CHOSEN:
            counts[prefix + node.op] += 1
        compiled = prefix or ("xla:" if XLA in node.attr and node.attr[XLA].b else "")
        for value in node.attr.values():
            names = [value.func.name] if value.HasField("func") else \
                [f.name for f in value.list.func]
            for name in names:
                fdef = library.get(name)
                if fdef is None or depth >= MAX_DEPTH:
                    continue
                inner = compiled or ("xla:" if XLA in fdef.attr and fdef.attr[XLA].b else "")
                if inner and not prefix:  # a function XLA compiles whole (fusing its ops)
                    counts["xla: compiled functions"] += 1
                _count(fdef.node_def, library, inner, counts, depth + 1)
