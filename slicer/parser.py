"""Parse a Python function into a gast FunctionDef and resolve names in its namespace.

`parse(fn)` returns a `Parsed`: the FunctionDef node (decorators removed, line numbers
set to the user's file), the file name, and the function's namespace (closure cells,
globals, builtins). Needs nothing to have run first.
"""
from __future__ import annotations

import builtins
import inspect
from dataclasses import dataclass
from typing import Any, Callable

import gast

from . import lambdas
from .errors import Refusal
from .sourcecheck import same_code

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


def _block(text: str) -> tuple[str, int]:
    """`text` made parseable alone: an indented def (a method, a nested function) goes under
    `if 1:` rather than being dedented, which would change its multi-line strings."""
    if text[:1] in (" ", "\t"):
        return "if 1:\n" + text, 1
    return text, 0


def parse(fn: Callable) -> Parsed:
    """Parse `fn`'s source. Raises Refusal when there is no usable source."""
    fn = inspect.unwrap(fn)
    filename = inspect.getsourcefile(fn) or inspect.getfile(fn)
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as exc:
        raise Refusal("no-source", f"cannot read the source of {fn.__qualname__}: {exc}",
                      "define the function in a file", filename, 0) from None
    if fn.__name__ == "<lambda>":  # `net = lambda X: ...`: judged and traced as a def
        node = lambdas.as_def(fn, "".join(lines), first, filename)
        if node is None:
            raise Refusal("no-source", f"cannot find the source of {fn.__qualname__} alone "
                          "in its lines", "define it with def", filename, first)
        return Parsed(node=node, filename=filename, fn=fn)
    source, nested = _block("".join(lines))
    try:
        module = gast.parse(source)
    except SyntaxError as exc:
        raise Refusal("no-source", f"source of {fn.__qualname__} does not parse alone: {exc}",
                      "", filename, first) from None
    node = module.body[0].body[0] if nested else module.body[0]
    if not isinstance(node, gast.FunctionDef):
        raise Refusal("unsupported-function", f"{fn.__qualname__} is not a plain def "
                      f"({type(node).__name__})", "", filename, first)
    if not same_code(fn, source, filename):
        raise Refusal("source-changed", f"the source of {fn.__qualname__} in its file is not "
                      "the code Python runs (the file was edited after it was imported)",
                      "it runs as Python runs it; restart the program to slice the new "
                      "text", filename, first)
    gast.increment_lineno(module, first - 1 - nested)
    node.decorator_list = []
    return Parsed(node=node, filename=filename, fn=fn)
