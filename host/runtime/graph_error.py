"""An error raised in the graph, told as eager tells it: the op's own text, eager's
`[Op:Type]` suffix, and where in the user's code it was raised (the line scope the
part's ops were made in, tfprog/part.LINE_SCOPE)."""
from __future__ import annotations

import re

import tensorflow as tf

from ...tfprog.part import LINE_SCOPE
from ...tfprog.replica_part import CANCELLED

RAISED_IN_GRAPH = "raised in the TF part of"  # the note on an error the graph raised
ROOT_ERROR = re.compile(r"\(\d+\) ([A-Z_]+):\s*(.*)")  # "(0) INVALID_ARGUMENT:  text"


def describe(message: str, parts: list) -> tuple[str, str]:
    """(the graph error's own text and op, where in the user's code it was raised)."""
    core = [ln.strip() for ln in message.splitlines()
            if ln.strip() and not ln.lstrip().startswith(("[[", "File ", "Detected at",
                                                           "Graph execution error"))]
    # several root errors (one per replica of a strategy.run): the first that is not
    # a cancellation, as the replica that raised first eagerly; else the last line
    roots = [m for m in map(ROOT_ERROR.match, core) if m]
    roots.sort(key=lambda m: m.group(1) == "CANCELLED")  # stable: in their order
    text = roots[0].group(2) if roots else core[-1] if core else message
    text = re.sub(r"\s*\[Op:__inference\w*\]$", "", text)
    # the functions it ran in (a sink traced in Python nests the part in one more)
    text = re.sub(r"^(\{\{function_node [^}]*\}\}\s*)+", "", text)
    node = re.findall(r"\{\{node ([^}]*)\}\}", message)
    if node:
        text += _eager_op_suffix(node[-1], [part for part, _, _ in parts])
    scopes = LINE_SCOPE.findall(node[-1] if node else message)
    where = ""
    if scopes:
        uid, line = int(scopes[-1][0]), scopes[-1][1]
        plan = next((part.plan for part, _, _ in parts if part.uid == uid), None)
        if plan is not None:
            where = f"{RAISED_IN_GRAPH} {plan.qualname} at {plan.filename}:{line}"
    return text, where


def _eager_op_suffix(node: str, parts: list) -> str:
    """What eager appends to an op's error: `[Op:Type]`, and ` name: scope/` where the
    op was made in a name scope of its own (`x[i]`: `[Op:StridedSlice] name: strided_slice/`).
    The graph names the node; its type is looked up in the parts' graphs and bodies."""
    last = node.rsplit("/", 1)[-1]
    kind = _node_type(node, parts)
    if kind is None:
        return f" [Op:{last}]"
    base = re.sub(r"_\d+$", "", last)  # the graph made the name unique; eager does not
    return f" [Op:{kind}]" + ("" if base == kind else f" name: {base}/")


def _node_type(node: str, parts: list) -> str | None:
    for part in parts:
        graph = getattr(part.function, "graph", None)
        if graph is None:
            continue
        try:
            return graph.get_operation_by_name(node).type
        except (KeyError, ValueError):
            pass
        for fn in getattr(graph, "_functions", {}).values():
            definition = getattr(fn, "definition", None) or getattr(fn, "cached_definition", None)
            for n in getattr(definition, "node_def", ()):
                if n.name == node:
                    return n.op
    return None


def host_left_replicated_call(failure) -> bool:
    """The sink failed only because the host left a replicated call (an exception in a
    replica's host part: its TF part's cancel assert, tfprog/replica_part.CANCELLED, and
    TensorFlow's cancellation of the other replicas): no error of the program's; eagerly
    strategy.run raised the host's exception and nothing of the step was applied."""
    if not isinstance(failure, tf.errors.InvalidArgumentError):
        return False
    roots = [m for m in map(ROOT_ERROR.match, (ln.strip() for ln in
                                               failure.message.splitlines())) if m]
    ours = [m for m in roots if CANCELLED in m.group(2)]
    return bool(ours) and all(m in ours or m.group(1) == "CANCELLED" for m in roots) \
        or not roots and CANCELLED in failure.message
