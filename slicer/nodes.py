"""`walk(node)`: every node of a tree, in `ast.walk`'s order (breadth first, fields in
order), and `children(node)`: `ast.iter_child_nodes` as a list, both without the two
generator layers per node of `iter_child_nodes` and `iter_fields`: the slicer's passes walk
statements many times, and those walks were a quarter of slicing. Imports nothing of the
slicer."""
from __future__ import annotations

from ast import AST
from collections import deque
from typing import Iterator


def walk(node: AST) -> Iterator[AST]:
    """The nodes of `node`'s tree, `node` first, as `ast.walk` yields them."""
    todo = deque((node,))
    pop, push = todo.popleft, todo.append
    while todo:
        node = pop()
        for name in node._fields:
            value = getattr(node, name, None)
            if isinstance(value, AST):
                push(value)
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, AST):
                        push(item)
        yield node


def children(node: AST) -> list[AST]:
    """The child nodes of `node`, as `ast.iter_child_nodes` yields them."""
    found = []
    for name in node._fields:
        value = getattr(node, name, None)
        if isinstance(value, AST):
            found.append(value)
        elif isinstance(value, list):
            found += [item for item in value if isinstance(item, AST)]
    return found
