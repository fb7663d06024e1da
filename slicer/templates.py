"""Generate code from templates: real Python with placeholder names.

`replace(template, **subs)` parses `template` and substitutes each placeholder name:
a str renames it, an expression node takes its place (a copy of it: see `_copy`), and a
list of statements given for a placeholder that stands alone as a statement is spliced in
there (the statements themselves, not copies). `source_of(node)` is the source of a tree.
"""
from __future__ import annotations

import ast
import copy
import textwrap
from typing import Any

import gast


def replace(template: str, **subs: Any) -> list[gast.stmt]:
    tree = gast.parse(textwrap.dedent(template))
    return _Substitute(subs).visit(tree).body


def expr(template: str, **subs: Any) -> gast.expr:
    (stmt,) = replace(template, **subs)
    return stmt.value


def source_of(node: gast.AST) -> str:
    return ast.unparse(gast.gast_to_ast(node))


def name(identifier: str, store: bool = False) -> gast.Name:
    ctx = gast.Store() if store else gast.Load()
    return gast.Name(id=identifier, ctx=ctx, annotation=None, type_comment=None)


class _Substitute(gast.NodeTransformer):
    def __init__(self, subs: dict[str, Any]):
        self.subs = subs

    def _body(self, stmts: list[gast.stmt]) -> list[gast.stmt]:
        out = []
        for stmt in stmts:
            if (isinstance(stmt, gast.Expr) and isinstance(stmt.value, gast.Name)
                    and isinstance(self.subs.get(stmt.value.id), list)):
                out.extend(self.subs[stmt.value.id])
            else:
                out.append(stmt)
        return out

    def generic_visit(self, node: gast.AST) -> gast.AST:
        for field in ("body", "orelse", "finalbody"):
            if isinstance(getattr(node, field, None), list):
                setattr(node, field, self._body(getattr(node, field)))
        return super().generic_visit(node)

    def visit_Name(self, node: gast.Name) -> gast.AST:
        sub = self.subs.get(node.id)
        if sub is None:
            return node
        if isinstance(sub, str):
            node.id = sub
            return node
        if isinstance(sub, gast.AST):
            new = _copy(sub)
            if hasattr(new, "ctx"):
                new.ctx = node.ctx
            return new
        raise ValueError(f"cannot substitute {node.id!r} with {sub!r} here")

    def visit_FunctionDef(self, node: gast.FunctionDef) -> gast.AST:
        if isinstance(self.subs.get(node.name), str):
            node.name = self.subs[node.name]
        if isinstance(self.subs.get("__args__"), gast.arguments) and (
                node.args.args and node.args.args[0].id == "__args__"):
            node.args = self.subs["__args__"]
        return self.generic_visit(node)


def _copy(node: gast.AST) -> gast.AST:
    """An independent copy of `node` and its subtree, annotations included: every copied
    node gets its own annotation dict (slicer/anno.py), so an annotation later set on one
    copy shows neither on another copy nor on the original. Annotation values that are
    nodes would be copied too; the others (enums, strings, numbers, tuples and frozensets
    of them) are immutable and deepcopy keeps them as they are."""
    return copy.deepcopy(node)


FUNCTION = """
def __name__(__args__):
    pass
"""


def function(identifier: str, params) -> gast.FunctionDef:
    """`def identifier(params...):` with an empty body (the caller fills it)."""
    (fn,) = replace(FUNCTION, __name__=identifier, __args__=arguments(params))
    fn.body = []
    return fn


def names(identifiers, store: bool = False) -> gast.Tuple:
    """`(a, b, ...)` of plain names."""
    ctx = gast.Store() if store else gast.Load()
    return gast.Tuple(elts=[name(n, store) for n in identifiers], ctx=ctx)


def arguments(identifiers) -> gast.arguments:
    """The parameter list `(a, b, ...)`."""
    return gast.arguments(args=[name(n) for n in identifiers], posonlyargs=[],
                          vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                          defaults=[])
