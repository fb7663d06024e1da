"""Parse a Python function into a gast FunctionDef and resolve names in its namespace.

`parse(fn)` returns a `Parsed`: the FunctionDef node (decorators removed, line numbers
set to the user's file), the file name, and the function's namespace (closure cells,
globals, builtins). Needs nothing to have run first.
"""
from __future__ import annotations

import builtins
import inspect
import textwrap
from dataclasses import dataclass
from typing import Any, Callable

import gast

from gpe.slicer.errors import Refusal

MISSING = object()


@dataclass(frozen=True)
class Parsed:
    node: gast.FunctionDef
    filename: str
    fn: Callable

    def lookup(self, name: str) -> Any:
        """The object `name` refers to in the function's closure, globals or builtins."""
        code = self.fn.__code__
        if self.fn.__closure__ and name in code.co_freevars:
            cell = self.fn.__closure__[code.co_freevars.index(name)]
            try:
                return cell.cell_contents
            except ValueError:
                return MISSING
        if name in self.fn.__globals__:
            return self.fn.__globals__[name]
        return getattr(builtins, name, MISSING)

    @property
    def lineno(self) -> int:
        return self.node.lineno


def parse(fn: Callable) -> Parsed:
    """Parse `fn`'s source. Raises Refusal when there is no usable source."""
    fn = inspect.unwrap(fn)
    filename = inspect.getsourcefile(fn) or inspect.getfile(fn)
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as exc:
        raise Refusal("no-source", f"cannot read the source of {fn.__qualname__}: {exc}",
                      "define the function in a file", filename, 0) from None
    source = textwrap.dedent("".join(lines))
    try:
        module = gast.parse(source)
    except SyntaxError as exc:
        raise Refusal("no-source", f"source of {fn.__qualname__} does not parse alone: {exc}",
                      "", filename, first) from None
    node = module.body[0]
    if not isinstance(node, gast.FunctionDef):
        raise Refusal("unsupported-function", f"{fn.__qualname__} is not a plain def "
                      f"({type(node).__name__})", "", filename, first)
    gast.increment_lineno(module, first - 1)
    node.decorator_list = []
    return Parsed(node=node, filename=filename, fn=fn)
