"""Names and attribute chains of a function, for the kinds pass (slicer/kinds.py).

Pure helpers on gast trees and the objects a chain reaches when slicing: the root Name of
`self.model.w`, the object it refers to, its dotted text, the names a function binds or
rebinds, the objects it may mutate. Needs no annotations.
"""
from __future__ import annotations

import inspect
import operator
import weakref
from typing import Any

import gast

from . import globalwrites, nodes
from .facts import TF_CALLABLES, Kind
from .parser import MISSING, Parsed, parse

CAPTURABLE = frozenset({Kind.VARIABLE, Kind.TENSOR, Kind.TF_OBJECT, Kind.TF_OP,
                        Kind.TF_EFFECT_OP})
"""Kinds of objects the TF part captures from an attribute chain."""


def static_value(node: gast.AST, parsed: Parsed) -> Any:
    """The object a Name or dotted Attribute chain refers to in the namespace, or MISSING."""
    if isinstance(node, gast.Name):
        return parsed.lookup(node.id)
    if isinstance(node, gast.Attribute):
        base = static_value(node.value, parsed)
        if base is MISSING:
            return MISSING
        return getattr(base, node.attr, MISSING)
    return MISSING


def user_code(fn: Any) -> bool:
    """A plain function of the user's (not TensorFlow's or Keras's own code)."""
    module = (getattr(fn, "__module__", None) or "").split(".", 1)[0]
    return inspect.isfunction(fn) and module not in ("keras", "tensorflow", "tf_keras")


def is_range(node: gast.AST) -> bool:
    return (isinstance(node, gast.Call) and isinstance(node.func, gast.Name)
            and node.func.id == "range")


def stable(value: Any) -> bool:
    """An object kept as an attribute (a variable, a layer), not one made on each access
    (a bound method, a property's fresh list): only those are guarded by identity."""
    return not (inspect.ismethod(value) or isinstance(value, (list, tuple)))


def mutated_roots(fn: gast.FunctionDef, objects, classify,
                  dynamic_paths: frozenset = frozenset(), lookup=None) -> set[str]:
    """Names whose objects this function may change: an attribute or item of theirs is
    assigned, one of their methods (or a method of an attribute) that is not TF's is
    called, they are passed to a call, or a function of the module it calls (`lookup`
    finds it) changes them in place (`def bump(): CFG.scale += 1`); and the other names
    whose objects those reach (reached_aliases)."""
    roots = set()
    changed = []  # the objects of those
    for node in _reached(fn, objects, dynamic_paths):
        if isinstance(node, (gast.Attribute, gast.Subscript)) and isinstance(
                node.ctx, (gast.Store, gast.Del)):
            root = chain_root(node.value if isinstance(node, gast.Subscript) else node)
            if root is not None:
                roots.add(root.id)
        elif isinstance(node, gast.Call):
            root = chain_root(node.func) if isinstance(node.func, gast.Attribute) else None
            if root is not None:
                value = chain_value(node.func, objects[root.id]) if root.id in objects \
                    else MISSING
                if value is MISSING or classify(value) not in TF_CALLABLES | CAPTURABLE and \
                        not _held_function(value, objects[root.id]) and \
                        not keeps_object(value):
                    roots.add(root.id)  # self.update(), self.history.append(...)
            for arg in node.args + [k.value for k in node.keywords]:
                if isinstance(arg, gast.Name):
                    roots.add(arg.id)
            if lookup is not None and isinstance(node.func, gast.Name):
                helper = lookup(node.func.id)
                names = globalwrites.mutated(helper)
                roots |= names
                changed += [helper.__globals__[n] for n in names if n in helper.__globals__]
    values = _values(fn, objects, lookup)
    changed += [values[r] for r in roots if r in values]
    return roots | reached_aliases(roots, changed, values)


def _values(fn: gast.FunctionDef, objects, lookup) -> dict[str, Any]:
    """What each name `fn` reads refers to: an object argument's value, else (a name it
    never binds) its global or closure value."""
    bound = bound_names(fn)
    values = dict(objects)
    for node in nodes.walk(fn):
        if isinstance(node, gast.Name) and node.id not in values and \
                node.id not in bound and lookup is not None:
            value = lookup(node.id)
            if value is not MISSING:
                values[node.id] = value
    return values


_REACH_LIMIT = 5000
"""Objects visited looking for aliases before every other object name counts as reached."""


def reached_aliases(roots: set[str], changed: list, values: dict[str, Any]) -> set[str]:
    """The other names of `values` whose object a `changed` object reaches (itself
    included) through containers and the attributes of the user's objects (a library's
    object is not looked into): `SCHED.step()` may change `LR.lr` where `SCHED.c is LR`, so
    LR is changed too (a number on it is not folded). Past _REACH_LIMIT objects, every
    other name holding an object."""
    others: dict[int, list[str]] = {}
    for name, value in values.items():
        if name not in roots and _has_state(value):
            others.setdefault(id(value), []).append(name)
    if not others:
        return set()
    found: set[str] = set()
    todo = list(changed)
    seen: set[int] = set()
    while todo:
        value = todo.pop()
        if id(value) in seen or not _has_state(value):
            continue
        seen.add(id(value))
        if len(seen) > _REACH_LIMIT:
            return {n for names in others.values() for n in names}
        found.update(others.get(id(value), ()))
        if isinstance(value, dict):
            todo.extend(value.values())
        elif isinstance(value, (list, tuple, set, frozenset)):
            todo.extend(value)
        elif type(value).__module__.split(".", 1)[0] not in _LIBRARIES:
            todo.extend(getattr(value, "__dict__", {}).values())  # the user's objects only
    return found


_LIBRARIES = frozenset({"tensorflow", "keras", "tf_keras", "numpy", "builtins", "gpe"})


def _has_state(value: Any) -> bool:
    """An object whose contents a call may change (not a number, a string, a module, a
    class or a function)."""
    if isinstance(value, (list, dict, set, tuple, frozenset)):
        return True
    return hasattr(value, "__dict__") and not isinstance(value, type) and not (
        inspect.ismodule(value) or inspect.isroutine(value))


def _reached(fn: gast.AST, objects, dynamic_paths: frozenset):
    """The nodes of `fn`, but of an `if` on a flag of an object argument (`if not
    self.built:`, a lazy build) only the branch the flag's value now takes: the kinds pass
    folds that test (the key guards the flag by value), so the other branch never runs."""
    todo = [fn]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, gast.If):
            taken = _flag_value(node.test, objects, dynamic_paths)
            if taken is not None:
                todo.append(node.test)
                todo.extend(node.body if taken else node.orelse)
                continue
        todo.extend(nodes.children(node))


def _flag_value(test: gast.expr, objects, dynamic_paths: frozenset) -> bool | None:
    """The truth of a test on flags of object arguments (not ones that keep changing) now
    (see test_truth); None for any other test."""
    def value_of(operand):
        root = chain_root(operand) if isinstance(operand, gast.Attribute) else None
        if root is None or root.id not in objects or dotted(operand) in dynamic_paths:
            return None
        return (chain_value(operand, objects[root.id]),)
    return test_truth(test, value_of)


_COMPARE = {gast.Gt: operator.gt, gast.GtE: operator.ge, gast.Lt: operator.lt,
            gast.LtE: operator.le, gast.Eq: operator.eq, gast.NotEq: operator.ne}


def test_truth(test: gast.expr, value_of) -> bool | None:
    """The truth of `flag`, `not flag`, `flag and ...` with a falsy flag (d2l's `kwargs and
    "training" in kwargs`), or `number > literal` (`self.gradient_clip_val > 0`), where
    `value_of(operand)` gives (its value) for an operand fixed for the call (a bool, a
    number, None, an empty tuple or dict), else None; None for any other test."""
    if isinstance(test, gast.UnaryOp) and isinstance(test.op, gast.Not):
        inner = test_truth(test.operand, value_of)
        return None if inner is None else not inner
    if isinstance(test, gast.BoolOp) and isinstance(test.op, gast.And):
        first = test_truth(test.values[0], value_of)
        return False if first is False else None
    if isinstance(test, gast.Compare) and len(test.ops) == 1 and \
            type(test.ops[0]) in _COMPARE:
        sides = [(c.value,) if isinstance(c, gast.Constant) else value_of(c)
                 for c in (test.left, test.comparators[0])]
        if any(s is None or type(s[0]) not in (bool, int, float) for s in sides):
            return None
        return bool(_COMPARE[type(test.ops[0])](sides[0][0], sides[1][0]))
    value = value_of(test)
    if value is None or not (type(value[0]) in (bool, int, float) or value[0] is None or
                             value[0] in ((), {})):
        return None
    return bool(value[0])


def keeps_object(method: Any, depth: int = 0) -> bool:
    """A bound method of a user's object that changes nothing on it: its body assigns no
    attribute or item, declares no global, passes its `self` to no call, and calls on
    `self` only functions the object holds or methods that keep it too
    (`net.begin_state(n)` returning `self.init_state(n, self.num_hiddens)`)."""
    if not (inspect.ismethod(method) or gpe_wrapped(method)) or depth > 2:
        return False
    fn = unwrapped(method.__func__)
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    owner = method.__self__  # (what it calls on its object depends on which: per object)
    entry = _kept.get(id(owner))
    if entry is None or entry[0]() is not owner:
        try:
            ref = weakref.ref(owner, lambda _, key=id(owner): _kept.pop(key, None))
        except TypeError:  # not weakly referenceable: not cached
            return _keeps(fn, owner, depth)
        entry = _kept[id(owner)] = (ref, {})
    if code not in entry[1]:
        entry[1][code] = _keeps(fn, owner, depth)
    return entry[1][code]


# id(object) -> (a weak reference to it, {code: keeps_object's answer}): a user's model is
# never kept alive by the cache, and its entry goes with it
_kept: dict = {}


def _keeps(fn: Any, owner: Any, depth: int) -> bool:
    try:
        node = parse(fn).node
    except Exception:  # noqa: BLE001 - no source, a lambda...: assumed to change it
        return False
    params = node.args.args
    if not params:
        return False
    me = params[0].id
    for sub in nodes.walk(node):
        if isinstance(sub, (gast.Global, gast.Nonlocal)) or isinstance(
                sub, (gast.Attribute, gast.Subscript)) and isinstance(
                sub.ctx, (gast.Store, gast.Del)):
            return False
        if isinstance(sub, gast.Call):
            if any(isinstance(a, gast.Name) and a.id == me
                   for a in sub.args + [k.value for k in sub.keywords]):
                return False
            root = chain_root(sub.func) if isinstance(sub.func, gast.Attribute) else None
            if root is not None and root.id == me:
                value = chain_value(sub.func, owner)
                if not (_held_function(value, owner) or keeps_object(value, depth + 1)):
                    return False
    return True


def gpe_wrapped(value: Any) -> bool:
    """A function or bound method `gpe run` wrapped (host.call: `_gpe_sliced`)."""
    return bool(getattr(type(value), "_gpe_sliced", False))


def unwrapped(value: Any) -> Any:
    """The user's function under a `gpe run` wrapper (a bound one: its method's)."""
    if gpe_wrapped(value) and not hasattr(value, "__self__"):
        return getattr(value, "__wrapped__", value)
    return value


def _held_function(value: Any, owner: Any) -> bool:
    """A plain function an object holds (`self.forward_fn`, not a method; wrapped by
    `gpe run` or not): calling it does not give it the object, nor does its closure."""
    value = unwrapped(value)
    return inspect.isfunction(value) and not any(
        _cell(c) is owner for c in value.__closure__ or ())


def _cell(cell) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def chain_root(node: gast.AST) -> gast.Name | None:
    while isinstance(node, gast.Attribute):
        node = node.value
    return node if isinstance(node, gast.Name) else None


def chain_value(node: gast.AST, root_value: Any) -> Any:
    if isinstance(node, gast.Name):
        return root_value
    base = chain_value(node.value, root_value)
    return MISSING if base is MISSING else getattr(base, node.attr, MISSING)


def own_data(node: gast.Attribute, root_value: Any) -> bool:
    """Whether `node` names a data attribute of its object (`self.steps`, a list the user
    keeps on a tf.Module: Python data, changed on the host), not one its class computes
    (`model.trainable_variables`, `model.layers`: TF objects even while still empty)."""
    owner = chain_value(node.value, root_value)
    return node.attr in getattr(owner, "__dict__", {})


def dotted(node: gast.AST) -> str:
    if isinstance(node, gast.Name):
        return node.id
    return f"{dotted(node.value)}.{node.attr}"


def stored_names(fn: gast.FunctionDef) -> set[str]:
    return {n.id for n in nodes.walk(fn) if isinstance(n, gast.Name)
            and isinstance(n.ctx, (gast.Store, gast.Del))}


def bound_names(fn: gast.FunctionDef) -> set[str]:
    names = {a.id for a in fn.args.args + fn.args.kwonlyargs}
    for extra in (fn.args.vararg, fn.args.kwarg):
        if extra is not None:
            names.add(extra.id)
    for node in nodes.walk(fn):
        if isinstance(node, gast.Name) and isinstance(node.ctx, gast.Store):
            names.add(node.id)
    return names


def is_static(node: gast.AST, inferer: Any) -> bool:
    """A Name/Attribute chain rooted at a free (global/closure) name, not a local."""
    while isinstance(node, gast.Attribute):
        node = node.value
    return isinstance(node, gast.Name) and node.id not in inferer.env and (
        node.id not in inferer.local_names)


def fixed_items(fn: gast.FunctionDef, names: set[str]) -> set[int]:
    """The `d['k']` reads (ids of their Subscript nodes) of the dicts named `names` made
    where the dict still holds what the call was given: in a statement of the function's
    own body before the first one that may change it (d2l's Adam reads `hyperparams['t']`
    and ends with `hyperparams['t'] += 1`). Any other use of the name (a store into it, a
    method call, passing or aliasing it, a nested function reading it) may change it."""
    reads: dict[str, list[tuple[int, int]]] = {n: [] for n in names}
    first_change = {n: len(fn.body) for n in names}
    for index, stmt in enumerate(fn.body):
        items = set()
        for node in nodes.walk(stmt):
            if isinstance(node, gast.Subscript) and isinstance(node.value, gast.Name) and \
                    node.value.id in names and isinstance(node.ctx, gast.Load) and \
                    isinstance(node.slice, gast.Constant) and isinstance(node.slice.value, str):
                items.add(id(node.value))
                reads[node.value.id].append((index, id(node)))
        for node in _walk_outside(stmt, items):
            if isinstance(node, gast.Name) and node.id in names:
                first_change[node.id] = min(first_change[node.id], index)
    return {node for name in names for index, node in reads[name]
            if index < first_change[name]}


def _walk_outside(stmt: gast.AST, items: set[int]):
    """The nodes of `stmt` but the item reads' names; in a statement holding a nested
    function or lambda, all of them (it may run later, after a change)."""
    found = list(nodes.walk(stmt))
    deferred = any(isinstance(n, (gast.FunctionDef, gast.Lambda)) for n in found)
    return [n for n in found if deferred or id(n) not in items]


def unchanged_reads(fn: gast.FunctionDef, rebound: set) -> set[int]:
    """ids of the reads of a rebound argument made before the function may rebind it:
    above its first store in the file and in no loop (`shape = X.shape` before `X =
    sequence_mask(...)`, d2l's masked_softmax: the argument's static shape there)."""
    first = {}
    for node in nodes.walk(fn):
        if isinstance(node, gast.Name) and node.id in rebound and isinstance(
                node.ctx, (gast.Store, gast.Del)) and hasattr(node, "lineno"):
            first[node.id] = min(first.get(node.id, node.lineno), node.lineno)
    looped = {id(n) for loop in nodes.walk(fn) if isinstance(loop, (gast.For, gast.While))
              for n in nodes.walk(loop)}
    # and in the value of the assignment that first stores it (`Y = tf.reshape(Y, (-1,
    # Y.shape[-1]))`, d2l's loss): evaluated before the store
    before = {id(r) for a in nodes.walk(fn) if isinstance(a, gast.Assign) for r in
              nodes.walk(a.value) if isinstance(r, gast.Name) and r.id in first and any(
                  isinstance(t, gast.Name) and t.id == r.id and t.lineno == first[r.id]
                  for t in a.targets)}
    return {id(n) for n in nodes.walk(fn) if isinstance(n, gast.Name) and n.id in first
            and isinstance(n.ctx, gast.Load) and id(n) not in looped
            and (getattr(n, "lineno", first[n.id]) < first[n.id] or id(n) in before)}


def appended_only(fn: Any) -> frozenset[str]:
    """The parameters of `fn` it only appends to (`losses.append(l)`, `.extend(...)`): read
    nowhere else, never rebound; frozenset() where its source cannot be parsed."""
    try:
        node = parse(fn).node
    except Exception:  # noqa: BLE001 (no source, a builtin: none)
        return frozenset()
    params = {a.id for a in node.args.args + node.args.posonlyargs + node.args.kwonlyargs}
    filled = {id(call.func.value) for call in nodes.walk(node) if isinstance(call, gast.Call)
              and isinstance(call.func, gast.Attribute) and call.func.attr in ("append", "extend")}
    uses: dict[str, list[bool]] = {}
    for n in nodes.walk(node):
        if isinstance(n, gast.Name) and n.id in params and not isinstance(n.ctx, gast.Param):
            uses.setdefault(n.id, []).append(isinstance(n.ctx, gast.Load) and id(n) in filled)
    return frozenset(name for name, only in uses.items() if all(only))
