"""Split statements that mix TF and host work into statements that are one or the other.

`transform(parsed)` rewrites the function body in place. In a host statement, each
largest sub-expression that can run in the TF part is moved before it into a TF
temporary (`_gpe_tN = tf.reduce_sum(x)`); in a TF statement, each largest
sub-expression only the host can compute is moved before it into a host temporary
(`_gpe_hN = np.arange(3)`). Reading a tf.Variable's value on the host becomes a read in
the TF part. Every statement gets `Key.ORIGIN`, its line in the user's file.
Needs kinds.resolve first; run kinds.resolve again afterwards.
"""
from __future__ import annotations

import copy
import itertools

import gast

from . import anno, nodes, unnest
from .numbers import effect_free, literal, number_arithmetic, pure_number, static_dim
from .anno import Key
from .facts import MATERIALIZE_BUILTINS, MATERIALIZE_METHODS, STRUCTURAL_BUILTINS, TF_CALLABLES, TF_KINDS, Kind
from .parser import Parsed

_SIMPLE = (gast.Assign, gast.AugAssign, gast.AnnAssign, gast.Expr, gast.Return)
_CONDITIONAL = (gast.IfExp, gast.BoolOp, gast.Lambda, gast.ListComp, gast.SetComp,
                gast.DictComp, gast.GeneratorExp)


def transform(parsed: Parsed) -> None:
    counter = _Counter()
    parsed.node.body = _block(parsed.node.body, counter)
    anno.set(parsed.node, Key.FOLDED, tuple(counter.folded))


def tf_evaluable(node: gast.AST) -> bool:
    """True if the TF part can evaluate `node` (names are leaves that may cross)."""
    if isinstance(node, gast.Name):
        return anno.get(node, Key.KIND) != Kind.HOST_ONLY
    if isinstance(node, gast.Constant) or anno.get(node, Key.CONSTANT) or \
            anno.has(node, Key.PATH):
        return True
    return _tf_operation(node) and all(tf_evaluable(c) for c in _operands(node))


def _operands(node: gast.AST):
    for child in nodes.children(node):
        if isinstance(child, gast.expr):
            yield child
        elif isinstance(child, gast.keyword):
            yield child.value


def _structural(call: gast.Call) -> bool:
    """zip/list/tuple/... over TF values: rearranges them, in the TF part."""
    return (isinstance(call.func, gast.Name) and call.func.id in STRUCTURAL_BUILTINS
            and anno.get(call, Key.KIND) == Kind.TF_OBJECT)


def _tf_operation(node: gast.expr) -> bool:
    """True if the TF part can run `node`'s own operation (its operands aside)."""
    kind = anno.get(node, Key.KIND)
    if anno.get(node, Key.CONSTANT):
        return True
    if any(isinstance(c, gast.Name) and anno.get(c, Key.KIND) == Kind.HOST_ONLY
           for c in _operands(node)):
        return False
    if isinstance(node, (gast.Tuple, gast.List, gast.Slice, gast.Starred)):
        return True
    if isinstance(node, (gast.ListComp, gast.GeneratorExp)):  # unrolled (see kinds)
        return kind == Kind.TF_OBJECT
    if isinstance(node, gast.IfExp):  # on a test fixed for the call (see kinds)
        return kind in TF_KINDS and all(tf_evaluable(c) for c in _operands(node))
    if isinstance(node, gast.Attribute):
        base = anno.get(node.value, Key.KIND)
        if anno.has(node, Key.PATH):
            return True
        if base in TF_KINDS:
            return node.attr not in MATERIALIZE_METHODS
        return base == Kind.TF_MODULE or kind in TF_CALLABLES or kind == Kind.TF_OBJECT
    if isinstance(node, gast.Call):
        return anno.get(node.func, Key.KIND) in TF_CALLABLES or _structural(node)
    if isinstance(node, gast.Subscript) and kind in TF_CALLABLES and \
            anno.has(node.value, Key.PATH):
        return True  # `self.convs[i]`: a layer of a captured list (kinds)
    if isinstance(node, gast.Subscript) and anno.get(node, Key.ITEM):
        return True  # `hyperparams['lr']` on the entry value (kinds)
    if static_dim(node):
        return True  # `Y_hat.shape[-1]` inside TF work: the trace's static shape
    if isinstance(node, (gast.BinOp, gast.UnaryOp, gast.Compare, gast.Subscript)):
        return kind in TF_KINDS or literal(node)
    return False


def is_tf_statement(node: gast.stmt) -> bool:
    """A statement the TF part runs (before hoisting: one that should run there)."""
    if isinstance(node, gast.Assign):
        return (len(node.targets) == 1 and _names_only(node.targets[0])
                and anno.get(node.value, Key.KIND) in TF_KINDS)
    if isinstance(node, gast.AugAssign):
        return (isinstance(node.target, gast.Name)
                and anno.get(node.target, Key.KIND) in TF_KINDS)
    if isinstance(node, gast.Expr):
        return (isinstance(node.value, gast.Call)
                and anno.get(node.value, Key.KIND) in (Kind.TENSOR, Kind.TF_OBJECT))
    return False


def is_tf_with(node: gast.stmt) -> bool:
    return isinstance(node, gast.With) and all(
        anno.get(item.context_expr, Key.KIND) == Kind.TF_OBJECT for item in node.items)


def _names_only(target: gast.AST) -> bool:
    if isinstance(target, gast.Name):
        return True
    return isinstance(target, (gast.Tuple, gast.List)) and all(
        _names_only(e) for e in target.elts)


def _split_tuple_assignment(stmt: gast.stmt) -> list[gast.stmt] | None:
    """`n, y = 0, x * 2.0` mixes a host value and a TF one: as `n = 0` and `y = x * 2.0`
    (when no element reads a name the statement binds), so each side keeps its own (an
    int stays a Python int). None when it does not apply."""
    if not (isinstance(stmt, gast.Assign) and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], (gast.Tuple, gast.List))
            and isinstance(stmt.value, (gast.Tuple, gast.List))
            and len(stmt.targets[0].elts) == len(stmt.value.elts)
            and all(isinstance(t, gast.Name) for t in stmt.targets[0].elts)):
        return None
    kinds = [anno.get(v, Key.KIND) in TF_KINDS for v in stmt.value.elts]
    if all(kinds) or not any(kinds):
        return None
    bound = {t.id for t in stmt.targets[0].elts}
    if any(isinstance(n, gast.Name) and n.id in bound for v in stmt.value.elts
           for n in nodes.walk(v)):
        return None
    out = []
    for target, value in zip(stmt.targets[0].elts, stmt.value.elts):
        new = gast.Assign(targets=[target], value=value, type_comment=None)
        out.append(gast.copy_location(new, stmt))
    return out


def _block(stmts: list[gast.stmt], counter) -> list[gast.stmt]:
    out: list[gast.stmt] = []
    split = []
    for stmt in _taken(stmts, counter):
        for part in _split_tuple_assignment(stmt) or [stmt]:
            split += unnest.statements(part, counter)
    for stmt in split:
        origin = anno.get(stmt, Key.ORIGIN, getattr(stmt, "lineno", 0))
        if is_tf_with(stmt):
            stmt.body = _block(stmt.body, counter)
            pre = []
        elif isinstance(stmt, (gast.If, gast.While, gast.For)):
            pre = _loop_or_branch(stmt, counter)
        elif not isinstance(stmt, _SIMPLE):
            pre = []  # other compound statements run whole on the host: nothing moves out
        elif is_tf_statement(stmt):
            pre = _Hoister(counter, to_host=True).run(stmt)
        else:
            pre = _Hoister(counter, to_host=False).run(stmt)
        where = stmt  # (the statement's line, also where its whole expression moved)
        if isinstance(stmt, gast.Expr) and isinstance(stmt.value, gast.Name) and pre:
            stmt = None  # the whole expression moved into the TF part
        for new in pre + ([stmt] if stmt is not None else []):
            gast.copy_location(new, where)
            anno.set(new, Key.ORIGIN, origin)
            out.append(new)
    return out


class _Counter:
    """Numbers for temporaries, and the tests `_taken` folded away (Key.FOLDED on the
    function: what they read is still guarded, slicer/partition.py and callees.py)."""

    def __init__(self):
        self.numbers, self.folded = itertools.count(), []

    def __next__(self) -> int:
        return next(self.numbers)


def _taken(stmts: list[gast.stmt], counter: _Counter) -> list[gast.stmt]:
    """An `if` whose test the slicer folded (kinds: Key.FOLDED, fixed for the call and
    guarded) is replaced by the branch it takes: the other is never run by this variant,
    so neither side holds it (its crossings would never be reached). So is `a if test else
    b` (d2l's `l * float(tf.size(y)) if isinstance(loss, Loss) else tf.reduce_sum(l)`).
    The tests are kept aside (counter.folded): what they read stays guarded (dropped,
    nothing guarded `if ATTACK.targeted:`: the first call's branch after the flag changed)."""
    out = []
    for stmt in stmts:
        if isinstance(stmt, gast.If) and anno.has(stmt.test, Key.FOLDED):
            counter.folded.append(stmt.test)
            out += _taken(stmt.body if anno.get(stmt.test, Key.FOLDED) else stmt.orelse,
                          counter) or [gast.copy_location(gast.Pass(), stmt)]
        else:
            out.append(_TakenSide(counter).visit(stmt))
    return out


class _TakenSide(gast.NodeTransformer):
    """`a if test else b` with a folded test: the side it takes (the test kept aside)."""

    def __init__(self, counter: _Counter):
        self.counter = counter

    def visit_IfExp(self, node: gast.IfExp) -> gast.AST:
        self.generic_visit(node)
        if not anno.has(node.test, Key.FOLDED):
            return node
        self.counter.folded.append(node.test)
        return node.body if anno.get(node.test, Key.FOLDED) else node.orelse


def _loop_or_branch(stmt, counter) -> list[gast.stmt]:
    """Hoist inside the blocks of a `for`/`while`/`if` (the TF part may follow it), and the
    TF work of its header (a tensor test whole) into TF temporaries before it (a `while`
    computes them again at the end of its body, unless a `continue` would skip that)."""
    stmt.body = _block(stmt.body, counter)
    stmt.orelse = _block(stmt.orelse, counter)
    invariant = _invariant_reads(stmt)
    if invariant:
        stmt.body = [s for s in stmt.body if s not in invariant]
    if isinstance(stmt, gast.While) and any(
            isinstance(n, gast.Continue) for n in _own_statements(stmt.body)):
        return []
    header = "iter" if isinstance(stmt, gast.For) else "test"
    node = getattr(stmt, header)
    if header == "test" and anno.get(node, Key.KIND) == Kind.TENSOR and tf_evaluable(node):
        name = f"_gpe_t{next(counter)}"  # the whole test
        pre = [gast.Assign(targets=[_name(name, gast.Store())], value=node, type_comment=None)]
        setattr(stmt, header, _name(name, gast.Load()))
    else:  # the TF parts of it, as in a host statement
        hoister = _Hoister(counter, to_host=False)
        setattr(stmt, header, hoister.visit(node))
        pre = hoister.pre
    pre = invariant + pre
    if isinstance(stmt, gast.While) and pre:  # computed again before each later test
        for assign in pre:
            again = copy.deepcopy(assign)
            gast.copy_location(again, stmt.body[-1])
            anno.set(again, Key.ORIGIN, anno.get(stmt, Key.ORIGIN, stmt.lineno))
            stmt.body.append(again)
    return pre


def _invariant_reads(stmt) -> list[gast.stmt]:
    """`for v, g in zip(model.variables, grads): v.assign_sub(hp.rate * g)`, `hp.rate` a
    number sent (not folded), or `(1 - hp['beta']) * g` (arithmetic on sent numbers; one
    that may raise, d2l's `1 - beta1 ** hp['t']`, gets Key.RAISES): its host temporary
    moves before the loop, which stays all TF work. Only where nothing in the loop can change it (every other statement is TF work,
    the chain's root is not bound there) and the loop runs over TF values (lists of
    variables are never empty), so the read happens as eagerly, on the loop's first pass."""
    if not isinstance(stmt, gast.For) or stmt.orelse or \
            anno.get(stmt.iter, Key.KIND) != Kind.TF_OBJECT:
        return []
    bound = {n.id for n in nodes.walk(stmt) if isinstance(n, gast.Name)
             and isinstance(n.ctx, gast.Store)}
    reads, rest = [], []
    for inner in stmt.body:
        if isinstance(inner, gast.Assign) and _invariant(inner.value, bound) and \
                inner.targets[0].id.startswith("_gpe_h"):
            reads.append(inner)
        else:
            rest.append(inner)
    if not reads or not all(is_tf_statement(s) for s in rest):
        return []
    for read in reads:
        if not _chain_read(read.value, bound) and not pure_number(read.value):
            anno.set(read, Key.RAISES, True)
    return reads


def _invariant(node: gast.expr, bound: set) -> bool:
    """A chain read, or arithmetic on numbers (`1 - hp['beta']`, `1 - beta1 ** hp['t']`:
    Key.RAISES where it may raise), of names the loop does not bind."""
    return _chain_read(node, bound) or (pure_number(node) or number_arithmetic(node)) \
        and not any(isinstance(n, gast.Name) and n.id in bound for n in nodes.walk(node))


def _chain_read(node: gast.expr, bound: set) -> bool:
    if not isinstance(node, gast.Attribute):
        return False
    while isinstance(node, gast.Attribute):
        node = node.value
    return isinstance(node, gast.Name) and node.id not in bound


def _own_statements(stmts):
    """Nodes of `stmts` outside nested loops, functions and classes."""
    stack = list(stmts)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (gast.For, gast.While, gast.FunctionDef, gast.Lambda,
                                 gast.ClassDef)):
            stack.extend(nodes.children(node))


class _Hoister(gast.NodeTransformer):
    """Moves sub-expressions out of one statement into temporaries before it.

    to_host=False: the statement runs on the host; move TF work out into TF temps.
    to_host=True: the statement runs in TF; move host-only work out into host temps.
    """

    def __init__(self, counter, to_host: bool):
        self.counter, self.to_host, self.pre = counter, to_host, []
        self.stmt: gast.stmt | None = None

    def run(self, stmt: gast.stmt) -> list[gast.stmt]:
        self.stmt = stmt
        if isinstance(stmt, (gast.Assign, gast.AnnAssign, gast.AugAssign, gast.Expr,
                             gast.Return)):
            if stmt.value is not None:
                stmt.value = self.visit(stmt.value)
            if not self.to_host and isinstance(stmt, gast.Assign):
                stmt.targets = [self._targets(t) for t in stmt.targets]
        return self.pre

    def _targets(self, target: gast.AST) -> gast.AST:
        # `self.x[i] = ...`: the object and index expressions are evaluated first.
        if isinstance(target, gast.Subscript):
            target.slice = self.visit(target.slice)
        return target

    def visit(self, node: gast.AST) -> gast.AST:
        if not isinstance(node, gast.expr):
            return self.generic_visit(node) if isinstance(node, gast.keyword) else node
        if isinstance(node, gast.Attribute) and anno.has(node, Key.PATH):
            return node  # a chain the TF part reads whole (captured, guarded): `self.m.w`
        if isinstance(node, gast.IfExp) and self.to_host and not _tf_operation(node):
            return self._hoist(node)  # whole: the host decides which side it evaluates
        if isinstance(node, _CONDITIONAL):  # nothing inside moves out (a side the test
            return node                     # skips, an element of each iteration)
        if self._numbers_first(node):  # rewritten: its numbers computed first, on the host
            return self._hoist(node)
        if isinstance(node, gast.Call):
            return self.visit_Call(node)
        if self._hoistable(node):
            return self._hoist(node)
        return self.generic_visit(node)

    def _numbers_first(self, node: gast.expr) -> bool:
        """In a host statement, TF work with arithmetic on Python numbers the host sends
        inside it (`return tf.clip_by_value(r, 1 - eps, 1 + eps)`, `x * -c`): the TF part
        cannot compute `1 - eps` with Python's semantics, so such arithmetic is computed
        on the host first, into host temporaries, and the rest moves into the TF part
        (True: `node` is rewritten so; else it is left as it was). Only arithmetic that
        reads nothing but numbers and cannot raise moves (see pure_number): computing it
        before the TF ops beside it changes nothing observable."""
        if self.to_host or anno.get(node, Key.KIND) != Kind.TENSOR or \
                not _tf_operation(node) or tf_evaluable(node):
            return False
        candidate, pre = copy.deepcopy(node), []
        # (arithmetic that may raise moves too where the statement calls nothing: `v / (1 -
        # beta1 ** t)` raises, if it does, before anything observable ran)
        moves = (lambda child: pure_number(child) or number_arithmetic(child)) \
            if self.stmt is not None and effect_free(self.stmt) else pure_number

        def numbers_out(parent: gast.AST) -> None:
            for field, value in gast.iter_fields(parent):
                for i, child in enumerate(value if isinstance(value, list) else [value]):
                    if not isinstance(child, gast.AST):
                        continue
                    if isinstance(child, gast.expr) and moves(child):
                        name = f"_gpe_h{next(self.counter)}"
                        pre.append(gast.Assign(targets=[_name(name, gast.Store())],
                                               value=child, type_comment=None))
                        child = _name(name, gast.Load())
                        if isinstance(value, list):
                            value[i] = child
                        else:
                            setattr(parent, field, child)
                    else:
                        numbers_out(child)
        numbers_out(candidate)
        if not pre or not tf_evaluable(candidate):
            return False
        self.pre += pre
        for field, value in gast.iter_fields(candidate):
            setattr(node, field, value)
        return True

    def visit_Call(self, node: gast.Call) -> gast.AST:
        if self._hoistable(node):
            return self._hoist(node)
        if not self.to_host:
            # `v.numpy()`, `float(v)`: the host wants the value, read it in program order.
            func = node.func
            if isinstance(func, gast.Attribute) and func.attr in MATERIALIZE_METHODS and (
                    anno.get(func.value, Key.KIND) == Kind.VARIABLE):
                func.value = self._hoist(_read_value(func.value))
            elif isinstance(func, gast.Name) and func.id in MATERIALIZE_BUILTINS:
                node.args = [self._hoist(_read_value(a)) if anno.get(a, Key.KIND)
                             == Kind.VARIABLE and func.id != "print" else a
                             for a in node.args]
        return self.generic_visit(node)

    def _hoistable(self, node: gast.AST) -> bool:
        if isinstance(node, (gast.Name, gast.Constant)):
            return False
        if self.to_host:
            return not _tf_operation(node)
        if isinstance(node, (gast.Tuple, gast.List, gast.Slice, gast.Starred)):
            return False  # a structure of TF values crosses element by element
        return anno.get(node, Key.KIND) == Kind.TENSOR and tf_evaluable(node)

    def _hoist(self, node: gast.expr) -> gast.Name:
        prefix = "_gpe_h" if self.to_host else "_gpe_t"
        name = f"{prefix}{next(self.counter)}"
        self.pre.append(gast.Assign(targets=[_name(name, gast.Store())], value=node,
                                    type_comment=None))
        temporary = _name(name, gast.Load())
        if anno.has(node, Key.SENT):  # a number sent from its path (callsites.sent_number)
            anno.set(temporary, Key.SENT, anno.get(node, Key.SENT))
        return temporary


def _read_value(var: gast.expr) -> gast.Call:
    """`_gpe_rt.read_variable(var)`: the variable read where the statement is (each side's
    runtime reads a tf.Variable or a Keras variable: tfprog/channels.read_variable)."""
    func = gast.Attribute(value=_name("_gpe_rt", gast.Load()), attr="read_variable",
                          ctx=gast.Load())
    call = gast.Call(func=func, args=[var], keywords=[])
    anno.set(func, Key.KIND, Kind.TF_OP)
    anno.set(call, Key.KIND, Kind.TENSOR)
    return call


def _name(name: str, ctx) -> gast.Name:
    return gast.Name(id=name, ctx=ctx, annotation=None, type_comment=None)
