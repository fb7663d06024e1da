"""Shrink a failing program while its finding persists.

`minimise_seed(seed)` first checks, in a fresh child process, that the seed's finding
reproduces alone (a finding that needs earlier seeds in the same process is reported as
such), then shrinks, each candidate run in a child process under a time limit:

1. the calls: the shortest prefix of the call list that still shows the finding;
2. statements: delete chunks, then single statements, of every statement list (module
   level, function bodies, branches, loop bodies, handlers); an emptied list gets `pass`;
3. compound statements: an `if`/`while`/`for`/`try` replaced by one of its bodies;
4. expressions: a call replaced by one of its arguments, a binary operation by one side,
   a `not x` by `x`;

repeated until nothing changes. A candidate counts as failing when it ends with the same
status and the same kind of difference as the original: a call's result (with what eager
did: returned, or raised which exception; and for a gpe-only error the exception gpe
raised), a variable, the module's globals, or the printed output.

`python -m tests.fuzz.minimise SEED [SEED...]` prints each minimised program.
"""
from __future__ import annotations

import ast
import copy
import os
import sys
from dataclasses import dataclass

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from fuzz.differential import FINDINGS, Result, Worker, call_args, mode_of  # noqa: E402
    from fuzz.generate import program  # noqa: E402
else:
    from .differential import FINDINGS, Result, Worker, call_args, mode_of
    from .generate import program


@dataclass
class Minimised:
    seed: int | None
    source: str
    args: list
    mode: str
    result: Result | None
    alone: bool           # the original finding reproduced in a fresh process
    checks: int

    def text(self) -> str:
        if self.result is None:
            return f"# seed {self.seed}: no finding in a fresh process"
        head = [f"# seed {self.seed}, mode {self.mode}: {self.result.status}",
                f"# {self.result.detail.splitlines()[0][:400] if self.result.detail else ''}",
                f"# calls main(x, n, flag, scale) with: {self.args}"]
        if not self.alone:
            head.append("# NOTE: the original did not reproduce alone")
        return "\n".join(head) + "\n" + self.source


def kind(result: Result) -> tuple:
    """What must stay the same while shrinking: the status and the kind of difference."""
    detail = result.detail
    if result.status == "hang":
        return (result.status,)
    if detail.startswith("call "):
        eager = detail.split("; gpe ")[0].split(": eager ", 1)[-1]
        eager = eager.split("(")[0] if eager.startswith("raised ") else "value"
        if result.status == "gpe_error":  # what eager did, and the exception gpe raised
            return (result.status, "call", eager,
                    detail.split("gpe raised ")[-1].split("(")[0])
        return (result.status, "call", eager)
    return (result.status, detail.split(":")[0].split(" line")[0])


class Shrinker:
    def __init__(self, args: list, mode: str, timeout: float, seed: int | None):
        self.args, self.mode, self.timeout, self.seed = args, mode, timeout, seed
        self.worker = Worker(recycle=60)
        self.checks = 0
        self.target: tuple | None = None
        self.last: Result | None = None

    def run(self, source: str, args: list | None = None) -> Result:
        self.checks += 1
        return self.worker.request({"source": source, "args": args or self.args,
                                    "mode": self.mode, "seed": self.seed}, self.timeout)

    def fails(self, source: str, args: list | None = None) -> bool:
        try:
            compile(source, "<candidate>", "exec")
        except SyntaxError:
            return False
        result = self.run(source, args)
        if result.status in FINDINGS and kind(result) == self.target:
            self.last = result
            return True
        return False

    # -- the passes ----------------------------------------------------------------------
    def shrink_calls(self, source: str) -> None:
        for k in range(2, len(self.args)):
            if self.fails(source, self.args[:k]):
                self.args = self.args[:k]
                return

    def statement_lists(self, tree: ast.AST):
        """(owner, field) of every statement list, outermost first."""
        for node in ast.walk(tree):
            for name in ("body", "orelse", "finalbody"):
                value = getattr(node, name, None)
                if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                    yield node, name

    def candidates(self, tree: ast.Module):
        """Smaller trees, each a copy: statement deletions (chunks then single ones),
        compound statements replaced by a body, expressions by a part of them."""
        lists = list(self.statement_lists(tree))
        for index, (owner, name) in enumerate(lists):
            size = len(getattr(owner, name))
            chunk = size // 2
            while chunk >= 1:
                for start in range(0, size, chunk):
                    yield self._edit(tree, index, lambda body: body[:start] + body[start + chunk:])
                chunk //= 2
        for index, (owner, name) in enumerate(lists):
            for pos, stmt in enumerate(getattr(owner, name)):
                bodies = []
                if isinstance(stmt, (ast.If, ast.For, ast.While)):
                    bodies = [stmt.body, stmt.orelse]
                elif isinstance(stmt, ast.Try):
                    bodies = [stmt.body + stmt.finalbody] + [h.body for h in stmt.handlers]
                for body in bodies:
                    if body:
                        yield self._edit(tree, index, lambda b, pos=pos, body=body:
                                         b[:pos] + copy.deepcopy(body) + b[pos + 1:])
        exprs = [n for n in ast.walk(tree) if isinstance(n, (ast.Call, ast.BinOp, ast.UnaryOp))]
        for i, node in enumerate(exprs):
            parts = []
            if isinstance(node, ast.Call):
                parts = [a for a in node.args if not isinstance(a, ast.Starred)]
            elif isinstance(node, ast.BinOp):
                parts = [node.left, node.right]
            elif isinstance(node, ast.UnaryOp):
                parts = [node.operand]
            for j in range(len(parts)):
                yield self._replace_expr(tree, i, j)

    def _edit(self, tree, index, change):
        new = copy.deepcopy(tree)
        owner, name = list(self.statement_lists(new))[index]
        body = change(getattr(owner, name))
        if not body:
            if name in ("orelse", "finalbody"):
                body = []
            else:
                body = [ast.Pass()]
        setattr(owner, name, body)
        return new

    @staticmethod
    def _replace_expr(tree, i, j):
        new = copy.deepcopy(tree)
        exprs = [n for n in ast.walk(new) if isinstance(n, (ast.Call, ast.BinOp, ast.UnaryOp))]
        node = exprs[i]
        if isinstance(node, ast.Call):
            part = [a for a in node.args if not isinstance(a, ast.Starred)][j]
        elif isinstance(node, ast.BinOp):
            part = [node.left, node.right][j]
        else:
            part = node.operand

        class Swap(ast.NodeTransformer):
            def generic_visit(self, n):
                if n is node:
                    return part
                return super().generic_visit(n)
        return Swap().visit(new)

    def shrink(self, source: str) -> str:
        tree = ast.parse(source)
        best = ast.unparse(tree)
        changed = True
        while changed:
            changed = False
            for candidate in self.candidates(ast.parse(best)):
                try:
                    text = ast.unparse(ast.fix_missing_locations(candidate))
                except Exception:
                    continue
                if len(text) >= len(best) or text == best:
                    continue
                if self.fails(text):
                    best, changed = text, True
                    break  # candidates are computed from the new best
        return best


def minimise_source(source: str, args: list, mode: str = "main", timeout: float = 60.0,
                    seed: int | None = None) -> Minimised:
    shrinker = Shrinker([list(a) for a in args], mode, timeout, seed)
    try:
        first = shrinker.run(source)
        if first.status not in FINDINGS:
            return Minimised(seed, source, args, mode, None, False, shrinker.checks)
        shrinker.target = kind(first)
        shrinker.last = first
        shrinker.shrink_calls(source)
        small = shrinker.shrink(source)
        return Minimised(seed, small, shrinker.args, mode, shrinker.last, True, shrinker.checks)
    finally:
        shrinker.worker.stop()


def minimise_seed(seed: int, calls: int = 6, timeout: float = 60.0) -> Minimised:
    return minimise_source(program(seed), call_args(seed, calls), mode_of(seed), timeout, seed)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        m = minimise_seed(int(arg))
        print(m.text())
        print(f"# {m.checks} checks\n", flush=True)
