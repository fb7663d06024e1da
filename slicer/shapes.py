"""The static shapes a callee judged TF work reads of its tensor arguments.

A callee's trace reads `Y.shape[1]` as eager does only where the TF part knows that
dimension: an argument the caller's call key fixes does (kinds marks the read CONSTANT),
but a tensor the caller's TF part computed may have a dimension only the host knows
(`tf.reshape(X, (-1, n))` with `n` a number the host sends, a loop's last smaller batch):
traced, `Y.shape[1]` is None, and `tf.range(limit=None)` is silently empty where eager's
is not. The callee's judgement lists what it reads (`reads`); the caller's TF part checks,
when traced, that those dimensions of what it passes are known (tfprog/usercalls.known),
and a trace that does not know one fails: the function runs eagerly, never differently.

`reads(fn, params)`: ((argument position, dims), ...) for one analysed callee, where dims
is a tuple of dimension indices, () for its rank alone, or None for every dimension. `at_call(needs, call, sites)`: those, as
indices into the caller's call's positional arguments. `checked(stmt)`: a TF statement
whose own static reads (`X.shape[0]` of a loop's batch: the loop's channel may take any
size there) check the same when traced.
"""
from __future__ import annotations

import copy

import gast

from . import anno, nodes, templates
from .anno import Key
from .chains import dotted, stored_names, unchanged_reads
from .facts import TF_KINDS, Kind

_READS = ("shape", "ndim")
_RANK_ONLY = ("rank", "ndim")


def reads(fn: gast.FunctionDef, params: dict[str, int]) -> tuple:
    """`params`: the callee's tensor parameters, by name, with their argument positions. A
    read of a tensor the callee computed itself needs every dimension of every tensor
    argument (its shape follows from theirs); a variable's shape is its own, fixed."""
    rebound, parents = stored_names(fn), _parents(fn)
    unchanged = unchanged_reads(fn, rebound)  # (reads of an argument before it is rebound)
    needs: dict[int, tuple | None] = {}
    for node in nodes.walk(fn):
        if isinstance(node, gast.Attribute) and node.attr in _READS and \
                anno.get(node.value, Key.KIND) in TF_KINDS and \
                anno.get(node.value, Key.KIND) != Kind.VARIABLE and \
                not anno.get(node, Key.CONSTANT):
            base = node.value
            if isinstance(base, gast.Name) and base.id in params and (
                    base.id not in rebound or id(base) in unchanged):
                _add(needs, params[base.id], _dims(node, parents))
            else:
                for position in params.values():
                    _add(needs, position, None)
        for index, dims in anno.get(node, Key.CALLEE_SHAPES, ()):  # a callee's own callee
            site = node.args[index]
            if isinstance(site, gast.Name) and site.id in params and (
                    site.id not in rebound or id(site) in unchanged):
                _add(needs, params[site.id], dims)
            else:  # a tensor it computed: its shape follows from its tensor arguments'
                for position in params.values():
                    _add(needs, position, None)
    return tuple(sorted(needs.items(), key=lambda item: item[0]))


def at_call(needs: tuple, call: gast.Call, sites: list) -> tuple | None:
    """((index among `call.args`, dims), ...) for a callee's `needs` (positions among
    `sites`, the argument expressions it gets); None where a needed argument is not a
    positional one of the call (a keyword's value: not checked, the call stays on the
    host)."""
    out = []
    for position, dims in needs:
        index = next((i for i, a in enumerate(call.args) if a is sites[position]), None)
        if index is None or any(isinstance(a, gast.Starred) for a in call.args[:index + 1]):
            return None
        out.append((index, dims))
    return tuple(out)


def checked(stmt: gast.stmt) -> gast.stmt:
    """`stmt`, or a copy whose static reads of tensors the kinds pass found fixed for the
    call (CONSTANT: an argument the call key fixes, a loop's values) read through
    `_gpe_rt.known`, so that a trace that does not know the dimension fails."""
    def read(node) -> bool:
        return isinstance(node, gast.Attribute) and node.attr in _READS and \
            anno.get(node, Key.CONSTANT) and anno.get(node.value, Key.KIND) == Kind.TENSOR
    if not any(read(n) for n in nodes.walk(stmt)):
        return stmt
    stmt = copy.deepcopy(stmt)  # (the host program keeps the original)
    parents = _parents(stmt)
    for node in [n for n in nodes.walk(stmt) if read(n)]:
        name = dotted(node.value) or "a tensor"
        node.value = templates.expr(f"_gpe_rt.known(v, {_dims(node, parents)!r}, {name!r})",
                                    v=node.value)
    return stmt


def _dims(node: gast.Attribute, parents: dict) -> tuple | None:
    """What a read needs: `x.shape[k]` dimension k, `x.ndim`, `len(x.shape)` or
    `x.shape.rank` the rank alone, anything else (`x.shape`, `x.shape[1:]`) all."""
    if node.attr == "ndim":
        return ()
    parent = parents.get(id(node))
    if isinstance(parent, gast.Subscript) and parent.value is node and \
            isinstance(parent.slice, gast.Constant) and type(parent.slice.value) is int:
        return (parent.slice.value,)
    if isinstance(parent, gast.Attribute) and parent.attr in _RANK_ONLY:
        return ()
    if isinstance(parent, gast.Call) and isinstance(parent.func, gast.Name) and \
            parent.func.id == "len" and parent.args and parent.args[0] is node:
        return ()
    if isinstance(parent, gast.Subscript) and parent.value is node and \
            isinstance(parent.slice, gast.UnaryOp) and isinstance(parent.slice.op, gast.USub) \
            and isinstance(parent.slice.operand, gast.Constant) and \
            type(parent.slice.operand.value) is int:
        return (-parent.slice.operand.value,)  # `x.shape[-1]`
    return None


def _add(needs: dict, position: int, dims: tuple | None) -> None:
    if dims is None or position in needs and needs[position] is None:
        needs[position] = None
    else:
        needs[position] = tuple(sorted(set(needs.get(position, ())) | set(dims)))


def _parents(fn: gast.FunctionDef) -> dict[int, gast.AST]:
    return {id(child): node for node in nodes.walk(fn) for child in nodes.children(node)}
