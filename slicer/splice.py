"""Callees spliced into their caller: a call, inside a TF `with` block (a GradientTape), of
the user's own function or method that does host work besides TF work is replaced by the
callee's statements, so that the caller's slicing places each of them (d2l's Trainer:
`loss = self.model.training_step(batch)` inside the tape, where training_step computes
the loss and plots it with `.numpy()`). Judged as a whole, such a call is host work, and
the tensor it returns is "made by host code inside a `with` block": the whole step ran
eagerly.

`note(node, fn)` (the kinds pass, on a call whose callee it could not judge TF work) marks
a call; `sites(fn_node)` lists the marked calls to splice; `splice(fn_node, sites, caller)`
rewrites a fresh parse of the caller. The pipeline then slices the rewritten function.

What is spliced is exactly what Python would run: the arguments are evaluated first, in
order, into the callee's own (renamed) parameters; the object a method is called on is its
attribute chain, read again where the callee reads `self` (only where nothing in the callee
can rebind that chain); the callee's final `return` becomes the caller's assignment. A callee
is spliced only where this is certain to be equivalent: a plain function or method of the
caller's own module (its globals are the caller's), not a generator, no closure (`super()`
has one), no `global`/`nonlocal`, no `return` but a last one, parameters without `*`/`**`
or defaults other than literals.
"""
from __future__ import annotations

import copy
import inspect
import itertools
import types
from typing import Any

import gast

from . import anno, nodes
from .anno import Key
from .callees import why_host
from .chains import gpe_wrapped, stored_names
from .facts import Kind
from .parser import parse

DEPTH = 3  # a callee's own callees are spliced too, this many levels down


def note(inf, node: gast.Call, fn: Any) -> None:
    """The kinds pass (`inf`, its inferer): `node` calls `fn`, a user function it could not
    judge all TF work. A method is marked only where the chain it is called on reads
    attributes the objects hold themselves (no property computing one each time). The
    call's function also gets why the callee is host work (callees.why_host), for the
    caller's reasons and messages."""
    if not isinstance(fn, types.FunctionType):
        return
    why = why_host(fn)
    if why:
        anno.set(node.func, Key.WHY_HOST, f"{fn.__qualname__}: {why}")
    func, bound = node.func, False
    sliced = gpe_wrapped(inf.value_of(func))  # (outside a tape it runs as gpe slices it)
    if isinstance(func, gast.Attribute):
        # a method of the object (`self.model.training_step`): bound to the chain it is
        # called on; a function an object or module holds (`h.loss_fn`, `d2l.linreg`): not
        value = inf.value_of(func)  # (under `gpe run` a method is its bound wrapper)
        method = inspect.ismethod(value) or gpe_wrapped(value) and hasattr(value, "__self__")
        bound = method and value.__self__ is inf.value_of(func.value)
        if bound and not _held(inf, func.value) or not bound and method:
            return
    anno.set(node, Key.SPLICE, (fn, bound, sliced))


def _held(inf, chain: gast.expr) -> bool:
    attrs = []
    while isinstance(chain, gast.Attribute):
        attrs.append(chain.attr)
        chain = chain.value
    if not isinstance(chain, gast.Name) or chain.id not in inf.facts.objects or \
            chain.id in inf.rebound:
        return False
    obj = inf.facts.objects[chain.id]
    for attr in reversed(attrs):
        held = getattr(obj, "__dict__", None)
        if not isinstance(held, dict) or attr not in held:
            return False
        obj = held[attr]
    return True


def sites(fn_node: gast.FunctionDef) -> dict[int, Any]:
    """{position of the statement in `nodes.walk(fn_node)`: (its callee, whether a method)}
    for each `target = callee(...)` or `callee(...)` statement of the function's own
    whose call the kinds pass marked: inside a TF `with` block, and outside one where gpe
    does not slice the callee itself (a method under `@gpe.function`: d2l's
    `self.model.validation_step(batch)`, whose TF work then runs in the graph; a host
    helper's statements keep their own order with the graph, where the call waited for
    it as for anything that may touch TF state)."""
    own, inside = {id(s) for s in _own(fn_node.body)}, set()
    for stmt in nodes.walk(fn_node):
        if isinstance(stmt, gast.With) and all(
                anno.get(item.context_expr, Key.KIND) == Kind.TF_OBJECT for item in stmt.items):
            inside |= {id(s) for s in _own(stmt.body)}
    return {i: anno.get(stmt.value, Key.SPLICE) for i, stmt in enumerate(nodes.walk(fn_node))
            if id(stmt) in own and isinstance(stmt, (gast.Assign, gast.Expr)) and
            isinstance(stmt.value, gast.Call) and anno.has(stmt.value, Key.SPLICE) and (
                id(stmt) in inside or  # (outside a tape a function gpe slices runs nested)
                anno.get(stmt.value.func, Key.KIND) != Kind.SLICED_FN and
                not anno.get(stmt.value, Key.SPLICE)[2] and
                not _keeps_values(anno.get(stmt.value, Key.SPLICE)[0]))}


def _keeps_values(fn: Any) -> bool:
    """A callee that stores values in a container its object holds (`self.v_dvar[i] =
    ...`, TF Core's Adam keeping its moments as tensors in lists): spliced, the caller's
    key would hold those values, new at every call (it would never run sliced); outside a
    tape such a call stays a call, on the host."""
    try:
        node = parse(fn).node
    except Exception:  # noqa: BLE001 (no source: not spliced anyway)
        return False
    return any(isinstance(n, gast.Subscript) and isinstance(n.ctx, gast.Store) and
               isinstance(n.value, gast.Attribute) for n in nodes.walk(node))


def _own(stmts: list[gast.stmt]):
    """The statements of `stmts` and of the blocks inside them, not of nested functions."""
    for stmt in stmts:
        yield stmt
        if not isinstance(stmt, (gast.FunctionDef, gast.ClassDef, gast.Lambda)):
            for field in ("body", "orelse", "finalbody"):
                yield from _own(getattr(stmt, field, []) or [])


def splice(fn_node: gast.FunctionDef, where: dict[int, tuple], caller: Any) -> int:
    """Replace the statements at `where` (positions in `nodes.walk`: `fn_node` is the tree
    `sites` was given a copy of, before any pass) by their callees' bodies, where that is
    certain to be equivalent; returns how many were."""
    walked = list(nodes.walk(fn_node))
    wanted = {id(walked[i]): fn for i, fn in where.items()}
    done = 0
    names = itertools.count()  # (per function: slicing it again gives the same names)

    def rewrite(stmts: list[gast.stmt]) -> list[gast.stmt]:
        nonlocal done
        out = []
        for stmt in stmts:
            for field in ("body", "orelse", "finalbody"):
                if getattr(stmt, field, None) and not isinstance(
                        stmt, (gast.FunctionDef, gast.ClassDef)):
                    setattr(stmt, field, rewrite(getattr(stmt, field)))
            site = wanted.get(id(stmt))
            body = _spliced(stmt, *site[:2], caller, fn_node, next(names)) \
                if site is not None else None
            if body is None:
                out.append(stmt)
            else:
                out += body
                done += 1
        return out
    fn_node.body = rewrite(fn_node.body)
    return done


def _spliced(stmt: gast.Assign | gast.Expr, fn: Any, bound: bool, caller: Any,
             fn_node: gast.FunctionDef, number: int) -> list[gast.stmt] | None:
    """The statements that run `target = fn(...)` (or `fn(...)`) as Python would (`bound`:
    a method, its first parameter the object the call's chain names; `number`: this
    site's, in the names of its temporaries), or None."""
    call = stmt.value
    if not _eligible(fn, caller) or any(isinstance(a, gast.Starred) for a in call.args) or \
            any(k.arg is None for k in call.keywords):
        return None
    try:
        callee = parse(fn).node
    except Exception:  # noqa: BLE001 (no source, a changed file: not spliced)
        return None
    receiver = call.func.value if bound else None
    if not _plain_body(callee) or not _defaults_as_written(fn, callee) or (
            not bound and not isinstance(
            call.func, (gast.Name, gast.Attribute))):
        return None
    params = [a.id for a in callee.args.args]
    given = ([receiver] if receiver is not None else []) + list(call.args)
    keywords = {k.arg: k.value for k in call.keywords}
    if len(given) > len(params) or set(keywords) - set(params[len(given):]):
        return None
    defaults = dict(zip(params[len(params) - len(callee.args.defaults):], callee.args.defaults))
    values = []
    for i, name in enumerate(params):
        value = given[i] if i < len(given) else keywords.get(name, defaults.get(name))
        if value is None or (i >= len(given) and name not in keywords and
                             not isinstance(value, gast.Constant)):
            return None  # a default that is no literal, or a parameter not given
        values.append(value)
    local = _locals(callee)
    if _clashes(callee, local, fn_node) or _scoped(callee) & set(params):
        return None
    suffix = f"_gpe_s{number}"
    rename = {name: f"{name}{suffix}" for name in local}
    stored = stored_names(callee)
    if receiver is not None and (params[0] in stored or not _chain_kept(receiver, callee)):
        return None
    # a parameter the callee never rebinds, given a name or a literal (or the object a
    # method is called on): read as that; any other argument evaluated first, in order
    same, out = {}, []
    for name, value in zip(params, values):
        if name not in stored and (isinstance(value, (gast.Name, gast.Constant)) or
                                   value is receiver):
            same[name] = value
            continue
        out.append(_at(gast.Assign(targets=[gast.Name(rename[name], gast.Store(), None, None)],
                                   value=value, type_comment=None), stmt))
    body = [_Renamer(rename, same).visit(s) for s in copy.deepcopy(callee.body)]
    body = _without_docstring(body)
    result: gast.expr = gast.Constant(value=None, kind=None)
    if body and isinstance(body[-1], gast.Return):
        last = body.pop()
        result = last.value if last.value is not None else result
    return out + body + _result(stmt, result)


def _result(stmt: gast.Assign | gast.Expr, value: gast.expr) -> list[gast.stmt]:
    """The statement the callee's returned `value` becomes: the call's assignment, or for
    a call statement, `value` evaluated (nothing for a constant: `None`, no return)."""
    if isinstance(stmt, gast.Assign):
        return [_at(gast.Assign(targets=stmt.targets, value=value, type_comment=None), stmt)]
    return [] if isinstance(value, gast.Constant) else [_at(gast.Expr(value=value), stmt)]


def _eligible(fn: Any, caller: Any) -> bool:
    code = getattr(fn, "__code__", None)
    return (isinstance(fn, types.FunctionType) and code is not None and fn is not caller
            and fn.__globals__ is getattr(caller, "__globals__", None)
            and not code.co_freevars and not (code.co_flags & (
                inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_VARARGS |
                inspect.CO_VARKEYWORDS | inspect.CO_ASYNC_GENERATOR))
            and not fn.__kwdefaults__ and not hasattr(fn, "__wrapped__"))  # (a decorator's
                                                                            # work is its own)


def _defaults_as_written(fn: Any, node: gast.FunctionDef) -> bool:
    """The function's default values are still the literals its source has (code can set
    `__defaults__`): a default spliced in is the literal."""
    written = node.args.defaults
    held = fn.__defaults__ or ()
    return len(written) == len(held) and all(
        not isinstance(w, gast.Constant) or (type(w.value) is type(h) and w.value == h)
        for w, h in zip(written, held))


def _plain_body(fn: gast.FunctionDef) -> bool:
    """No `global`/`nonlocal`, no yield, no nested def or class, no `return` but the last
    statement of the body, no private name (mangled); only positional parameters."""
    args = fn.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
        return False
    for node in nodes.walk(fn):
        if isinstance(node, (gast.Global, gast.Nonlocal, gast.Yield, gast.YieldFrom,
                             gast.Await, gast.ClassDef, gast.Delete)) or (
                isinstance(node, gast.FunctionDef) and node is not fn):
            return False
        if isinstance(node, gast.Return) and node is not fn.body[-1]:
            return False
        name = node.attr if isinstance(node, gast.Attribute) else getattr(node, "id", "")
        if isinstance(name, str) and name.startswith("__") and not name.endswith("__"):
            return False  # `self.__x`: Python mangles it with the class the method is in
    return True


def _scoped(fn: gast.FunctionDef) -> set[str]:
    """Names bound in the callee's lambdas and comprehensions (their own scopes)."""
    found = set()
    for node in nodes.walk(fn):
        if isinstance(node, (gast.Lambda, gast.ListComp, gast.SetComp, gast.DictComp,
                             gast.GeneratorExp)):
            found |= {n.id for n in nodes.walk(node) if isinstance(n, gast.Name)
                      and isinstance(n.ctx, (gast.Store, gast.Param))}
    return found


def _locals(fn: gast.FunctionDef) -> set[str]:
    """The callee's parameters and every name it binds (comprehension and lambda
    variables too: renamed alike, they keep their meaning)."""
    names = {a.id for a in fn.args.args}
    for node in nodes.walk(fn):
        if isinstance(node, gast.Name) and isinstance(node.ctx, (gast.Store, gast.Del,
                                                                 gast.Param)):
            names.add(node.id)
    return names


def _clashes(callee: gast.FunctionDef, local: set[str], caller: gast.FunctionDef) -> bool:
    """A name the callee reads from its globals that the caller binds locally."""
    caller_local = _locals(caller)
    return any(isinstance(n, gast.Name) and n.id not in local and n.id in caller_local
               for n in nodes.walk(callee))


def _chain_kept(receiver: gast.expr, callee: gast.FunctionDef) -> bool:
    """Nothing in the callee assigns an attribute named as one of the receiver chain's
    (`self.model` read again where training_step reads `self`: `self.model = ...` there
    would change what it reads)."""
    attrs = set()
    node = receiver
    while isinstance(node, gast.Attribute):
        attrs.add(node.attr)
        node = node.value
    return not any(isinstance(n, gast.Attribute) and isinstance(n.ctx, (gast.Store, gast.Del))
                   and n.attr in attrs for n in nodes.walk(callee))


def _without_docstring(body: list[gast.stmt]) -> list[gast.stmt]:
    if body and isinstance(body[0], gast.Expr) and isinstance(body[0].value, gast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[1:]
    return body


def _at(new: gast.stmt, old: gast.stmt) -> gast.stmt:
    return gast.copy_location(new, old)


class _Renamer(gast.NodeTransformer):
    """The callee's locals renamed; the parameters in `same` read as the caller's
    expression (a name, a literal, the receiver chain)."""

    def __init__(self, rename: dict[str, str], same: dict[str, gast.expr]):
        self.rename, self.same = rename, same

    def visit_Name(self, node: gast.Name) -> gast.AST:
        if node.id in self.same and isinstance(node.ctx, gast.Load):
            return gast.copy_location(copy.deepcopy(self.same[node.id]), node)
        if node.id in self.rename:
            node.id = self.rename[node.id]
        return node
