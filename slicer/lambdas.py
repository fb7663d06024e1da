"""A lambda's source as a def, for the parser: `net = lambda X: d2l.linreg(X, w, b)`.

`inspect` gives a lambda's lines (the statement it is in); `as_def(fn, text, first,
filename)` finds, among the lambdas of that text, the one whose compiled code is `fn`'s
(instruction by instruction, as sourcecheck compares a def), and returns it as
`def <name>(params): return body`, at its own line: a callee gpe judges and traces as it
does a def. None where the text does not parse alone (a lambda inside a call spanning
lines) or no lambda there compiles to `fn`'s code (the file changed).
"""
from __future__ import annotations

import types
from typing import Callable

import gast

from . import templates
from .sourcecheck import fingerprint

NAME = "_gpe_lambda"  # (a lambda has no name a def can take)


def as_def(fn: Callable, text: str, first: int, filename: str) -> gast.FunctionDef | None:
    nested = text[:1] in (" ", "\t")  # (an indented statement: under `if 1:` to parse)
    text = "if 1:\n" + text if nested else text
    first -= nested
    try:
        module = gast.parse(text)
        code = compile("\n" * (first - 1) + text, filename, "exec")
    except SyntaxError:
        return None
    nodes = sorted((n for n in gast.walk(module) if isinstance(n, gast.Lambda)),
                   key=lambda n: (n.lineno, n.col_offset))
    codes = list(_lambda_codes(code))
    if len(nodes) != len(codes):
        return None
    want = fingerprint(fn.__code__)
    found = [n for n, c in zip(nodes, codes) if fingerprint(c) == want]
    if len(found) != 1:
        return None
    (lam,) = found
    fn_def = templates.function(NAME, [])
    fn_def.args = lam.args
    fn_def.body = [gast.Return(value=lam.body)]
    gast.copy_location(fn_def, lam)
    gast.copy_location(fn_def.body[0], lam.body)
    gast.increment_lineno(fn_def, first - 1)
    return fn_def


def _lambda_codes(code: types.CodeType):
    """The lambdas compiled in `code`, in the order of their text (depth first)."""
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if const.co_name == "<lambda>":
                yield const
            yield from _lambda_codes(const)
