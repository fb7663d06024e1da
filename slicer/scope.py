"""Names of a function's own scope, without the variables of its comprehensions.

A comprehension (`[f(q) for q in range(3)]`, set, dict, generator) has its own scope in
Python 3: its targets are neither written nor read by the statement it is in, and do not
exist after it (a walrus `(y := ...)` inside one does bind `y` in the enclosing function).
`walk(node)` is `gast.walk(node)` without the Name nodes a comprehension inside `node` binds
(its targets and its reads of them); the analyses that collect a statement's names use it,
so that a comprehension variable never crosses between the parts nor is carried by a loop.
No analysis of its own: a helper for activity, crossings, placement and partition.
"""
from __future__ import annotations

from typing import Iterator

import gast

from . import nodes

COMPREHENSIONS = (gast.ListComp, gast.SetComp, gast.DictComp, gast.GeneratorExp)


def walk(node: gast.AST, skip: tuple = ()) -> Iterator[gast.AST]:
    """The nodes of `node` (itself first), less the names its comprehensions bind, and
    less the nodes of a type in `skip` below `node` and theirs (nested functions)."""
    if isinstance(node, skip) and not isinstance(node, gast.Name):
        yield node
        for child in nodes.children(node):
            yield from _walk(child, frozenset(), skip)
    else:
        yield from _walk(node, frozenset(), skip)


def _walk(node: gast.AST, hidden: frozenset, skip: tuple) -> Iterator[gast.AST]:
    """Depth first, each node before its children (a stack, not a generator per node)."""
    todo = [node]
    while todo:
        node = todo.pop()
        if isinstance(node, skip):
            continue
        if isinstance(node, gast.Name):
            if node.id not in hidden:
                yield node
            continue
        yield node
        if isinstance(node, COMPREHENSIONS):
            yield from _comprehension(node, hidden, skip)
            continue
        todo += reversed(nodes.children(node))


def _comprehension(node: gast.AST, hidden: frozenset, skip: tuple) -> Iterator[gast.AST]:
    """The first iterable runs in the enclosing scope; each later part sees the targets of
    the generators before it (and its own, for its conditions and the element)."""
    bound = set(hidden)
    for gen in node.generators:
        yield gen
        yield from _walk(gen.iter, frozenset(bound), skip)
        bound |= {n.id for n in nodes.walk(gen.target) if isinstance(n, gast.Name)}
        yield from _walk(gen.target, frozenset(bound), skip)  # `for a[i] in ...`: a, i read
        for cond in gen.ifs:
            yield from _walk(cond, frozenset(bound), skip)
    elements = [node.key, node.value] if isinstance(node, gast.DictComp) else [node.elt]
    for element in elements:
        yield from _walk(element, frozenset(bound), skip)


def reads(node: gast.AST) -> Iterator[gast.Name]:
    """The Name nodes under `node` (as `walk`) that read their name: loads, and the target
    of an augmented assignment (`t *= k` reads `t`, its Name only a Store: fuzz seeds
    28793 and 7339)."""
    for n in walk(node):
        if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Load):
            yield n
        elif isinstance(n, gast.AugAssign) and isinstance(n.target, gast.Name):
            yield n.target
