"""Recursion over a tree of the user's data objects, unrolled per shape (JANUS section 4:
a recursive call is specialised on the structure it walks, its guard is that structure).

`judge(fn, arg_kinds, objects, classify)` -> (kind, reads, counter attributes) or None:
a call `self.encode(tree)` of a user function
that calls itself on parts of a `Kind.STRUCTURE` argument (the call key describes that
argument by its shape: host/facts/signature.py, tfprog/channels.Structure). Its body may hold:
- `if` tests on the structure: `isinstance(tree, Leaf)`, `tree.left is None`, and/or/not;
- counters on an object argument: `self.n += 1` (a number added; `self.n` read nowhere
  else in the function);
- assignments to names and `return`s of TF work: TF ops, arithmetic, lists, the recursive
  calls on parts of the tree, TF objects read from an object argument (`self.w`, a
  layer), numbers and constants of the tree (`tree.word`).
Then the call is TF work (a `Judged` marked `unrolled`, with what it reads from its object
arguments: the caller guards those by identity, the method itself included). The caller's
TF part runs `halves(fn).tf` (the counters dropped) on its copy of the tree: tracing it
unrolls the recursion for that shape. The caller's host part runs `halves(fn).host` at the
call (the tests, the counters and the recursive calls, in eager's order): the object's
counters end as eager's. Anything else: None (the call stays on the host).
"""
from __future__ import annotations

import ast
import builtins
import copy
import types
import weakref
from typing import Any, Callable, NamedTuple

import gast

from . import nodes
from .chains import chain_root, dotted
from .errors import Refusal
from .facts import TF_CALLABLES, Kind
from .parser import MISSING, parse

_TF_READS = frozenset({Kind.VARIABLE, Kind.TF_OBJECT, Kind.TF_OP, Kind.TF_EFFECT_OP})
_COUNTER_OPS = (gast.Add, gast.Sub)


class Halves(NamedTuple):
    host: Callable  # the tests, counters and recursive calls
    tf: Callable    # the TF work, counters dropped


class _Refused(Exception):
    pass


def judge(fn: Any, arg_kinds: list, objects: list, classify: Callable[[Any], Kind]):
    """(the call's kind, reads as callees.Judged wants them) or None; see the module."""
    if not isinstance(fn, types.FunctionType) or fn.__closure__:
        return None
    try:
        parsed = parse(fn)
    except (Refusal, SyntaxError, TypeError, ValueError):
        return None
    params = [a.id for a in parsed.node.args.args]
    node = parsed.node
    if node.args.vararg or node.args.kwarg or node.args.kwonlyargs or \
            len(params) != len(arg_kinds):
        return None
    roles = {}
    for i, (name, kind) in enumerate(zip(params, arg_kinds)):
        if kind == Kind.STRUCTURE:
            roles[name] = ("structure", None)
        elif i < len(objects) and objects[i] is not MISSING:
            roles[name] = ("object", objects[i])
        else:
            return None
    checker = _Checker(fn, parsed, params, roles, classify)
    try:
        checker.body(node.body)
        checker.counters_unread()
    except _Refused:
        return None
    if not checker.recursive:
        return None
    _halves_of(fn, parsed.node, checker)  # made now: the runtime finds them by function
    kind = Kind.TF_EFFECT_OP if checker.effect else Kind.TF_OP
    position = {p: i for i, p in enumerate(params)}
    reads = tuple(sorted((position[root], below, False) for root, below in checker.reads))
    return kind, reads, tuple(sorted({attr for _, attr in checker.counters}))


_halves: "weakref.WeakKeyDictionary[types.FunctionType, Halves]" = weakref.WeakKeyDictionary()


def halves(method: Any) -> tuple[Halves, Any]:
    """(the host and TF halves of the function `judge` accepted behind `method`, the
    object it is bound to or None)."""
    return _halves[function_of(method)], getattr(method, "__self__", None)


class _Checker:
    def __init__(self, fn, parsed, params, roles, classify):
        self.fn, self.parsed, self.params = fn, parsed, params
        self.roles, self.classify = roles, classify
        self.locals: set[str] = set()
        self.counters: set[tuple[str, str]] = set()  # (object parameter, attribute)
        self.reads: set[tuple[str, str]] = set()     # (object parameter, ".attr.chain")
        self.recursive = False
        self.effect = False

    def body(self, stmts: list) -> None:
        for stmt in stmts:
            self.stmt(stmt)

    def stmt(self, stmt) -> None:
        if isinstance(stmt, gast.Expr) and isinstance(stmt.value, gast.Constant) and \
                isinstance(stmt.value.value, str):
            return  # a docstring
        if isinstance(stmt, gast.If):
            self.test(stmt.test)
            self.body(stmt.body)
            self.body(stmt.orelse)
        elif self.counter(stmt):
            target = stmt.target
            self.counters.add((target.value.id, target.attr))
        elif isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and \
                isinstance(stmt.targets[0], gast.Name):
            self.tf(stmt.value)
            self.locals.add(stmt.targets[0].id)
        elif isinstance(stmt, gast.Return) and stmt.value is not None:
            self.tf(stmt.value)
        else:
            raise _Refused

    def counter(self, stmt) -> bool:
        return (isinstance(stmt, gast.AugAssign) and isinstance(stmt.op, _COUNTER_OPS)
                and isinstance(stmt.target, gast.Attribute)
                and isinstance(stmt.target.value, gast.Name)
                and self.roles.get(stmt.target.value.id, ("",))[0] == "object"
                and isinstance(stmt.value, gast.Constant)
                and type(stmt.value.value) in (int, float))

    def counters_unread(self) -> None:
        """A counter's attribute is read nowhere else (its value never reaches TF work)."""
        for node in nodes.walk(self.parsed.node):
            if isinstance(node, gast.Attribute) and isinstance(node.value, gast.Name) and \
                    (node.value.id, node.attr) in self.counters and \
                    not isinstance(node.ctx, gast.Store):
                raise _Refused

    # the structure tests ------------------------------------------------------------
    def test(self, node) -> None:
        if isinstance(node, gast.BoolOp):
            for value in node.values:
                self.test(value)
        elif isinstance(node, gast.UnaryOp) and isinstance(node.op, gast.Not):
            self.test(node.operand)
        elif isinstance(node, gast.Call) and isinstance(node.func, gast.Name) and \
                node.func.id == "isinstance" and self.global_value("isinstance") is \
                builtins.isinstance and len(node.args) == 2 and not node.keywords:
            self.structure_chain(node.args[0])
            classes = self.static(node.args[1])
            if not (isinstance(classes, type) or isinstance(classes, tuple) and all(
                    isinstance(c, type) for c in classes)):
                raise _Refused
        elif isinstance(node, gast.Compare) and len(node.ops) == 1 and \
                isinstance(node.ops[0], (gast.Is, gast.IsNot)) and \
                isinstance(node.comparators[0], gast.Constant) and \
                node.comparators[0].value is None:
            self.structure_chain(node.left)
        else:
            raise _Refused

    def structure_chain(self, node) -> None:
        root = chain_root(node)
        if root is None or self.roles.get(root.id, ("",))[0] != "structure" or \
                not isinstance(node, (gast.Name, gast.Attribute)):
            raise _Refused

    # TF work ---------------------------------------------------------------------
    def tf(self, node) -> None:
        if isinstance(node, gast.Constant):
            return
        if isinstance(node, gast.Name):
            if node.id not in self.locals:
                raise _Refused
            return
        if isinstance(node, (gast.List, gast.Tuple)):
            for elt in node.elts:
                self.tf(elt)
        elif isinstance(node, gast.BinOp):
            self.tf(node.left)
            self.tf(node.right)
        elif isinstance(node, gast.UnaryOp) and isinstance(node.op, (gast.USub, gast.UAdd)):
            self.tf(node.operand)
        elif isinstance(node, gast.Attribute):
            self.read(node)
        elif isinstance(node, gast.Call):
            self.call(node)
        else:
            raise _Refused

    def read(self, node: gast.Attribute) -> None:
        """An attribute chain in TF work: the tree's (a number or constant of the copy), a
        TF object on an object argument (captured, guarded), or a TF op."""
        root = chain_root(node)
        if root is None:
            raise _Refused
        role = self.roles.get(root.id)
        if role is not None and role[0] == "structure":
            return
        if role is not None:
            value = _chain_value(node, role[1])
            if value is MISSING or self.classify(value) not in _TF_READS:
                raise _Refused
            self.reads.add((root.id, dotted(node)[len(root.id):]))
            return
        if root.id in self.locals or self.static(node) is MISSING or \
                self.classify(self.static(node)) not in _TF_READS | TF_CALLABLES:
            raise _Refused

    def call(self, node: gast.Call) -> None:
        if self.recursive_call(node):
            self.recursive = True
            return
        func = node.func
        if not isinstance(func, (gast.Attribute, gast.Name)) or any(
                k.arg is None for k in node.keywords):
            raise _Refused
        root = chain_root(func)
        role = self.roles.get(root.id) if root is not None else None
        value = _chain_value(func, role[1]) if role is not None and role[0] == "object" \
            else self.static(func) if role is None else MISSING
        kind = self.classify(value) if value is not MISSING else None
        if kind not in TF_CALLABLES and kind != Kind.TF_OBJECT:
            raise _Refused
        if role is not None:
            self.reads.add((root.id, dotted(func)[len(root.id):]))
        self.effect = self.effect or kind == Kind.TF_EFFECT_OP
        for arg in node.args:
            self.tf(arg)
        for keyword in node.keywords:
            self.tf(keyword.value)

    def recursive_call(self, node: gast.Call) -> bool:
        """`self.f(...)` / `f(...)`: the function itself, the object arguments passed on
        as they are, parts of the tree for the tree arguments."""
        func, args = node.func, list(node.args)
        if isinstance(func, gast.Attribute) and isinstance(func.value, gast.Name) and \
                self.roles.get(func.value.id, ("",))[0] == "object":
            bound = getattr(self.roles[func.value.id][1], func.attr, None)
            if function_of(bound) is not self.fn:
                return False
            args = [func.value] + args
            self.reads.add((func.value.id, "." + func.attr))  # the method: guarded
        elif not (isinstance(func, gast.Name) and self.global_value(func.id) is self.fn):
            return False
        if node.keywords or len(args) != len(self.params):
            raise _Refused
        for param, arg in zip(self.params, args):
            if self.roles[param][0] == "object":
                if not (isinstance(arg, gast.Name) and arg.id == param):
                    raise _Refused
            else:
                self.structure_chain(arg)
        return True

    def global_value(self, name: str) -> Any:
        if name in self.params or name in self.locals:
            return MISSING
        return self.parsed.lookup(name)

    def static(self, node) -> Any:
        """The value of a chain on a global (a class, `tf.nn.embedding_lookup`)."""
        if isinstance(node, gast.Tuple):
            values = tuple(self.static(e) for e in node.elts)
            return MISSING if MISSING in values else values
        root = chain_root(node)
        if root is None or not isinstance(node, (gast.Name, gast.Attribute)):
            return MISSING
        value = self.global_value(root.id)
        return MISSING if value is MISSING else _chain_value(node, value)


def function_of(method: Any) -> Any:
    """The user's function behind a bound method (one `gpe run` wraps included)."""
    fn = getattr(method, "__func__", method)
    return getattr(fn, "__wrapped__", fn) if getattr(type(fn), "_gpe_sliced", False) else fn


def _chain_value(node, root_value) -> Any:
    parts = dotted(node).split(".")[1:]
    value = root_value
    for part in parts:
        value = getattr(value, part, MISSING)
        if value is MISSING:
            return MISSING
    return value


# the halves ------------------------------------------------------------------------
def _halves_of(fn, node: gast.FunctionDef, checker: _Checker) -> None:
    if fn in _halves:
        return
    host = _compile(fn, _host_def(node, checker))
    tf_half = _compile(fn, _tf_def(node, checker))
    _halves[fn] = Halves(host, tf_half)


def _tf_def(node: gast.FunctionDef, checker: _Checker) -> gast.FunctionDef:
    """The function with its counters dropped and its recursive calls calling this half."""
    out = copy.deepcopy(node)
    out.body = _tf_body(out.body, checker)
    for call in [n for n in nodes.walk(out) if isinstance(n, gast.Call)]:
        _redirect(call, checker)
    return out


def _tf_body(stmts: list, checker: _Checker) -> list:
    out = []
    for stmt in stmts:
        if checker.counter(stmt):
            continue
        if isinstance(stmt, gast.If):
            stmt.body = _tf_body(stmt.body, checker)
            stmt.orelse = _tf_body(stmt.orelse, checker)
        out.append(stmt)
    return out or [gast.Pass()]


def _host_def(node: gast.FunctionDef, checker: _Checker) -> gast.FunctionDef:
    """The tests, the counters and the recursive calls (in eager's order), nothing else."""
    out = copy.deepcopy(node)
    out.body = _host_body(out.body, checker)
    return out


def _host_body(stmts: list, checker: _Checker) -> list:
    out = []
    for stmt in stmts:
        if isinstance(stmt, gast.If):
            stmt.body = _host_body(stmt.body, checker)
            stmt.orelse = _host_body(stmt.orelse, checker)
            out.append(stmt)
        elif checker.counter(stmt):
            out.append(stmt)
        elif isinstance(stmt, (gast.Assign, gast.Return)):
            for call in _in_order(stmt.value):
                if checker.recursive_call(call):
                    _redirect(call, checker)
                    out.append(gast.Expr(value=call))
            if isinstance(stmt, gast.Return):
                out.append(gast.Return(value=gast.Constant(value=None, kind=None)))
    return out or [gast.Pass()]


def _in_order(node) -> list:
    """The calls in `node`, in the order Python evaluates them (arguments first)."""
    out = []
    for child in nodes.children(node):
        out += _in_order(child)
    if isinstance(node, gast.Call):
        out.append(node)
    return out


def _redirect(call: gast.Call, checker: _Checker) -> None:
    """A recursive call calls the half it is in (`_gpe_self`)."""
    func = call.func
    if isinstance(func, gast.Attribute) and isinstance(func.value, gast.Name) and \
            checker.roles.get(func.value.id, ("",))[0] == "object" and \
            function_of(getattr(checker.roles[func.value.id][1], func.attr, None)) is \
            checker.fn:
        call.args = [gast.Name(id=func.value.id, ctx=gast.Load(), annotation=None,
                               type_comment=None)] + call.args
    elif not (isinstance(func, gast.Name) and checker.global_value(func.id) is checker.fn):
        return
    call.func = gast.Name(id="_gpe_self", ctx=gast.Load(), annotation=None, type_comment=None)


def _compile(fn: types.FunctionType, node: gast.FunctionDef) -> Callable:
    """`node` as a function of `fn`'s module (its globals), `_gpe_self` naming itself."""
    node.name = "_gpe_half"
    node.decorator_list = []
    factory = gast.FunctionDef(
        name="_gpe_factory", args=gast.arguments(
            args=[], posonlyargs=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
            defaults=[]), body=[
                node, ast_assign_self(), gast.Return(value=gast.Name(
                    id="_gpe_self", ctx=gast.Load(), annotation=None, type_comment=None))],
        decorator_list=[], returns=None, type_comment=None, type_params=[])
    module = ast.fix_missing_locations(gast.gast_to_ast(gast.Module(body=[factory],
                                                                    type_ignores=[])))
    code = compile(module, fn.__code__.co_filename, "exec")
    factory_code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    return types.FunctionType(factory_code, fn.__globals__)()


def ast_assign_self() -> gast.stmt:
    return gast.Assign(targets=[gast.Name(id="_gpe_self", ctx=gast.Store(), annotation=None,
                                          type_comment=None)],
                       value=gast.Name(id="_gpe_half", ctx=gast.Load(), annotation=None,
                                       type_comment=None), type_comment=None)
