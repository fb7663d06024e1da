"""Kinds of attribute chains on objects: `self.model.trainable_variables`, `net.convs`,
`cfg.scale`, for the kinds pass (slicer/kinds.py), which calls `on_object` for a chain
rooted at an object argument and `static` for one the function reaches through its
globals. A chain the TF part reads when traced gets a PATH (the call key guards it: an
object by identity, a list by its elements, a number by value, then folded: CONSTANT).
`inf` is the kinds pass's inferer (its facts, names, mutated roots, classify).
`dataset_elements` says when a loop's target takes a dataset argument's tensors (or an
iterated object's, speculated), `bind_loop_target` what a loop's target is, `fold_test` when
an `if` on a flag takes one branch, `takes_user_objects` when a TF op converts a user's
object whole (host work).
"""
from __future__ import annotations

from typing import Any

import gast

from . import anno, nodes
from .anno import Key
from .chains import (CAPTURABLE, chain_root, chain_value, dotted, is_range, own_data, stable,
                     static_value, test_truth)
from .facts import Kind

VARIABLE_LISTS = frozenset({"trainable_variables", "variables", "trainable_weights", "weights",
                            "non_trainable_variables", "non_trainable_weights"})
MAX_FOLDED = 64  # the longest list of numbers on an object folded (and looped over)


def on_object(inf, node: gast.Attribute, root: gast.Name, base: Kind) -> Kind:
    """A chain rooted at an object argument the function does not rebind."""
    value = chain_value(node, inf.facts.objects[root.id])
    if base in (Kind.TF_OBJECT, Kind.TF_OP, Kind.TF_EFFECT_OP) and isinstance(
            value, (list, tuple)) and not own_data(node, inf.facts.objects[root.id]):
        return Kind.TF_OBJECT  # self.model.trainable_variables, as above
    kind = inf.classify(value)
    if kind == Kind.SLICED_FN:
        return kind  # self.encode: the call is a nested sliced call
    if kind == Kind.TF_OBJECT and isinstance(value, (list, tuple)):
        # variables in a list on an object (`model.variables`): read when the TF
        # part is traced; the call key guards each element's identity
        anno.set(node, Key.PATH, dotted(node))
        return kind
    if kind in CAPTURABLE and stable(value):
        anno.set(node, Key.PATH, dotted(node))
        return kind
    if (type(value) in (bool, int, float) and root.id not in inf.mutated
            and dotted(node) not in inf.facts.dynamic_paths):
        # a Python number on an object: the TF part reads it when built, as
        # eager code would see it; the call key guards its value (JANUS folding)
        anno.set(node, Key.PATH, dotted(node))
        anno.set(node, Key.CONSTANT, True)
        return Kind.PY_SCALAR
    if type(value) in (bool, int, float) and root.id not in inf.mutated:
        anno.set(node, Key.SENT, dotted(node))  # keeps changing: sent (host work)
    if kind in CAPTURABLE and (root is not node.value or base in CAPTURABLE
                               or node.attr == "add_loss"):
        # e.g. self.model.trainable_variables, self.opt.apply_gradients, metric.
        # update_state on a metric argument the TF part captures, self.add_loss
        return kind
    return Kind.HOST


def static(inf, node: gast.Attribute, base: Kind) -> Kind:
    """A chain on a TF module or object, or one the function reaches through its globals."""
    value = static_value(node, inf.parsed)
    if base in (Kind.TF_OBJECT, Kind.TF_OP, Kind.TF_EFFECT_OP) and isinstance(
            value, (list, tuple)):
        # e.g. model.trainable_variables: read when the TF part is traced (the
        # model may not be built yet while the function is being sliced)
        return Kind.TF_OBJECT
    kind = inf.classify(value)
    if kind in CAPTURABLE and base != Kind.TF_MODULE and stable(value):
        anno.set(node, Key.PATH, dotted(node))
    elif base != Kind.TF_MODULE and _guarded_static(inf, node, value, kind):
        return Kind.PY_SCALAR if type(value) in (bool, int, float) else kind
    return kind


def _guarded_static(inf, node: gast.Attribute, value: Any, kind: Kind) -> bool:
    """A list of TF objects (`net.convs`: each element's identity guarded) or a Python
    number (`net.targeted`, `cfg.scale`: guarded by value, folded) on an object the
    function reaches through its globals: the TF part reads it when traced, as a chain
    on an object argument. Not on an object this function changes, nor a number that
    keeps changing (sent instead)."""
    root = chain_root(node)
    if root is None or root.id in inf.mutated:
        return False
    if kind == Kind.TF_OBJECT and isinstance(value, (list, tuple)):
        anno.set(node, Key.PATH, dotted(node))
        return True
    if dotted(node) in inf.facts.dynamic_paths:
        return False
    if type(value) in (bool, int, float) or type(value) in (list, tuple) and \
            0 < len(value) <= MAX_FOLDED and all(type(v) in (bool, int, float, str)
                                                 for v in value):
        # (a list of numbers, `net.sizes`: guarded by its elements, looped over)
        anno.set(node, Key.PATH, dotted(node))
        anno.set(node, Key.CONSTANT, True)
        return True
    return False


def element(inf, node: gast.Subscript) -> Kind | None:
    """`self.convs[i]`, `i` a loop counter: a layer (or a variable) of a guarded list whose
    elements are all of one kind, taken when the TF part is traced; else None."""
    if not anno.has(node.value, Key.PATH):
        return None
    value = inf.value_of(node.value)
    kinds = {inf.classify(v) for v in value} if isinstance(value, (list, tuple)) and value \
        else set()
    if len(kinds) == 1 and kinds <= {Kind.TF_OP, Kind.TF_EFFECT_OP, Kind.VARIABLE}:
        return kinds.pop()
    return None


def fixed_isinstance(inf, node: gast.Call) -> bool:
    """`isinstance(loss, tf.keras.losses.Loss)` on an object argument the function does not
    rebind (the call key holds its identity, so the answer is fixed for the call) and a
    class the function reaches through its globals: the object gets a PATH (the TF part
    captures it, the call key guards it) and the test is a constant."""
    if not (isinstance(node.func, gast.Name) and node.func.id == "isinstance"
            and anno.get(node.func, Key.KIND) == Kind.HOST_FN and len(node.args) == 2
            and not node.keywords):
        return False
    obj, cls = node.args
    if not (isinstance(obj, gast.Name) and obj.id in inf.facts.objects
            and obj.id not in inf.rebound):
        return False
    value = inf.value_of(cls)
    classes = value if isinstance(value, tuple) else (value,)
    if not classes or not all(isinstance(c, type) for c in classes):
        return False
    anno.set(obj, Key.PATH, obj.id)
    anno.set(node, Key.FOLDED, isinstance(inf.facts.objects[obj.id], classes))
    return True


def dataset_elements(kinds, iterable: gast.expr, target: gast.AST) -> bool:
    """`iterable` is a dataset argument, or an object whose elements the profile calls saw
    be tensors (Facts.iterables), whose elements match `target` (a Name for a tensor or a
    tuple of them, a tuple of as many names for a tuple): `for x, y in ds`, `for batch in
    self.train_dataloader` (d2l)."""
    root = chain_root(iterable)
    if root is None or root.id in kinds.rebound:
        return False
    fact = kinds.facts.args.get(iterable.id) if isinstance(iterable, gast.Name) else None
    elements = fact.elements if fact is not None and fact.elements is not None else \
        kinds.facts.iterables.get(dotted(iterable))
    if elements is None:
        return False
    if isinstance(target, gast.Name):  # a tensor, or a tuple of them (`batch[0]`)
        return True
    return isinstance(target, (gast.Tuple, gast.List)) and elements in (
        len(target.elts), -1) and all(isinstance(e, gast.Name) for e in target.elts)


def bind_loop_target(inf, target: gast.AST, iterable: gast.expr) -> None:
    """A loop's target: a counter over a range, an element of a sequence of tensors (also
    through enumerate and zip), else a host value."""
    func = iterable.func.id if isinstance(iterable, gast.Call) and isinstance(
        iterable.func, gast.Name) else None
    if is_range(iterable):
        inf.bind(target, Kind.PY_SCALAR, None)
    elif func == "enumerate" and len(iterable.args) == 1 and isinstance(
            target, (gast.Tuple, gast.List)) and len(target.elts) == 2:
        anno.set(target, Key.KIND, Kind.HOST)
        inf.bind(target.elts[0], Kind.PY_SCALAR, None)
        bind_loop_target(inf, target.elts[1], iterable.args[0])
        seq = iterable.args[0]
        fact = inf.facts.args.get(seq.id) if isinstance(seq, gast.Name) else None
        if (fact is not None and fact.length is not None and seq.id not in inf.rebound
                and isinstance(target.elts[0], gast.Name)):
            inf.constants.add(target.elts[0].id)  # the TF part unrolls this loop
    elif func == "zip" and isinstance(target, (gast.Tuple, gast.List)) and len(
            target.elts) == len(iterable.args) and not iterable.keywords:
        anno.set(target, Key.KIND, Kind.HOST)
        for elt, arg in zip(target.elts, iterable.args):
            bind_loop_target(inf, elt, arg)
    elif dataset_elements(inf, iterable, target):
        inf.bind(target, Kind.TENSOR, None)  # `for x, y in ds`: tensors each
        stores = [n.id for n in nodes.walk(inf.parsed.node) if isinstance(n, gast.Name)
                  and isinstance(n.ctx, gast.Store)]
        inf.iterated_tensors |= {n.id for n in nodes.walk(target) if isinstance(
            n, gast.Name) and stores.count(n.id) == 1}
    else:
        kind = anno.get(iterable, Key.KIND)
        value = inf.value_of(iterable)
        kinds = {inf.classify(v) for v in value} if isinstance(
            value, (list, tuple)) and value else set()
        if kinds == {Kind.VARIABLE}:
            inf.bind(target, Kind.VARIABLE, None)  # for p in params: p.assign(...)
        elif kinds and all(_variables_only(v, inf.classify) for v in value):
            inf.bind(target, Kind.TF_OBJECT, None)  # for (v, s) in states: pairs of them
        elif kinds and kinds <= {Kind.TF_OP, Kind.TF_EFFECT_OP}:
            inf.bind(target, Kind.TF_EFFECT_OP, None)  # for layer in self.layers
        else:
            inf.bind(target, Kind.TENSOR if kind in (Kind.TENSOR, Kind.VARIABLE,
                                                      Kind.TF_OBJECT) else Kind.HOST, None)


def _variables_only(value, classify) -> bool:
    """A tuple or list of variables, or of such tuples and lists."""
    return isinstance(value, (tuple, list)) and bool(value) and all(
        classify(v) == Kind.VARIABLE or _variables_only(v, classify) for v in value)


def fold_test(inf, test: gast.expr) -> None:
    """`if self.built:`, `if not train:` on a number the call key fixes and guards by
    value (a chain on an object, a folded argument): Key.FOLDED, its truth, so that the
    `if` becomes the branch it takes (hoist._taken; a callee's untaken lazy build or
    host branch is not judged)."""
    if anno.has(test, Key.FOLDED) or not anno.get(test, Key.CONSTANT):
        return
    truth = test_truth(test, lambda operand: _fixed(inf, operand))
    if truth is not None:
        anno.set(test, Key.FOLDED, truth)


def _fixed(inf, operand: gast.expr) -> tuple | None:
    """(the value) of a chain the key guards, an argument fixed for the call, or the rank
    of a tensor argument (the call key holds it), else None."""
    if isinstance(operand, gast.Attribute) and anno.has(operand, Key.PATH):
        return (inf.value_of(operand),)
    rank = _rank(inf, operand)
    if rank is not None:
        return (rank,)
    if isinstance(operand, gast.Name) and operand.id in inf.facts.args and \
            operand.id not in inf.rebound and inf.facts.args[operand.id].constant:
        return (inf.facts.args[operand.id].value,)
    return None


def _rank(inf, operand: gast.expr) -> int | None:
    """The rank of a tensor argument the function does not rebind, where `operand` reads
    it (`len(X.shape)`, `X.shape.rank`, `X.ndim`: d2l's sequence_mask), else None."""
    if isinstance(operand, gast.Call) and isinstance(operand.func, gast.Name) and \
            operand.func.id == "len" and len(operand.args) == 1 and not operand.keywords \
            and anno.get(operand.func, Key.KIND) == Kind.HOST_FN:
        shape = operand.args[0]
    elif isinstance(operand, gast.Attribute) and operand.attr == "rank":
        shape = operand.value
    elif isinstance(operand, gast.Attribute) and operand.attr == "ndim":
        shape = gast.Attribute(value=operand.value, attr="shape", ctx=gast.Load())
    else:
        return None
    if not (isinstance(shape, gast.Attribute) and shape.attr == "shape" and
            isinstance(shape.value, gast.Name)):
        return None
    fact = inf.facts.args.get(shape.value.id)
    if fact is None or fact.kind != Kind.TENSOR or fact.shape is None or \
            shape.value.id in inf.rebound:
        return None
    return len(fact.shape)


def takes_user_objects(inf, node: gast.Call) -> bool:
    """A TF op given an object argument of a user's class whole (`tf.add(held, 1.0)`, a
    class converted by `__tf_tensor__`, a sequence class of tensors): what it converts is
    the object's state now, which a trace would freeze (another object, or the same one
    with other tensors, ran on the first call's): the call is host work."""
    return any(isinstance(arg, gast.Name) and arg.id in inf.facts.objects
               and anno.get(arg, Key.KIND) == Kind.HOST and _users(inf.facts.objects[arg.id])
               for arg in node.args + [k.value for k in node.keywords])


_LIBRARIES = frozenset({"builtins", "tensorflow", "keras", "tf_keras", "numpy"})


def _users(value: Any) -> bool:
    return (type(value).__module__ or "").split(".")[0] not in _LIBRARIES
