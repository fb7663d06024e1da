"""Kind inference: what each expression's value is (a TF value, a host value, ...).

`resolve(parsed, facts)` walks the function's statements in program order and sets
`Key.KIND` on every expression node it can see, from the argument facts and the objects
the function's free names refer to; run it again after a pass that adds statements. A
call of a user function on TF values or objects (`compute_loss(model, x)`), or of a user
method of a TF object (`model.encode(x)`) asks `callee(fn, arg_kinds, facts, objects)`
(slicer/callees.py) whether the call is TF work; without a `callee`, it stays on the host.
"""
from __future__ import annotations

import builtins
import inspect
from typing import Any, Callable, Optional

import gast

from . import anno, arity, callsites, chainkinds, fnargs, globalwrites, nodes, reproduced
from .anno import Key
from .facts import CONSTANT_BUILTINS, MATERIALIZE_METHODS, META_ATTRIBUTES, ORDERING_BUILTINS, STATIC_META, STRUCTURAL_BUILTINS, TF_KINDS, Facts, Kind
from .chains import bound_names, chain_root, chain_value, fixed_items, is_range, is_static, mutated_roots, stable, static_value, stored_names, unchanged_reads
from .hoist import tf_evaluable
from .parser import MISSING, Parsed

_SCALAR_BUILTINS = {"float": Kind.PY_SCALAR, "int": Kind.PY_SCALAR, "bool": Kind.PY_SCALAR}
_DATA_TYPES = (list, dict, tuple, set, str, bytes, type(None))
_PLAIN = frozenset({Kind.PY_SCALAR, Kind.HOST_DATA})

CalleeKind = Callable[[Any, "list[Kind]", Facts, list], Optional[Kind]]
"""`callee(fn, arg_kinds, facts, objects)`: TF_OP or TF_EFFECT_OP for a call of `fn` on
arguments of those kinds (`objects`: per argument, the TF object it is, or MISSING) that is
all TF work, else None."""


def resolve(parsed: Parsed, facts: Facts, callee: CalleeKind | None = None) -> None:
    env = {name: fact.kind for name, fact in facts.args.items()}
    _Inferer(parsed, facts, env, callee).block(parsed.node.body)


class _Inferer:
    def __init__(self, parsed: Parsed, facts: Facts, env: dict[str, Kind],
                 callee: CalleeKind | None):
        self.parsed, self.facts, self.env, self.callee = parsed, facts, env, callee
        self.local_names = bound_names(parsed.node)
        self.rebound = stored_names(parsed.node)  # arguments the function reassigns
        self.rebound_globals = globalwrites.rebound(parsed)  # (by any code of the module)
        # objects whose attributes may change here
        self.mutated = mutated_roots(parsed.node, facts.objects, self.classify,
                                     facts.dynamic_paths, parsed.lookup)
        self.fixed_items = fixed_items(parsed.node, {  # `hyperparams['lr']` (a number)
            n for n, f in facts.args.items() if f.number_items})
        self.constants = {n for n, f in facts.args.items()  # names fixed for the call
                          if f.constant and f.kind in (Kind.PY_SCALAR, Kind.HOST_DATA)}
        # a loop's tensors from a dataset or a speculated iterable, bound nowhere else:
        # their static shape is the loop channel's, checked each iteration (a batch that
        # does not fit is handed back), so `X.shape[0]` is known where the TF part is traced
        self.iterated_tensors: set[str] = set()
        self.unchanged = unchanged_reads(parsed.node, self.rebound)

    # statements -------------------------------------------------------------------
    def block(self, stmts: list[gast.stmt]) -> None:
        for stmt in stmts:
            self.stmt(stmt)

    def stmt(self, node: gast.stmt) -> None:
        if isinstance(node, (gast.For, gast.While)):  # each pass sees the last one's value
            self.constants -= self.facts.host_numbers & stored_names(node)
        if isinstance(node, gast.Assign):
            kind = self.expr(node.value)
            for target in node.targets:
                self.bind(target, kind, node.value)
                if isinstance(target, (gast.Tuple, gast.List)) and isinstance(
                        node.value, (gast.Tuple, gast.List)) and len(target.elts) == len(
                        node.value.elts):  # `a, b = 2, 2`: each name as its own value
                    for elt, value in zip(target.elts, node.value.elts):
                        self._note_constant(elt, anno.get(value, Key.CONSTANT, False))
                else:
                    self._note_constant(target, anno.get(node.value, Key.CONSTANT, False))
        elif isinstance(node, gast.AugAssign):
            kind = self._join([self.expr(node.target), self.expr(node.value)])
            self.bind(node.target, kind, None)
            self._note_constant(node.target, anno.get(node.target, Key.CONSTANT, False)
                                and anno.get(node.value, Key.CONSTANT, False))
        elif isinstance(node, gast.For):
            self.expr(node.iter)
            counting = is_range(node.iter) and anno.get(node.iter, Key.CONSTANT, False)
            sequence = not counting and anno.get(node.iter, Key.CONSTANT, False)
            if not counting:
                self._note_constant(node.target, False)
            chainkinds.bind_loop_target(self, node.target, node.iter)
            if counting:
                self._note_constant(node.target, True)
            elif sequence:  # `for i, k in enumerate(net.sizes)`: numbers fixed for the call
                for name in nodes.walk(node.target):
                    if isinstance(name, gast.Name):
                        self.bind(name, Kind.PY_SCALAR, None)
                        self._note_constant(name, True)
            self.block(node.body)
            self.block(node.orelse)
        elif isinstance(node, gast.AnnAssign):
            if node.value is not None:
                self.bind(node.target, self.expr(node.value), node.value)
        elif isinstance(node, gast.If):
            self.expr(node.test)
            chainkinds.fold_test(self, node.test)
            self.block(node.body)
            self.block(node.orelse)
        elif isinstance(node, gast.With):
            for item in node.items:
                kind = self.expr(item.context_expr)
                if item.optional_vars is not None:
                    bound = Kind.TF_OBJECT if kind in (Kind.TF_OBJECT,) else Kind.HOST
                    self.bind(item.optional_vars, bound, None)
            self.block(node.body)
        else:
            for child in nodes.children(node):
                if isinstance(child, gast.expr):
                    self.expr(child)
            for field in ("body", "orelse", "finalbody"):
                self.block(getattr(node, field, []) or [])

    def _note_constant(self, target: gast.AST, constant: bool) -> None:
        names = [n.id for n in nodes.walk(target) if isinstance(n, gast.Name)]
        if constant and isinstance(target, gast.Name) and \
                target.id not in self.facts.host_numbers:  # the host sends it: not fixed
            self.constants.add(target.id)
        else:
            self.constants.difference_update(names)

    def bind(self, target: gast.AST, kind: Kind, value: gast.AST | None) -> None:
        anno.set(target, Key.KIND, kind)
        if isinstance(target, gast.Name):
            self.env[target.id] = kind
        elif isinstance(target, (gast.Tuple, gast.List)):
            values = value.elts if isinstance(value, (gast.Tuple, gast.List)) else None
            for i, elt in enumerate(target.elts):
                sub = self.expr(values[i]) if values and i < len(values) else (
                    Kind.TENSOR if kind in TF_KINDS else Kind.HOST)
                self.bind(elt, sub, values[i] if values and i < len(values) else None)
        else:  # attribute or subscript targets: evaluate their sub-expressions
            for child in nodes.children(target):
                if isinstance(child, gast.expr):
                    self.expr(child)

    # expressions ------------------------------------------------------------------
    def expr(self, node: gast.expr) -> Kind:
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            for child in nodes.children(node):
                if isinstance(child, gast.expr):
                    self.expr(child)
            kind = Kind.HOST
        else:
            kind = method(node)
        anno.set(node, Key.KIND, kind)
        if self._constant(node):
            anno.set(node, Key.CONSTANT, True)
        return kind

    def _constant(self, node: gast.expr) -> bool:
        if isinstance(node, gast.Constant):
            return True
        if isinstance(node, gast.Name):
            return node.id in self.constants
        if isinstance(node, gast.Call):  # (or `isinstance(loss, Loss)`: chainkinds)
            return chainkinds.fixed_isinstance(self, node) or (
                isinstance(node.func, gast.Name) and node.func.id in CONSTANT_BUILTINS | ORDERING_BUILTINS
                and anno.get(node.func, Key.KIND) == Kind.HOST_FN and not node.keywords
                and bool(node.args) and all(anno.get(a, Key.CONSTANT, False) for a in node.args))
        if isinstance(node, (gast.BinOp, gast.UnaryOp, gast.Compare, gast.BoolOp, gast.IfExp,
                             gast.Tuple, gast.Subscript)):
            return all(anno.get(c, Key.CONSTANT, False) for c in nodes.children(node)
                       if isinstance(c, gast.expr))
        return False

    def _Name(self, node: gast.Name) -> Kind:
        if node.id in self.facts.host_only:
            return Kind.HOST_ONLY
        if node.id in self.env:
            kind = self.env[node.id]
            if kind == Kind.HOST and node.id in self.facts.objects and \
                    node.id not in self.rebound:
                return self._object_argument(node)
            return kind
        if node.id in self.local_names:
            return Kind.HOST
        obj = self.parsed.lookup(node.id)
        if type(obj) in (bool, int, float) and node.id not in self.rebound_globals and \
                node.id not in self.facts.dynamic_paths:
            # a module's number no code of it rebinds (`N_TOWERS`): read when the TF part
            # is traced, as a callee reads its globals, and guarded by value (captures);
            # one that keeps changing between calls (dynamic) is sent instead
            anno.set(node, Key.PATH, node.id)
            anno.set(node, Key.CONSTANT, True)
            anno.set(self.parsed.node, Key.GLOBALS,
                     anno.get(self.parsed.node, Key.GLOBALS, frozenset()) | {node.id})
        return Kind.HOST if obj is MISSING else self.classify(obj)

    def _object_argument(self, node: gast.Name) -> Kind:
        """An object passed as an argument that is itself TF work (a Keras model, a
        metric, an optimizer): captured by the TF part, the call key guards its identity."""
        value = self.facts.objects[node.id]
        kind = self.classify(value)
        # (a list or dict of variables too: the key holds each one's identity)
        if kind in (Kind.TF_OP, Kind.TF_EFFECT_OP, Kind.TF_OBJECT) and (
                stable(value) or isinstance(value, (list, tuple, dict))):
            anno.set(node, Key.PATH, node.id)
            return kind
        return Kind.HOST

    def _ListComp(self, node: gast.ListComp) -> Kind:
        """`[f(x[i]) for i in range(n)]` over a range fixed for the call, or over structures
        of TF values (`model.trainable_weights`: its length is guarded; `[v for layer in
        self.layers for v in layer.trainable_variables if len(v.shape) > 1]`, the filters
        on what the trace knows of each element), with TF values for elements: a list of
        TF values the TF part builds (unrolled); else a host list."""
        return self._comprehension(node, [node.elt], Kind.TF_OBJECT)

    def _DictComp(self, node: gast.DictComp) -> Kind:
        """`{name: value for name, value in zip(self.names, outputs)}` (TF's style-transfer
        model): as a list comprehension, a dict of TF values under keys the trace knows."""
        return self._comprehension(node, [node.key, node.value], Kind.TENSOR)

    def _comprehension(self, node, parts: list[gast.expr], built: Kind) -> Kind:
        env, constants = dict(self.env), set(self.constants)
        counting = True
        for gen in node.generators:
            self.expr(gen.iter)
            fixed = ((is_range(gen.iter) and anno.get(gen.iter, Key.CONSTANT, False))
                     or anno.get(gen.iter, Key.KIND) == Kind.TF_OBJECT)  # model.weights
            counting = counting and fixed and (isinstance(gen.target, gast.Name) or (
                isinstance(node, gast.DictComp) and isinstance(gen.target, gast.Tuple)
                and all(isinstance(e, gast.Name) for e in gen.target.elts)))
            chainkinds.bind_loop_target(self, gen.target, gen.iter)
            self._note_constant(gen.target, fixed and is_range(gen.iter))
            for condition in gen.ifs:
                self.expr(condition)
                counting = counting and anno.get(condition, Key.KIND) not in TF_KINDS and \
                    reproduced.expression(condition, set(), set())
        kinds = [self.expr(part) for part in parts]
        self.env, self.constants = env, constants  # the comprehension's own scope
        # (not `a if int(t) ...`)
        tf_elements = kinds[-1] in TF_KINDS and tf_evaluable(parts[-1]) and all(
            k not in (Kind.HOST, Kind.HOST_ONLY) for k in kinds)
        return built if counting and tf_elements else Kind.HOST

    _GeneratorExp = _ListComp  # `sum(f(w) for w in weights)`: unrolled as the list is

    def _Constant(self, node: gast.Constant) -> Kind:
        return Kind.PY_SCALAR if isinstance(node.value, (bool, int, float)) else Kind.HOST_DATA

    def _Attribute(self, node: gast.Attribute) -> Kind:
        base = self.expr(node.value)
        if isinstance(node.value, gast.Name) and node.value.id == "_gpe_rt":
            return Kind.TF_OP  # _gpe_rt.read_variable(v), written by hoist._read_value
        if base in (Kind.TENSOR, Kind.VARIABLE):
            if node.attr in MATERIALIZE_METHODS:
                return Kind.HOST_FN
            if node.attr in STATIC_META and (self._exact_tensor_argument(node.value) or (
                    isinstance(node.value, gast.Name) and
                    node.value.id in self.iterated_tensors)):
                anno.set(node, Key.CONSTANT, True)  # `x.shape[0]`: the call key fixes it
                return Kind.HOST_DATA
            return Kind.HOST if node.attr in META_ATTRIBUTES else Kind.TF_OP
        if base == Kind.TF_OBJECT and not _is_static(node.value, self):
            return Kind.TF_OP  # tape.gradient, tape.watch
        if base == Kind.HOST_DATA:
            return Kind.HOST_FN
        root = chain_root(node)
        if root is not None and root.id in self.facts.objects and root.id not in self.rebound:
            return chainkinds.on_object(self, node, root, base)
        if base in (Kind.TF_OP, Kind.TF_EFFECT_OP) and node.attr in chainkinds.VARIABLE_LISTS \
                and isinstance(node.value, gast.Name) and node.value.id in self.local_names:
            return Kind.TF_OBJECT  # `layer.trainable_variables`, `layer` a loop's element
        if base in (Kind.TF_MODULE, Kind.TF_OBJECT, Kind.TF_OP, Kind.TF_EFFECT_OP) or \
                _is_static(node.value, self):
            return chainkinds.static(self, node, base)
        return Kind.HOST

    def _Call(self, node: gast.Call) -> Kind:
        fkind = self.expr(node.func)
        for arg in node.args + [keyword.value for keyword in node.keywords]:
            self.expr(arg)
        if isinstance(node.func, gast.Attribute) and node.func.attr in (
                "items", "keys", "values") and not node.args and anno.get(
                node.func.value, Key.KIND) == Kind.TENSOR:  # of a dict of TF values
            anno.set(node.func, Key.KIND, Kind.TF_OP)  # (a tensor has no such method)
            return Kind.TF_OBJECT
        if fkind in (Kind.HOST, Kind.SLICED_FN):
            callee_kind = callsites.callee_kind(self, node)
            if callee_kind is not None:
                anno.set(node, Key.CALLEE, True)
                anno.set(node.func, Key.KIND, callee_kind)
                return Kind.TF_OBJECT if anno.get(node, Key.INLINE) else Kind.TENSOR
        if fkind == Kind.HOST and _is_static(node.func, self) and self._own_function(
                static_value(node.func, self.parsed)):
            # a function of the user's beside this one, with host work: gpe slices it
            # too, and runs it nested (host.call.CallContext.nested)
            anno.set(node.func, Key.KIND, Kind.SLICED_FN)
            return Kind.HOST
        if fkind in (Kind.TF_OP, Kind.TF_EFFECT_OP) and not (fnargs.traceable(
                node, self.parsed, self.facts, self.callee) and arity.site(self, node)):
            anno.set(node.func, Key.KIND, Kind.HOST)  # it would run a function's Python
            return Kind.HOST  # once, when traced: the call stays on the host
        fkind = callsites.method_reads(self, node, fkind)  # model.compute_loss(...)
        if fkind in (Kind.TF_OP, Kind.TF_EFFECT_OP, Kind.TF_CONSTANT):
            return Kind.HOST if chainkinds.takes_user_objects(self, node) else Kind.TENSOR
        if fkind == Kind.TF_FACTORY:
            return Kind.TF_OBJECT
        func = node.func
        made = (isinstance(func, gast.Name) and not _is_static(func, self)) or (
            isinstance(func, gast.Call) and anno.get(func.func, Key.KIND) == Kind.TF_FACTORY)
        if fkind == Kind.TF_OBJECT and made:  # `ce(y, p)` after `ce = Loss()`, `Loss()(y, p)`:
            anno.set(node.func, Key.KIND, Kind.TF_OP)  # a TF object made here (a loss;
            return Kind.TENSOR  # a captured one, a tape or a list of variables, is no callable)
        if fkind == Kind.HOST_FN:
            if isinstance(node.func, gast.Attribute) and node.func.attr in (
                    "values", "items") and not node.args and anno.get(
                    node.func.value, Key.KIND) == Kind.TF_OBJECT:
                return Kind.TF_OBJECT  # weights.values() of a dict of variables
            name = node.func.id if isinstance(node.func, gast.Name) else ""
            if name in STRUCTURAL_BUILTINS and any(
                    anno.get(a, Key.KIND) in TF_KINDS for a in node.args):
                return Kind.TF_OBJECT  # zip(grads, variables): a structure of TF values
            if name == "sum" and node.args and not node.keywords and all(
                    anno.get(a, Key.KIND) in TF_KINDS for a in node.args):
                # sum(model.losses), sum(tf.reduce_sum(w ** 2) for w in weights): adds
                anno.set(node.func, Key.KIND, Kind.TF_OP)
                return Kind.TENSOR
            return _SCALAR_BUILTINS.get(name, Kind.HOST_DATA)
        if fkind == Kind.HOST and self.facts.why_host is not None:
            why = self.facts.why_host(self.value_of(node.func))
            if why:
                anno.set(node.func, Key.WHY_HOST, why)
        return Kind.HOST

    def _own_function(self, value: Any) -> bool:
        """A plain function (not a generator) defined in the sliced function's module."""
        return (inspect.isfunction(value) and not inspect.isgeneratorfunction(value)
                and value is not self.parsed.fn and value.__name__ != "<lambda>"
                and getattr(value, "__module__", None) == self.parsed.fn.__module__)

    def value_of(self, node: gast.AST) -> Any:
        """The object a Name/Attribute chain refers to when slicing: through an object
        argument the function does not rebind, or the namespace; else MISSING."""
        root = chain_root(node)
        if root is None or root.id in self.rebound:
            return MISSING
        if root.id in self.facts.objects:
            return chain_value(node, self.facts.objects[root.id])
        return static_value(node, self.parsed) if _is_static(node, self) else MISSING

    def object_of(self, node: gast.AST) -> Any:
        """The object (a model, a layer, an optimizer, a user's object) an argument
        expression refers to, or MISSING (a tensor, a number, plain data, a host value
        that is no object: the callee's own analysis decides what it may do with one)."""
        if anno.get(node, Key.KIND) not in (Kind.TF_OP, Kind.TF_EFFECT_OP, Kind.TF_OBJECT,
                                            Kind.HOST):
            return MISSING
        value = self.value_of(node)
        if value is MISSING or isinstance(value, _DATA_TYPES) or not stable(value) or \
                inspect.isroutine(value) or inspect.ismodule(value) or isinstance(value, type):
            return MISSING
        return value

    def _BinOp(self, node: gast.BinOp) -> Kind:
        kinds = [self.expr(node.left), self.expr(node.right)]
        if isinstance(node.op, gast.Add) and kinds == [Kind.TF_OBJECT, Kind.TF_OBJECT]:
            return Kind.TF_OBJECT  # list(weights.values()) + list(biases.values())
        return self._join(kinds)

    def _IfExp(self, node: gast.IfExp) -> Kind:
        """`a if test else b` on a test fixed for the call (a folded number, a TF object's
        truthiness: `tf.add_n(m.losses) if m.losses else 0.0`) as its sides; else host."""
        test = self.expr(node.test)
        kinds = [self.expr(node.body), self.expr(node.orelse)]
        if anno.has(node.test, Key.FOLDED):  # `isinstance(loss, Loss)` on an object the key
            return kinds[0] if anno.get(node.test, Key.FOLDED) else kinds[1]  # fixes
        fixed = test == Kind.TF_OBJECT and tf_evaluable(node.test) or \
            test in _PLAIN and self._constant(node.test)
        return self._join(kinds) if fixed else Kind.HOST

    def _UnaryOp(self, node: gast.UnaryOp) -> Kind:
        kind = self.expr(node.operand)
        if isinstance(node.op, gast.Not):
            return Kind.HOST if kind in TF_KINDS else kind
        return self._join([kind])

    def _Compare(self, node: gast.Compare) -> Kind:
        kinds = [self.expr(node.left)] + [self.expr(c) for c in node.comparators]
        if any(isinstance(op, (gast.Is, gast.IsNot, gast.In, gast.NotIn)) for op in node.ops):
            return Kind.HOST
        return self._join(kinds)

    def _exact_tensor_argument(self, node: gast.AST) -> bool:
        """A tensor argument the function does not rebind whose dtype and every dimension
        the call key fixes (its static shape in the TF part is eager's)."""
        fact = self.facts.args.get(node.id) if isinstance(node, gast.Name) else None
        return (fact is not None and fact.kind == Kind.TENSOR and (
            node.id not in self.rebound or id(node) in self.unchanged)
                and fact.shape is not None and None not in fact.shape)

    def _Subscript(self, node: gast.Subscript) -> Kind:
        base = self.expr(node.value)
        index = self.expr(node.slice)
        if base == Kind.TENSOR and isinstance(node.slice, gast.Name) and index in (
                Kind.HOST, Kind.HOST_ONLY):  # `d[k]`, `k` a key
            return Kind.HOST  # only the host knows (a dict of TF values): indexed there
        if anno.get(node.value, Key.CONSTANT) and base == Kind.HOST_DATA:
            return Kind.PY_SCALAR if anno.get(node.slice, Key.CONSTANT) else Kind.HOST_DATA
        if self._number_item(node):
            anno.set(node, Key.ITEM, True)
            return Kind.PY_SCALAR  # `hyperparams['lr']`: the TF part reads it at entry
        if base == Kind.TF_OBJECT and anno.get(node.slice, Key.CONSTANT):
            kind = chainkinds.element(self, node)  # `self.convs[i]`: a layer of a list
            if kind is not None:
                return kind
        return Kind.TENSOR if base in TF_KINDS else Kind.HOST

    def _number_item(self, node: gast.Subscript) -> bool:
        """`d['lr']` on a dict argument of Python numbers (its keys are in the call key)
        that the function does not rebind, read before it may change the dict: the
        number it had at entry."""
        name = node.value
        if not (isinstance(name, gast.Name) and isinstance(node.slice, gast.Constant)):
            return False
        fact = self.facts.args.get(name.id)
        return fact is not None and fact.number_items and name.id not in self.rebound \
            and id(node) in self.fixed_items

    def _Slice(self, node: gast.Slice) -> Kind:
        for part in (node.lower, node.upper, node.step):
            if part is not None:
                self.expr(part)
        return Kind.HOST

    def _Tuple(self, node: gast.Tuple) -> Kind:
        kinds = [self.expr(e) for e in node.elts]
        if kinds and any(k in TF_KINDS for k in kinds) and all(
                k in TF_KINDS or k == Kind.PY_SCALAR for k in kinds):
            return Kind.TENSOR
        return self._join(kinds) if kinds else Kind.HOST_DATA

    _List = _Tuple

    def _Dict(self, node: gast.Dict) -> Kind:
        """A dict of TF values under string keys written out (`{'content': c, 'style': s}`,
        a model's outputs) is a structure the TF part builds, as a tuple of them is."""
        kinds = [self.expr(e) for e in node.keys + node.values if e is not None]
        if node.values and all(isinstance(k, gast.Constant) and isinstance(k.value, str)
                               for k in node.keys) and all(
                anno.get(v, Key.KIND) in TF_KINDS for v in node.values):
            return Kind.TENSOR
        return Kind.HOST_DATA if all(k in _PLAIN for k in kinds) else Kind.HOST

    _Set = _Tuple

    # helpers ----------------------------------------------------------------------
    def _join(self, kinds: list[Kind]) -> Kind:
        if any(k in TF_KINDS for k in kinds):
            return Kind.TENSOR
        if kinds and all(k == Kind.PY_SCALAR for k in kinds):
            return Kind.PY_SCALAR
        return Kind.HOST_DATA if all(k in _PLAIN for k in kinds) else Kind.HOST

    def classify(self, obj: Any) -> Kind:
        """The caller's classification first (it knows TF objects, a list of variables
        included), then plain Python values and builtins."""
        if obj is MISSING:
            return Kind.HOST
        if isinstance(obj, (bool, int, float)):
            return Kind.PY_SCALAR
        kind = self.facts.classify(obj)
        if kind != Kind.HOST:
            return kind
        if isinstance(obj, _DATA_TYPES):
            return Kind.HOST_DATA
        if obj is print or (callable(obj) and getattr(obj, "__module__", None) == "builtins"
                            and getattr(builtins, getattr(obj, "__name__", ""), None) is obj):
            return Kind.HOST_FN
        return Kind.HOST


_is_static = is_static

