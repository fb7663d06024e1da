"""The body of a training loop outlined as a function gpe slices (slicer/outline.py).

`body_function(fn, outline)` makes, from the loop body's own lines in `fn`'s file, the
function `def fn.<loop N>(params): <body>; return (stores,)`: compiled in a text that
keeps each line where it is in the file (so tracebacks and gpe's messages name the user's
lines), registered with linecache under a name of its own so that gpe's parser reads it
as any source, and run in `fn`'s globals. None where the lines do not make one (a body
on its loop's line, a file changed since `fn` was imported: checked again here).

A `break` or `continue` of the loop in the body is written as `return (stores, True)` or
`(stores, False)` at its place on its line; the profile program ends the loop on True.

`Outlined` (one per SlicedFunction's builder) keeps, per loop, the body wrapped as a
function gpe slices with the owner's options, and lets a profile call take it after
`PASSES` passes of the loop in that call (their observations build the owner itself).
"""
from __future__ import annotations

import collections
import linecache
import logging
from typing import Any, Callable

from ...slicer import Refusal
from ...slicer.parser import parse

log = logging.getLogger("gpe")

PASSES = 3  # passes of a loop a profile call runs as written before it takes the body


def body_function(fn: Callable, outline) -> Callable | None:
    try:  # (the file as it is now must still be the code `fn` runs: parse checks it)
        filename = parse(fn).filename
    except Refusal:
        return None
    lines = linecache.getlines(filename)
    if outline.first <= outline.lineno or len(lines) < outline.last:
        return None
    body = lines[outline.first - 1:outline.last]
    indent = body[0][:len(body[0]) - len(body[0].lstrip())]
    name = f"_gpe_loop{outline.lineno}"
    returned = list(outline.stores)
    for line, start, end, ends in sorted(outline.exits, reverse=True):  # (right to left)
        text = body[line - outline.first]
        body[line - outline.first] = \
            f"{text[:start]}return ({', '.join(returned + [str(ends)])},){text[end:]}"
    if outline.exits:
        returned.append("False")
    text = "\n" * (outline.first - 2) + f"def {name}({', '.join(outline.params)}):\n" + \
        "".join(body) + ("" if body[-1].endswith("\n") else "\n") + \
        f"{indent}return ({', '.join(returned)},)\n" * bool(returned)
    source = f"{filename}#loop{outline.lineno}"
    try:
        code = compile(text, source, "exec")
    except SyntaxError:
        return None
    linecache.cache[source] = (len(text), None, text.splitlines(True), source)
    made: dict[str, Any] = {}
    exec(code, fn.__globals__, made)  # noqa: S102 (the user's own lines, in their globals)
    body_fn = made[name]
    body_fn.__qualname__ = f"{fn.__qualname__}.<loop{outline.lineno}>"
    return body_fn


class Outlined:
    """The outlined loop bodies of one function, and a profile call's passes of each."""

    def __init__(self, owner):
        self.owner = owner
        self.bodies: dict[int, Any] = {}  # loop line -> its sliced body (None: none made)

    def taker(self, outlines: tuple) -> Callable[[int], Any]:
        """For one profile call: `take(k)` at each pass of loop k, the sliced body to call
        once the call has run PASSES passes of it as written, else None."""
        passes: collections.Counter = collections.Counter()

        def take(k: int):
            passes[k] += 1
            return self.body(outlines[k]) if passes[k] > PASSES else None
        return take

    def body(self, outline):
        if outline.lineno not in self.bodies:
            owner, made = self.owner, body_function(self.owner.fn, outline)
            self.bodies[outline.lineno] = made and owner.__class__(
                made, profile_calls=owner.profile_calls, auto=owner.auto,
                adaptive=owner.adaptive, payoff=owner.payoff.waiting)
            log.info("%s: the loop at line %d runs its body as %s", owner.__qualname__,
                     outline.lineno, "a function gpe slices" if made else "written")
        return self.bodies[outline.lineno]
