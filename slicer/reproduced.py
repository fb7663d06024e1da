"""Python that a trace of a callee reproduces exactly, as eager runs it.

A callee judged TF work is traced whole (its own FunctionDef: tfprog/part.py) once per
build of its caller's TF part, and the FunctionDef then runs on every call. The Python in
its body ran once, when traced; that is what eager would have done on every call only
where that Python reads nothing that can differ between calls and leaves nothing behind:

- it binds local names only (a list or dict the callee made itself may be filled:
  `outputs.append(h)`, `cache[k] = v`);
- what it reads is fixed for the call: constants, the callee's locals and parameters (not
  a number the caller sends), its own globals and closure (guarded by the caller's call
  key: slicer/namespaces.py), chains the kinds pass marked with a PATH (guarded too), the
  static metadata of tensors (`x.shape[0]`: the TF part's shapes are the call key's);
- what it calls is TF (an op, a callee judged TF work itself) or a pure builtin (`range`,
  `len`, `zip`, `int(x.shape[0])`, ...: never `int(t)` of a tensor's value);
- a `for` over a range, a list of TF objects, a local list or a tensor's rows, an `if` or
  `assert` on a value the trace knows: unrolled or decided when traced, as eager decides
  them each call;
- `assert hasattr(x, 'a')` where the callee reads `x.a` itself (d2l's Module.forward:
  `assert hasattr(self, 'net'); return self.net(X)`): the read is what the caller
  captures and guards, so a call whose object lost the attribute does not run sliced.

Anything else (`print`, `.numpy()`, a user's host function, a write to an object) keeps
the callee on the host. A trace that cannot run what this lets through (a loop over a
tensor whose first dimension the key leaves open, `if t > 0:` on a tensor's value) fails when the caller's TF part is built and the
call runs eagerly: slow, never different.

`statement(stmt, sent, fresh)` says whether one statement qualifies; `fresh_locals(fn)`
gives the lists and dicts a callee makes itself. Needs kinds.resolve first.
"""
from __future__ import annotations

import gast

from . import anno, nodes
from .anno import Key
from .facts import CONSTANT_BUILTINS, MATERIALIZE_METHODS, STATIC_META, STRUCTURAL_BUILTINS, TF_CALLABLES, TF_KINDS, Kind

# pure builtins on values fixed for the call
PURE_BUILTINS = CONSTANT_BUILTINS | STRUCTURAL_BUILTINS | {"sum", "isinstance"}
# builtins that would read a tensor's value (allowed on static metadata only)
_CONVERSIONS = frozenset({"int", "float", "bool", "round", "min", "max", "abs", "sum"})
_FILLING = frozenset({"append", "extend", "insert"})  # a fresh local list's own methods


def fresh_locals(fn: gast.FunctionDef) -> set[str]:
    """Names every assignment of which (in the function's own scope) makes a new list or
    dict (`[]`, `[f(x) for x in xs]`, `{}`, `list()`, `dict()`); and `x.a` for each
    attribute the function reads from a name (what `assert hasattr(x, 'a')` may check:
    no name has a dot, so the two never mix)."""
    read = {f"{n.value.id}.{n.attr}" for n in nodes.walk(fn) if isinstance(n, gast.Attribute)
            and isinstance(n.value, gast.Name) and isinstance(n.ctx, gast.Load)}
    return _made_locals(fn) | read


def _made_locals(fn: gast.FunctionDef) -> set[str]:
    made, other = set(), set()
    for node in nodes.walk(fn):
        if isinstance(node, (gast.Assign, gast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, gast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, gast.Name)]
            (made if _new_container(node.value) and len(names) == len(targets)
             else other).update(n.id for t in targets for n in nodes.walk(t)
                                if isinstance(n, gast.Name))
        elif isinstance(node, (gast.AugAssign, gast.For)):
            target = node.target
            other.update(n.id for n in nodes.walk(target) if isinstance(n, gast.Name))
    return made - other


def _new_container(value: gast.expr) -> bool:
    if isinstance(value, (gast.List, gast.Dict, gast.ListComp, gast.DictComp)):
        return True
    return isinstance(value, gast.Call) and isinstance(value.func, gast.Name) and \
        value.func.id in ("list", "dict") and anno.get(value.func, Key.KIND) == Kind.HOST_FN


def statement(stmt: gast.stmt, sent: set[str], fresh: set[str]) -> bool:
    """Whether a statement the placement left to the host is Python a trace of the callee
    reproduces (see the module docstring). Compound statements: their header only; the
    caller checks their bodies statement by statement."""
    if isinstance(stmt, (gast.Assign, gast.AnnAssign, gast.AugAssign)):
        targets = stmt.targets if isinstance(stmt, gast.Assign) else [stmt.target]
        return stmt.value is not None and all(_target(t, sent, fresh) for t in targets) \
            and expression(stmt.value, sent, fresh)
    if isinstance(stmt, gast.Expr):
        if isinstance(stmt.value, gast.Constant):
            return True  # a docstring
        return isinstance(stmt.value, gast.Call) and expression(stmt.value, sent, fresh)
    if isinstance(stmt, gast.For):
        return not stmt.orelse and _target(stmt.target, sent, fresh) and \
            _loop_header(stmt.iter, sent, fresh)
    if isinstance(stmt, gast.Assert) and _held(stmt.test, fresh):
        return stmt.msg is None or expression(stmt.msg, sent, fresh)
    if isinstance(stmt, (gast.If, gast.Assert)):  # (`assert 0 <= rate <= 1`: checked
        # when traced, as eagerly on each call: it reads only what the call key fixes)
        return expression(stmt.test, sent, fresh) and \
            anno.get(stmt.test, Key.KIND) not in TF_KINDS - {Kind.TF_OBJECT} and (
                not isinstance(stmt, gast.Assert) or stmt.msg is None or
                expression(stmt.msg, sent, fresh))
    return isinstance(stmt, (gast.Pass, gast.Break, gast.Continue))


def _held(test: gast.expr, fresh: set[str]) -> bool:
    """`hasattr(x, 'a')` where the function reads `x.a` (see fresh_locals)."""
    if not (isinstance(test, gast.Call) and isinstance(test.func, gast.Name) and
            test.func.id == "hasattr" and anno.get(test.func, Key.KIND) == Kind.HOST_FN and
            len(test.args) == 2 and not test.keywords):
        return False
    obj, attr = test.args
    return isinstance(obj, gast.Name) and isinstance(attr, gast.Constant) and \
        isinstance(attr.value, str) and f"{obj.id}.{attr.value}" in fresh


def _target(target: gast.expr, sent: set[str], fresh: set[str]) -> bool:
    if isinstance(target, gast.Name):
        return True
    if isinstance(target, (gast.Tuple, gast.List)):
        return all(_target(e, sent, fresh) for e in target.elts)
    if isinstance(target, gast.Starred):
        return _target(target.value, sent, fresh)
    return isinstance(target, gast.Subscript) and isinstance(target.value, gast.Name) and \
        target.value.id in fresh and expression(target.slice, sent, fresh)


def _loop_header(header: gast.expr, sent: set[str], fresh: set[str]) -> bool:
    """A range, a list of TF objects (variables, layers), a local list, a tensor (its rows:
    the key holds its shape; tfprog/rows.py), or zip/enumerate of those: its length is the
    same each call the key matches."""
    if not expression(header, sent, fresh):
        return False
    if anno.get(header, Key.KIND) in (Kind.TF_OBJECT, Kind.TENSOR):
        return True
    if isinstance(header, gast.Name):
        return header.id in fresh
    if isinstance(header, gast.Call) and isinstance(header.func, gast.Name):
        if header.func.id == "range":
            return True
        if header.func.id in ("zip", "enumerate", "reversed"):
            return all(_loop_header(a, sent, fresh) for a in header.args)
    return False


def expression(node: gast.expr, sent: set[str], fresh: set[str]) -> bool:
    """Every part of `node` reads what is fixed for the call and calls TF or pure code."""
    todo = [node]
    while todo:
        sub = todo.pop()
        if isinstance(sub, (gast.Yield, gast.YieldFrom, gast.Await, gast.Lambda,
                            gast.NamedExpr)):
            return False
        if isinstance(sub, gast.Name) and isinstance(sub.ctx, gast.Load) and sub.id in sent:
            return False  # a number the caller sends: another value next call
        if isinstance(sub, gast.Call):
            if not _call(sub, fresh):
                return False
            if anno.get(sub, Key.CALLEE):  # its reads are the call's CALLEE_READS
                todo.extend(sub.args + [k.value for k in sub.keywords])
                continue
        if isinstance(sub, gast.Attribute):
            if not _attribute(sub, fresh):
                return False
            if anno.has(sub, Key.PATH) and not anno.get(sub, Key.SENT):
                continue  # captured whole (`self.cell.w`): its parts are not read apart
        todo.extend(nodes.children(sub))
    return True


def _call(node: gast.Call, fresh: set[str]) -> bool:
    if anno.get(node, Key.CALLEE):
        return True  # a callee judged TF work itself
    func = node.func
    kind = anno.get(func, Key.KIND)
    if kind in TF_CALLABLES:
        return True
    if isinstance(func, gast.Name) and func.id in PURE_BUILTINS and kind == Kind.HOST_FN:
        return func.id not in _CONVERSIONS or all(
            _static(a) for a in node.args + [k.value for k in node.keywords])
    return isinstance(func, gast.Attribute) and func.attr in _FILLING and \
        isinstance(func.value, gast.Name) and func.value.id in fresh


def _static(arg: gast.expr) -> bool:
    """Not a tensor's value: a number, or a tensor's static metadata (`x.shape[0]`)."""
    kind = anno.get(arg, Key.KIND)
    if kind not in TF_KINDS:
        return True
    return any(isinstance(n, gast.Attribute) and n.attr in STATIC_META
               for n in nodes.walk(arg))


def _attribute(node: gast.Attribute, fresh: set[str]) -> bool:
    """A TF module's member, a TF value's op or static metadata, a chain the call key
    guards (a PATH), or a fresh local list's own filling method."""
    if anno.has(node, Key.PATH) and not anno.get(node, Key.SENT):
        return True
    base = anno.get(node.value, Key.KIND)
    if base == Kind.TF_MODULE:
        return True
    if base in TF_KINDS:
        return node.attr not in MATERIALIZE_METHODS
    if anno.get(node, Key.KIND) in TF_CALLABLES and base in (Kind.TF_OP, Kind.TF_EFFECT_OP):
        return True  # a method of a TF callable object (a layer's own op)
    return isinstance(node.value, gast.Name) and node.value.id in fresh and \
        node.attr in _FILLING
