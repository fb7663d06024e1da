"""Training loops in a function called once: the loop's body, outlined as a function of
its own, runs sliced from the loop's fourth iteration of a profile call on.

A function gets sliced after its profile calls (three by default); a `main()` or
`train(lambd)` that holds the whole training loop is called once or twice, so every step
of it ran eagerly. The body of its innermost loop holding a `with tf.GradientTape()`
block is the training step: `mark(fn)` finds such loops whose body can run as a function
without changing what it does, and gives each `Key.OUTLINE` (an `Outline`). The profile
program (slicer/partition.py) then calls that function, sliced by gpe as any function is,
in place of the body once the loop has run a few iterations in the call
(host/variants/outlined.py makes it from the body's own lines, so its messages name them).

A body qualifies when it leaves only by falling through or by a `break` or `continue` of
its loop (each becomes a `return` telling the loop whether to end; what it returns bound
before the statement holding it): no `return`, `yield`, `global`, `nonlocal`, `del`,
`try`, nested function or class, no call of `locals`/`vars`/`eval`/`exec`/`super`), every name it reads from the
function is bound before the loop (a parameter, a name assigned at the top of a block the
loop is in, before it, or an enclosing loop's target), it touches no name another scope
may change meanwhile (a global or nonlocal the function declares, its closure, a cell of
its own it would assign), and every name it assigns is
assigned on every pass (outside `if`/`for`/`while`) or also read from before: the call
`names = body(args)` then binds what the body would have, of the names read after it.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import gast

from . import anno, nodes, scope, templates
from .anno import Key

_FORBIDDEN = (gast.Return, gast.Yield, gast.YieldFrom, gast.Await, gast.Global,
              gast.Nonlocal, gast.Delete, gast.FunctionDef, gast.AsyncFunctionDef,
              gast.Lambda, gast.ClassDef, gast.Try, gast.AsyncFor, gast.AsyncWith)
_FRAME_READERS = frozenset({"locals", "vars", "eval", "exec", "super", "globals", "dir"})
_BRANCHING = (gast.If, gast.For, gast.While, gast.Try, gast.AsyncFor, gast.AsyncWith)


@dataclass(frozen=True)
class Outline:
    lineno: int                # the loop's line
    first: int                 # the body's first and last lines in the user's file
    last: int
    params: tuple[str, ...]    # what the body reads from the function, in this order
    stores: tuple[str, ...]    # what it binds that is read after it, returned in this order
    # the `break`s and `continue`s of the loop in the body: (line, column, end column,
    # a break?); each becomes a `return` of the stores and whether the loop ends
    exits: tuple[tuple[int, int, int, bool], ...] = ()


def mark(fn: gast.FunctionDef, code=None) -> None:
    """Key.OUTLINE on each innermost loop of `fn` holding a tape whose body qualifies.
    `code`: the function's code object, whose closure and cells the body must not touch."""
    local = _stored(fn) | _arguments(fn)
    # names whose value the body would hold as a copy while something else may change
    # them: globals and nonlocals it declares, nonlocals of its nested functions, its own
    # closure (the body cannot share those cells); a cell of its own is read-only there
    shared = frozenset(getattr(code, "co_freevars", ())) | frozenset(
        name for n in nodes.walk(fn) if isinstance(n, (gast.Global, gast.Nonlocal))
        for name in n.names)
    cells = frozenset(getattr(code, "co_cellvars", ()))
    for loop, bound in _loops(fn.body, _arguments(fn)):
        inside = {id(n) for stmt in loop.body for n in scope.reads(stmt)}
        inside |= _bound_by_their_loop(fn)
        live = frozenset(n.id for n in scope.reads(fn) if id(n) not in inside)
        outline = _outline(loop, bound, local, live)
        if outline is None or shared & (set(outline.params) | _touched(loop.body)) or \
                cells & frozenset().union(*(_stored(s) for s in loop.body)):
            continue
        anno.set(loop, Key.OUTLINE, outline)


def _bound_by_their_loop(fn: gast.FunctionDef) -> set:
    """The reads of a `for` loop's target in that loop's body: the loop bound them, so none
    sees what another statement bound (`for metric in [mean_loss] + metrics:
    metric.reset_state()` after a step loop whose body runs `for metric in metrics`)."""
    out = set()
    for loop in nodes.walk(fn):
        if isinstance(loop, gast.For):
            bound = _stored(loop.target)
            out |= {id(n) for stmt in loop.body for n in scope.reads(stmt) if n.id in bound}
    return out


def _touched(body: list) -> frozenset:
    return frozenset(n.id for stmt in body for n in scope.walk(stmt) if isinstance(n, gast.Name))


def _arguments(fn: gast.FunctionDef) -> frozenset:
    args = fn.args
    every = args.posonlyargs + args.args + args.kwonlyargs + \
        [a for a in (args.vararg, args.kwarg) if a is not None]
    return frozenset(a.id for a in every)


def _loops(block: list, bound: frozenset):
    """(loop, names bound before it) for each `for` holding a tape and no inner such loop."""
    for stmt in block:
        if isinstance(stmt, gast.For):
            inner = bound | _stored(stmt.target)
            found = list(_loops(stmt.body, inner))
            if found:
                yield from found
            elif _holds_tape(stmt.body):
                yield stmt, inner
        elif isinstance(stmt, (gast.With, gast.If, gast.While)):  # (not in a `try`: an
            # exception a pass raises would leave the handler what the pass had bound)
            for body in _blocks(stmt):
                yield from _loops(body, bound)
        if not isinstance(stmt, _BRANCHING):
            bound = bound | _stored(stmt)


def _blocks(stmt) -> list:
    out = [getattr(stmt, f, []) for f in ("body", "orelse", "finalbody")]
    return out + [h.body for h in getattr(stmt, "handlers", [])]


def _holds_tape(body: list) -> bool:
    for stmt in body:
        for node in nodes.walk(stmt):
            if isinstance(node, gast.withitem) and _dotted(node.context_expr).endswith(
                    "GradientTape"):
                return True
    return False


def _dotted(node) -> str:
    if isinstance(node, gast.Call):
        node = node.func
    parts = []
    while isinstance(node, gast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join(reversed(parts + ([node.id] if isinstance(node, gast.Name) else [])))


def _stored(node) -> frozenset:
    """Names a statement (or target) binds in the function's own scope: assigned,
    imported, a def's or a class's name (and, over-counted, what nested functions bind)."""
    return frozenset(n.id for n in scope.walk(node) if isinstance(n, gast.Name) and
                     isinstance(n.ctx, gast.Store)) | frozenset(
        (a.asname or a.name).split(".")[0] for n in nodes.walk(node)
        if isinstance(n, (gast.Import, gast.ImportFrom)) for a in n.names) | frozenset(
        n.name for n in nodes.walk(node) if isinstance(n, (gast.FunctionDef, gast.ClassDef)))


def _outline(loop: gast.For, bound: frozenset, local: frozenset, live: frozenset
             ) -> Outline | None:
    """`live`: the names the function reads outside the body (what it returns of those it
    binds; a tape or the step's gradients, read only inside, stay inside)."""
    body = loop.body
    if loop.orelse or not _plain(body):
        return None
    stores = frozenset().union(*(_stored(s) for s in body))
    free, always = _free_reads(body, frozenset())
    exits = [(j, n) for j, stmt in enumerate(body) for n in _this_loop(stmt)
             if isinstance(n, (gast.Break, gast.Continue))]
    # what the body reads of the function's names before it binds them comes from before
    # the loop, and a name bound on some passes only keeps that value on the others: each
    # must be bound there (a global or builtin it reads is its own global too)
    needed = stores & (live | free)  # (an inner loop's target read nowhere else is not)
    params = sorted((free & local) | (needed - always))
    if any(n not in bound for n in params):
        return None
    for j, _ in exits:  # (what it returns there must be bound there: before that statement)
        if needed - set(params) - _free_reads(body[:j], frozenset())[1]:
            return None
    first = body[0].lineno
    last = max(getattr(n, "end_lineno", None) or getattr(n, "lineno", first)
               for n in nodes.walk(body[-1]))
    return Outline(loop.lineno, first, last, tuple(params), tuple(sorted(needed)), tuple(
        (n.lineno, n.col_offset, n.end_col_offset, isinstance(n, gast.Break))
        for _, n in exits))


def _plain(body: list) -> bool:
    for stmt in body:
        for node in _own(stmt):
            if isinstance(node, _FORBIDDEN) or isinstance(node, gast.Call) and isinstance(
                    node.func, gast.Name) and node.func.id in _FRAME_READERS:
                return False
            if isinstance(node, gast.NamedExpr):
                return False
    return True


def _own(stmt):
    """The nodes of `stmt`, nested functions' and lambdas' own bodies left out (their
    headers are seen: _FORBIDDEN refuses them)."""
    todo = [stmt]
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (gast.FunctionDef, gast.Lambda, gast.ClassDef)):
            todo.extend(nodes.children(node))


def _this_loop(stmt):
    """The statements a `break` or `continue` in which would end this loop's pass."""
    todo = [stmt]
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (gast.For, gast.While, gast.FunctionDef, gast.Lambda,
                                 gast.ClassDef)):
            todo.extend(nodes.children(node))
        elif isinstance(node, (gast.For, gast.While)):
            todo.extend(node.orelse)


def _free_reads(body: list, assigned: frozenset) -> tuple[frozenset, frozenset]:
    """(names `body` may read before binding them, after `assigned` were bound; the names
    then bound on every pass: not inside a branch or a loop), in statement order."""
    free = frozenset()
    for stmt in body:
        if isinstance(stmt, gast.With):
            for item in stmt.items:
                free |= {n.id for n in scope.reads(item.context_expr)} - assigned
                if item.optional_vars is not None:
                    assigned |= _stored(item.optional_vars)
            inner, assigned = _free_reads(stmt.body, assigned)
            free |= inner
        elif isinstance(stmt, gast.For):  # its target is bound in its body
            free |= {n.id for n in scope.reads(stmt.iter)} - assigned
            free |= _free_reads(stmt.body, assigned | _stored(stmt.target))[0]
            free |= _free_reads(stmt.orelse, assigned)[0]
        elif isinstance(stmt, (gast.If, gast.While)):
            free |= {n.id for n in scope.reads(stmt.test)} - assigned
            free |= _free_reads(stmt.body, assigned)[0] | _free_reads(stmt.orelse, assigned)[0]
        else:
            free |= {n.id for n in scope.reads(stmt)} - assigned
            assigned |= _stored(stmt)
    return free, assigned


def holds(stmt: gast.stmt) -> bool:
    """A loop or `if` (not itself outlined) with an outlined loop inside."""
    return isinstance(stmt, (gast.For, gast.While, gast.If)) and not anno.has(
        stmt, Key.OUTLINE) and any(anno.has(n, Key.OUTLINE) for n in nodes.walk(stmt))


def profile_loop(loop: gast.For, k: int) -> gast.For:
    """The profile program's copy of an outlined loop (the k-th of the plan's outlines): a
    pass calls the sliced body where the host gives one (host/variants/outlined.py), else runs
    the statements as written, observed."""
    outline = anno.get(loop, Key.OUTLINE)
    # what an iteration starts with is observed at every pass, the sliced body's too: the
    # caller's own variant is built from them (a smaller last batch relaxes its loop)
    observed = 0
    while observed < len(loop.body) and _observation(loop.body[observed]):
        observed += 1
    call = templates.expr(f"_gpe_o({', '.join(outline.params)})")
    names = outline.stores + ("_gpe_x",) * bool(outline.exits)  # (_gpe_x: the loop ends)
    taken = templates.replace(
        f"_gpe_o = _gpe_obs_outlined({k})\nif _gpe_o is not None:\n    __call__\n"
        "else:\n    __body__",
        __call__=[templates.replace("t = c", t=templates.names(names, store=True),
                                    c=call)[0] if names else gast.Expr(value=call)]
        + templates.replace("if _gpe_x:\n    break") * bool(outline.exits),
        __body__=loop.body[observed:])
    loop = copy.copy(loop)
    loop.body = loop.body[:observed] + taken
    return loop


def _observation(stmt: gast.stmt) -> bool:
    return isinstance(stmt, gast.Expr) and isinstance(stmt.value, gast.Call) and \
        isinstance(stmt.value.func, gast.Name) and stmt.value.func.id == "_gpe_obs"
