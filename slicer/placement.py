"""Placement: where each statement runs (the TF part, the host, or both) and why.

`resolve(parsed)` sets on every statement `Key.PLACE` (a `Place`), `Key.REASON` (the
text `gpe explain` prints), `Key.EFFECT` (it changes TF state) and `Key.SYNC` (a host
statement that touches TF state directly, so it must wait for the TF part's earlier
effects). Raises Refusal for statements this slicer does not handle yet.
Needs hoist.transform, then kinds.resolve and activity.resolve, first.
"""
from __future__ import annotations

import builtins
import enum
import re

import gast

from . import anno, nodes
from .anno import Key
from .errors import Refusal
from .facts import CONSTANT_BUILTINS, ORDERING_BUILTINS, TF_CALLABLES, TF_KINDS, Facts, Kind
from .chains import chain_root
from .hoist import is_tf_statement, is_tf_with, tf_evaluable
from .parser import Parsed
from .plan import EAGER_INSIDE
from .reasons import describe_tf, describe_with, dotted, effect_call, host_reason


class Place(enum.Enum):
    TF = "TF"
    HOST = "host"
    BOTH = "both"


_SIMPLE = (gast.Assign, gast.AugAssign, gast.AnnAssign, gast.Expr, gast.Return, gast.Pass)
_REFUSED = (gast.Delete, gast.AsyncFor, gast.AsyncWith, gast.AsyncFunctionDef)
_KEYWORDS = {gast.If: "if", gast.For: "for", gast.While: "while", gast.Try: "try",
             gast.With: "with", gast.FunctionDef: "def", gast.ClassDef: "class",
             gast.Raise: "raise", gast.Assert: "assert", gast.Import: "import",
             gast.ImportFrom: "import", gast.Delete: "del", gast.Global: "global",
             gast.Nonlocal: "nonlocal"}


_LEAVES = (gast.Break, gast.Continue, gast.Return, gast.Yield, gast.YieldFrom,
           gast.Try, gast.FunctionDef, gast.ClassDef, gast.Global, gast.Nonlocal)


_NOT_MIRRORED = (gast.Yield, gast.YieldFrom, gast.Try, gast.FunctionDef, gast.ClassDef,
                 gast.Lambda, gast.Global, gast.Nonlocal, gast.Await)


def _iterated(stmt: gast.stmt) -> bool:
    """A `for` over an object (of a user's class, say) reached by a name or an attribute
    chain (`train_iter`, `self.loader`), binding a name or a tuple of names: what its
    iterations bind can be observed, and speculated on (Key.ITERATED)."""
    if not isinstance(stmt, gast.For) or stmt.orelse or chain_root(stmt.iter) is None or \
            anno.get(stmt.iter, Key.KIND) != Kind.HOST:  # (not a dataset, a list, a tensor)
        return False
    target = stmt.target
    return isinstance(target, gast.Name) or isinstance(target, (gast.Tuple, gast.List)) and \
        all(isinstance(e, gast.Name) for e in target.elts)


def nested_call(stmt: gast.stmt) -> gast.Call | None:
    """The call in `y = f(...)`, `f(...)` or `return f(...)` when f is a function gpe slices
    too (no *args or **kwargs spread into it)."""
    value = getattr(stmt, "value", None) if isinstance(
        stmt, (gast.Assign, gast.Expr, gast.Return)) else None
    if not (isinstance(value, gast.Call) and anno.get(value.func, Key.KIND) == Kind.SLICED_FN):
        return None
    if any(isinstance(a, gast.Starred) for a in value.args) or any(
            k.arg is None for k in value.keywords):
        return None
    return value


def mirrored_statements(stmt: gast.stmt):
    """The statements inside a MIRROR statement the TF part follows: its blocks, TF `with`
    bodies, and nested MIRROR statements with theirs (a compound statement the host runs
    whole counts as one)."""
    for child in stmt.body + getattr(stmt, "orelse", []):
        yield child
        if anno.get(child, Key.MIRROR) or (isinstance(child, gast.With)
                                           and anno.get(child, Key.PLACE) == Place.TF):
            yield from mirrored_statements(child)


def loop_targets(stmts: list) -> set:
    """The targets of the first (a loop the TF part follows) and of the loops it follows
    inside (`for metric in metrics` in the step loop): the host binds them, each
    iteration's value going with its flag, not a value from before the loop."""
    return {n.id for c in stmts if isinstance(c, gast.For) and (
        c is stmts[0] or anno.get(c, Key.MIRROR)) for n in nodes.walk(c.target)
        if isinstance(n, gast.Name)}


def _iteration_local(fn: gast.FunctionDef, loop: gast.stmt, name: str) -> bool:
    """`name` is a value of one iteration of `loop` only (`grads = tape.gradient(...)`, then
    `grads = clip(grads)` on the host): the loop's body binds it before any read, at its top
    level, and nothing outside the body reads it. TF work and host work may then both bind
    it (each reads the one bound last, a crossing apart), as in straight-line code."""
    if not isinstance(loop, (gast.For, gast.While)) or isinstance(loop, gast.For) and any(
            isinstance(n, gast.Name) and n.id == name for n in nodes.walk(loop.target)):
        return False
    inside = {id(n) for s in loop.body for n in nodes.walk(s)}
    if any(isinstance(n, gast.Name) and n.id == name and isinstance(n.ctx, gast.Load)
           and id(n) not in inside for n in nodes.walk(fn)):
        return False
    for stmt in loop.body:
        names = [n for n in nodes.walk(stmt) if isinstance(n, gast.Name) and n.id == name]
        if not names:
            continue
        return isinstance(stmt, gast.Assign) and all(
            isinstance(n.ctx, gast.Store) for n in nodes.walk(stmt.value) if n in names) \
            and not any(isinstance(n.ctx, gast.Load) for n in names) and any(
                isinstance(t, gast.Name) and t.id == name for t in stmt.targets)
    return False


def _own_jumps(stmt: gast.stmt) -> list[gast.stmt]:
    """`break` and `continue` statements in `stmt` that leave `stmt` itself or a loop around
    it (not those of loops nested inside)."""
    found, stack = [], list(stmt.body + stmt.orelse)
    while stack:
        node = stack.pop()
        if isinstance(node, (gast.Break, gast.Continue)):
            found.append(node)
        elif not isinstance(node, (gast.For, gast.While, gast.FunctionDef, gast.Lambda,
                                   gast.ClassDef)):
            stack.extend(nodes.children(node))
    return found


def _contains(tree: gast.AST, node: gast.AST) -> bool:
    return any(n is node for n in nodes.walk(tree))


def _is_range(node: gast.AST) -> bool:
    return (isinstance(node, gast.Call) and isinstance(node.func, gast.Name)
            and node.func.id == "range")


def _constant_sequence(header: gast.expr) -> bool:
    """`net.sizes`, `enumerate(net.sizes)`: numbers on an object, guarded (kinds)."""
    return bool(anno.get(header, Key.CONSTANT)) and not _is_range(header)


def _fully_tf(stmt: gast.stmt) -> bool:
    """Placed in the TF part with nothing left for the host (no hoisting happens inside a
    loop or branch, so every sub-expression must be one the TF part can evaluate)."""
    place = anno.get(stmt, Key.PLACE)
    if place == Place.BOTH:
        return True
    if place != Place.TF:
        return False
    if isinstance(stmt, (gast.For, gast.If)):
        return True  # a nested loop or branch, already checked
    if isinstance(stmt, gast.With):  # `with tf.device(...)`: a TF context, and its body
        return all(_fully_tf(s) for s in stmt.body)
    value = getattr(stmt, "value", None)
    return value is not None and tf_evaluable(value)


def _unfixed(header: gast.expr):
    """The nodes of `header` but those inside a part the call key fixes (`targ.shape[1]`
    of a tensor argument of exact shape: kinds marks it constant)."""
    stack = [header]
    while stack:
        node = stack.pop()
        if (node is not header or anno.has(node, Key.PATH)) and isinstance(
                node, (gast.Attribute, gast.Subscript)) and anno.get(node, Key.CONSTANT):
            continue  # (a number on an object, `net.targeted`: guarded by its path)
        yield node
        stack.extend(nodes.children(node))


# values host code can compute with (not a variable: its reads keep their order in the
# TF part, hoist._read_value)
_HOST_HELD = frozenset({Kind.TENSOR, Kind.PY_SCALAR, Kind.HOST_DATA, Kind.HOST_ONLY})
_HOST_TEMPORARY = re.compile(r"_gpe_h\d+")  # hoist's host temporaries


def _evaluable(stmt: gast.stmt) -> bool:
    """False for a TF-kind statement the host computes:
    - the host temporary hoisting makes of a whole conditional expression the TF part
      cannot evaluate (hoist._Hoister.visit): `a if fixed else (b if sent > 0.0 else c)`,
      the inner `if` on a number the host sends (fuzz seed 60333). It holds a tensor, but
      the host decides which side it evaluates: host work;
    - Python operators on a name that cannot cross (facts.host_only: `x + e`, `e` an
      element of a list no profile call saw) and values the host can hold, and one that
      only binds a host temporary (`x = _gpe_h0`, what is left of `x = x + e` once
      hoisting took its value): the value is the host's, so binding it there crosses
      nothing (it crosses where TF work reads it). Not a call or a TF-side object
      (`tape.gradient(loss, h)`: the tape exists in the TF part only)."""
    if isinstance(stmt, (gast.Assign, gast.AugAssign)) and (isinstance(
            stmt.value, gast.Name) and _HOST_TEMPORARY.fullmatch(stmt.value.id)
            or _host_operands(stmt.value)):
        return False
    return not (isinstance(stmt, gast.Assign) and isinstance(stmt.value, gast.IfExp)
                and not tf_evaluable(stmt.value))


def _host_operands(value: gast.expr) -> bool:
    """Operators only, on names the host holds, one of them a name that cannot cross."""
    found = list(nodes.walk(value))
    return any(isinstance(n, gast.Name) and anno.get(n, Key.KIND) == Kind.HOST_ONLY
               for n in found) and all(
        isinstance(n, (gast.BinOp, gast.UnaryOp, gast.operator, gast.unaryop, gast.Constant,
                       gast.Load)) or isinstance(n, gast.Name) and anno.get(n, Key.KIND) in
        _HOST_HELD for n in found)


def _same_scope(stmt: gast.stmt):
    """Nodes of `stmt` outside nested functions and classes."""
    yield stmt
    for child in nodes.children(stmt):
        if not isinstance(child, (gast.FunctionDef, gast.Lambda, gast.ClassDef)):
            yield from _same_scope(child)


def resolve(parsed: Parsed, facts: Facts) -> None:
    _Placer(parsed, facts).block(parsed.node.body)


class _Placer:
    def __init__(self, parsed: Parsed, facts: Facts):
        self.parsed = parsed
        self.both: set[str] = set()
        # folded arguments (not a variable: its value changes, `v + 0.0` is TF work)
        self.fixed = {n for n, f in facts.args.items() if f.constant and f.kind != Kind.VARIABLE}
        self.mirrored = False  # inside a statement the TF part follows (no Python values there)
        self.in_tf_with = 0
        self.unrolling = 0  # inside a `for` or `if` the TF part runs whole (_tf_compound)
        rebound = {n.id for n in nodes.walk(parsed.node) if isinstance(n, gast.Name)
                   and isinstance(n.ctx, gast.Store)}
        self.locals = rebound | set(facts.args)
        # lists and tuples of tensors (and tensors) whose length the call key fixes
        self.sequences = {n for n, f in facts.args.items()
                          if f.length is not None and n not in rebound}
        self.tensors = {n for n in self.sequences if facts.args[n].python_type == "Tensor"}

    def block(self, stmts: list[gast.stmt]) -> None:
        for stmt in stmts:
            self.statement(stmt)

    def statement(self, stmt: gast.stmt) -> None:
        if is_tf_with(stmt):
            self._set(stmt, Place.TF, "TF: " + describe_with(stmt))
            self.in_tf_with += 1
            self.block(stmt.body)
            self.in_tf_with -= 1
            return
        if isinstance(stmt, _REFUSED):
            raise self._refuse(stmt)
        if not isinstance(stmt, _SIMPLE):
            self._compound(stmt)
            return
        if isinstance(stmt, gast.Pass) or (not self.mirrored and self._both(stmt)):
            self._set(stmt, Place.BOTH, "both: plain Python value, computed on each side")
            return
        call = nested_call(stmt)
        if call is not None and not self.in_tf_with:
            anno.set(stmt, Key.NESTED, True)
            anno.set(stmt, Key.SYNC, False)  # its own parts keep its order with TF state
            self._set(stmt, Place.HOST, f"host: calls {dotted(call.func)} (sliced too: its TF "
                                        "part runs inside this one's)")
            return
        if is_tf_statement(stmt) and _evaluable(stmt):
            value = stmt.value
            effect = effect_call(value) or any(effect_call(n) for n in nodes.walk(value))
            anno.set(stmt, Key.EFFECT, effect)
            self._set(stmt, Place.TF, "TF: " + describe_tf(value, effect))
            return
        sync, why = host_reason(stmt)
        anno.set(stmt, Key.SYNC, sync)
        self._set(stmt, Place.HOST, "host: " + why)

    def _compound(self, stmt: gast.stmt) -> None:
        """Control flow, host `with`, nested defs, `global`...: the host runs the whole
        statement (any TF op inside runs eagerly there, in program order), unless it is a
        loop or branch fixed for the call with only TF work inside (see _tf_compound)."""
        if isinstance(stmt, (gast.Global, gast.Nonlocal)):
            self._set(stmt, Place.HOST, "host: declaration")
            return
        if self._tf_compound(stmt) or self._mirror(stmt):
            return
        sync, why = host_reason(stmt)
        inner_tf = any(anno.get(n, Key.KIND) in TF_KINDS for n in nodes.walk(stmt)
                       if isinstance(n, gast.expr))
        keyword = _KEYWORDS.get(type(stmt), type(stmt).__name__.lower())
        why = f"`{keyword}` runs on the host" + (
            f" ({EAGER_INSIDE})" if inner_tf else "") + (f"; {why}" if sync else "")
        anno.set(stmt, Key.SYNC, sync or inner_tf)
        anno.set(stmt, Key.EXITS, any(isinstance(n, gast.Return) for n in _same_scope(stmt)))
        if inner_tf and _iterated(stmt):
            anno.set(stmt, Key.ITERATED, dotted(stmt.iter))
        self._set(stmt, Place.HOST, "host: " + why)

    def _tf_compound(self, stmt: gast.stmt) -> bool:
        """`for` over a range fixed for the call, or `if` on a value fixed for the call,
        whose body is TF work only: the TF part runs it whole, unrolled or with only the
        branch taken when it is built (the call key fixes the count or the branch)."""
        sequence = False
        if isinstance(stmt, gast.For):
            header = stmt.iter
            sequence = self._fixed_sequence(header) or (
                anno.get(header, Key.KIND) == Kind.TF_OBJECT and tf_evaluable(header))
            ok = not stmt.orelse and (sequence or (
                isinstance(stmt.target, gast.Name) and _is_range(header)) or (
                _constant_sequence(header) and all(
                    isinstance(n, (gast.Name, gast.Tuple, gast.Load, gast.Store))
                    for n in nodes.walk(stmt.target))))
            why = "loop fixed for the call, unrolled"
        elif isinstance(stmt, gast.If):
            header, ok, why = stmt.test, True, "branch fixed for the call"
            # `if model.losses:`: a TF object's truthiness, read when the part is traced
            # as a loop over it is (its length fixed for the call)
            sequence = anno.get(header, Key.KIND) == Kind.TF_OBJECT and tf_evaluable(header)
        else:
            return False
        ok = ok and (sequence or anno.get(header, Key.CONSTANT) and all(
            n.id in self.both or n.id in self.fixed or n.id == "range"
            or (n.id in CONSTANT_BUILTINS and n.id not in self.locals)  # int(x.shape[1])
            or (n.id in ORDERING_BUILTINS | {"isinstance"} and n.id not in self.locals)
            or anno.has(n, Key.PATH)  # `isinstance(loss, ...)`: an object argument, guarded
            or anno.get(n, Key.KIND) == Kind.TF_MODULE  # `tf.keras.losses.Loss`
            for n in _unfixed(header) if isinstance(n, gast.Name)))
        if not ok or any(isinstance(n, _LEAVES) for n in _same_scope(stmt)):
            return False
        both = set(self.both)
        inner = stmt.body + stmt.orelse
        self.unrolling += 1
        try:
            for child in inner:
                try:
                    self.statement(child)
                except Refusal:
                    return False
                if not _fully_tf(child):
                    self.both = both
                    return False
        finally:
            self.unrolling -= 1
        self.both = both
        effect = any(anno.get(c, Key.EFFECT) for c in inner)
        anno.set(stmt, Key.EFFECT, effect)
        self._set(stmt, Place.TF, f"TF: {why}" + ("; changes TF state" if effect else ""))
        return True

    def _mirror(self, stmt: gast.stmt) -> bool:
        """A `for`, `while` or `if` the host decides, with TF work inside: the host runs it
        and tells the TF part each iteration or the branch taken, so the TF work inside runs
        in the graph. Not for loops with `else`, bodies with `try`, a host `with`, nested
        definitions or `yield`, `break`/`continue` anywhere but the body's last statement,
        or a name bound by TF work in one place and host work in another."""
        loop = isinstance(stmt, (gast.For, gast.While))
        if not (loop or isinstance(stmt, gast.If)) or (loop and stmt.orelse):
            return False
        if any(isinstance(n, _NOT_MIRRORED) or (isinstance(n, gast.With) and not is_tf_with(n))
               for n in nodes.walk(stmt)):
            return False
        jumps = _own_jumps(stmt)
        if jumps and (not loop or any(not _contains(stmt.body[-1], j) for j in jumps)):
            return False
        both, mirrored = set(self.both), self.mirrored
        self.mirrored = True
        try:
            for child in stmt.body + stmt.orelse:
                self.statement(child)
        except Refusal:
            return False
        finally:
            self.mirrored = mirrored
            self.both = both - anno.get(stmt, Key.WRITES, frozenset())
        inner = list(mirrored_statements(stmt))
        if jumps and anno.get(stmt.body[-1], Key.MIRROR):
            return False
        tf_writes = {n for s in inner if anno.get(s, Key.PLACE) == Place.TF
                     for n in anno.get(s, Key.WRITES, ())}
        host_writes = {n for s in inner if anno.get(s, Key.PLACE) == Place.HOST
                       and not anno.get(s, Key.MIRROR) for n in anno.get(s, Key.WRITES, ())}
        if isinstance(stmt, gast.For):
            host_writes |= {n.id for n in nodes.walk(stmt.target) if isinstance(n, gast.Name)}
        if any(not _iteration_local(self.parsed.node, stmt, name)
               for name in tf_writes & host_writes) or not any(
                anno.get(s, Key.PLACE) == Place.TF for s in inner):
            return False
        header = stmt.iter if isinstance(stmt, gast.For) else stmt.test
        sync, why = host_reason(gast.Expr(value=header))
        keyword = _KEYWORDS[type(stmt)]
        follows = ("a loop it is told about each iteration" if loop
                   else "the branch it is told was taken")
        anno.set(stmt, Key.MIRROR, True)
        if _iterated(stmt):
            anno.set(stmt, Key.ITERATED, dotted(stmt.iter))
        anno.set(stmt, Key.SYNC, sync)
        anno.set(stmt, Key.EXITS, any(isinstance(n, gast.Return) for n in _same_scope(stmt)))
        anno.set(stmt, Key.EFFECT, any(anno.get(s, Key.EFFECT) for s in inner))
        self._set(stmt, Place.HOST, f"host: `{keyword}` decided on the host; the TF part "
                                    f"follows it ({follows})" + (f"; {why}" if sync else ""))
        return True

    def _fixed_sequence(self, node: gast.expr) -> bool:
        """A list or tuple of tensors of fixed length (an argument the call key describes
        element by element), or enumerate/zip of such. (A structure of TF values the TF
        part builds, like zip(params, grads), is fixed when it is built: see the caller.)"""
        if isinstance(node, gast.Name):
            if node.id in self.tensors:
                anno.set(node, Key.ROWS, True)
            return node.id in self.sequences
        return (isinstance(node, gast.Call) and isinstance(node.func, gast.Name)
                and node.func.id in ("enumerate", "zip") and not node.keywords
                and (len(node.args) == 1 or node.func.id == "zip")
                and all(self._fixed_sequence(a) for a in node.args))

    def _both(self, stmt: gast.stmt) -> bool:
        if isinstance(stmt, gast.AugAssign) and isinstance(stmt.target, gast.Name):
            # `n += 1` on a number fixed for the call: Python arithmetic, as `n = n + 1` (a
            # number sent instead would be a value the TF part cannot count a range with);
            # not in a loop or branch the TF part runs alone (the host would not see it)
            targets = [stmt.target]
            ok = (not self.unrolling and anno.get(stmt.target, Key.KIND) == Kind.PY_SCALAR
                  and self._plain(stmt.target) and self._plain(stmt.value))
        elif isinstance(stmt, gast.Assign) and all(
                isinstance(t, gast.Name) for t in stmt.targets):
            targets, ok = stmt.targets, self._plain(stmt.value)
        elif isinstance(stmt, gast.Assign) and len(stmt.targets) == 1 and isinstance(
                stmt.targets[0], (gast.Tuple, gast.List)) and all(
                isinstance(t, gast.Name) for t in stmt.targets[0].elts):
            targets = stmt.targets[0].elts  # `a, b = 2, 3`: plain values, unpacked
            ok = isinstance(stmt.value, (gast.Tuple, gast.List)) and \
                len(stmt.value.elts) == len(targets) and all(
                    self._plain(v) for v in stmt.value.elts)
        else:
            return False
        if ok:
            self.both.update(t.id for t in targets)
        else:
            self.both.difference_update(t.id for t in targets)
        return ok

    def _plain(self, node: gast.AST) -> bool:
        """Constants, names computed on both sides or fixed for the call, arithmetic on
        them, and the math module's constants and functions (`math.log(2.0 * math.pi)`)."""
        if isinstance(node, gast.Name):  # (or a module's number the TF part folds too)
            return node.id in self.both or node.id in self.fixed or \
                node.id in anno.get(self.parsed.node, Key.GLOBALS, frozenset())
        if isinstance(node, gast.Call):  # `max(n - 1, 0)`: a pure builtin (kinds: constant)
            pure = self._math(node.func) or (
                isinstance(node.func, gast.Name) and node.func.id in CONSTANT_BUILTINS
                and node.func.id not in self.locals and anno.get(node, Key.CONSTANT)
                and self.parsed.lookup(node.func.id) is getattr(builtins, node.func.id))
            return (not node.keywords and pure and all(self._plain(a) for a in node.args))
        if isinstance(node, gast.Attribute):  # or `x.shape` of a tensor argument (kinds)
            return self._math(node) or bool(anno.get(node, Key.CONSTANT)) or \
                self._tf_alias(node)
        if isinstance(node, gast.Subscript) and anno.get(node, Key.CONSTANT):
            return True  # `x.shape[0]`: constant parts only (kinds)
        return isinstance(node, (gast.Constant, gast.BinOp, gast.UnaryOp, gast.operator,
                                 gast.unaryop, gast.Load)) and all(
            self._plain(c) for c in nodes.children(node))

    def _tf_alias(self, node: gast.Attribute) -> bool:
        """`tf.nn.sigmoid_cross_entropy_with_logits` (bound to a local alias, `bce = ...`):
        TensorFlow's own callable, reached from a module the function does not rebind: the
        same object on each side (each side binds the alias; the TF part calls it)."""
        root = node
        while isinstance(root, gast.Attribute):
            root = root.value
        return isinstance(root, gast.Name) and root.id not in self.locals and \
            anno.get(root, Key.KIND) == Kind.TF_MODULE and \
            anno.get(node, Key.KIND) in TF_CALLABLES

    def _math(self, node: gast.AST) -> bool:
        """`math.NAME` (the math module's constants and functions) or a number constant of
        NumPy's (`np.pi`): pure, the same on each side."""
        if not (isinstance(node, gast.Attribute) and isinstance(node.value, gast.Name)
                and node.value.id not in self.locals):
            return False
        module = getattr(self.parsed.lookup(node.value.id), "__name__", None)
        return module == "math" or (module == "numpy" and type(getattr(
            self.parsed.lookup(node.value.id), node.attr, None)) is float)

    def _set(self, stmt: gast.stmt, place: Place, reason: str) -> None:
        anno.set(stmt, Key.PLACE, place)
        anno.set(stmt, Key.REASON, reason)
        if place != Place.BOTH:  # a folded argument rebound (`n += 1`) is no longer fixed
            self.both.difference_update(anno.get(stmt, Key.WRITES, ()))
            self.fixed.difference_update(anno.get(stmt, Key.WRITES, ()))

    def _refuse(self, stmt: gast.stmt) -> Refusal:
        what = _KEYWORDS.get(type(stmt), type(stmt).__name__.lower())
        return Refusal("unsupported-statement",
                       f"`{what}` statements are not sliced yet; the function runs eagerly",
                       "", self.parsed.filename, getattr(stmt, "lineno", 0))
