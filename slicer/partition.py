"""Partition: turn an analysed function into a `SlicePlan` (host, TF and profile programs).

`transform(parsed, facts)` reads the annotations of placement and crossings and writes
three programs as source text, each wrapped in a factory whose parameters are the
runtime objects and the original function's free variables:
- host: the original signature; host statements plus channel operations on `_gpe_c`;
- tf: `_gpe_tf(_gpe_q)`, the TF statements plus channel operations on `_gpe_rt`. Every
  block returns (still going, its carried values); the rest of a block after a gate, a
  loop or an `if` the host decides is nested in a function run only if the host did not
  cancel there; a MIRROR loop's body is the body of a `while_loop`, an `if`'s branches
  are the branches of a switch;
- profile: every statement in program order plus `_gpe_obs(channel, values)` where values
  would cross host->TF, for the eager profiling call.
The bookkeeping of what is written (channels, sites, the host block being written, line
reports, profile observations) and the emitters shared with follow are in slicer/writer.py;
the loops, branches and nested calls the TF part follows are written by slicer/follow.py,
which calls back `block` for their bodies. Needs crossings.resolve first.
"""
from __future__ import annotations

import copy

import gast

from . import anno, generated, nodes, outline, raising, scope, shapes, templates
from .anno import Key
from .chains import dotted, stored_names
from .errors import Refusal
from .facts import Facts, Kind
from .parser import Parsed
from .placement import Place
from .follow import Follow
from .plan import ChannelKind, LineReport, Program, SlicePlan
from .words import temporaries
from .writer import Writer

HOST_FACTORY = """
def _gpe_factory(__params__):
    def __name__(__args__):
        __declarations__
        _gpe_c = _gpe_rt.context()
        try:
            _gpe_c.begin(__entry__)
            __body__
        finally:
            _gpe_c.finish()
    return __name__
"""

TF_FACTORY = """
def _gpe_factory(__params__):
    def _gpe_tf(_gpe_q):
        def _gpe_main():
            __body__
        return _gpe_rt.done(_gpe_main())
    return _gpe_tf
"""

PROFILE_FACTORY = """
def _gpe_factory(__params__):
    def __name__(__args__):
        __body__
    return __name__
"""

def transform(parsed: Parsed, facts: Facts) -> SlicePlan:
    return _Partition(parsed, facts).run()


class _Partition:
    def __init__(self, parsed: Parsed, facts: Facts):
        self.parsed, self.facts = parsed, facts
        # the host program holds each TF statement too, run only once a value no longer
        # fits a gate's channel (the host then finishes the call eagerly: see call.py);
        # not possible when a TF `with` block holds host work (it would run twice)
        rescuable = not any(
            isinstance(w, gast.With) and anno.get(w, Key.PLACE) == Place.TF and any(
                anno.get(s, Key.PLACE) != Place.TF for s in w.body)
            for w in nodes.walk(parsed.node))
        self.writer = Writer(rescuable)
        self.writer.params = frozenset(facts.args) - stored_names(parsed.node)
        self.follow = Follow(self.writer, self.block)
        self.in_tf_with = 0
        self.gates_in_with: list = []  # (segment, assignment, channel) in the current with
        self.bound_in_with: list[frozenset] = []  # names bound in each TF with block entered
        self.bound_in_tapes: set[str] = set()  # ...and in every one met so far
        self.recompute: dict[str, gast.expr] = {}  # hoisted temporaries that may raise
        self.outlines: list = []  # the loops whose body a profile call may run sliced

    def run(self) -> SlicePlan:
        fn, w = self.parsed.node, self.writer
        _counters_unread(fn, self.parsed.filename)
        bound = tuple(n for n, f in self.facts.args.items() if f.constant)
        tf_body: list[gast.stmt] = [
            templates.replace("n = _gpe_k[key]", n=templates.name(n, store=True),
                              key=gast.Constant(value=n, kind=None))[0] for n in bound]
        entry = anno.get(fn, Key.ENTRY, ())
        entry_tuple = templates.names(entry)
        profile: list[gast.stmt] = []
        if entry or self.facts.entry_always:
            k = w.channel(ChannelKind.ENTRY, entry, fn.lineno)
            w.site(k)
            tf_body += templates.replace(f"__t__ = _gpe_rt.entry(_gpe_q, {k})",
                                         __t__=templates.names(entry, store=True))
            profile = templates.replace(f"_gpe_obs({k}, __v__)", __v__=entry_tuple)
            w.lines.append(LineReport(fn.lineno, "host", "call starts", "(arguments)",
                                      (f"in: {', '.join(entry)} (host->TF when the call "
                                       "starts)",)))
        tf_body += self.block(fn.body, ())
        generated.declare_nonlocals(tf_body, frozenset(generated.bound(tf_body)))
        profile += self._observed(fn.body)
        declarations = [s for s in w.host if isinstance(s, (gast.Global, gast.Nonlocal))]
        body = [s for s in w.host if not isinstance(s, (gast.Global, gast.Nonlocal))]
        host = self._factory(HOST_FACTORY, ["_gpe_rt"], body, with_args=True,
                             __entry__=entry_tuple, __declarations__=declarations)
        tf = self._factory(TF_FACTORY, ["_gpe_rt", "_gpe_k"], tf_body)
        profile = self._factory(PROFILE_FACTORY, ["_gpe_obs", "_gpe_obs_call", "_gpe_rt",
                                                  "_gpe_obs_outlined"],
                                profile, with_args=True)
        return SlicePlan(
            name=fn.name, qualname=self.parsed.fn.__qualname__,
            filename=self.parsed.filename, lineno=fn.lineno, host=host, tf=tf,
            profile=profile, captures=tuple(sorted(set(self._captures(tf_body))
                                                   | set(folded_paths(fn)))),
            tests=_tests(tf_body),
            channels=tuple(w.channels), sites=tuple(w.sites), routes=w.routes(),
            bound=bound, rescuable=w.rescuable, nested=tuple(w.nested),
            rescues=tuple(w.rescues.items()), with_gates=tuple(w.with_gates),
            lines=tuple(w.lines), assumptions=(self.facts.assumed,) if self.facts.assumed
            else (), temporaries=tuple(temporaries(fn).items()),
            iterated=tuple(sorted({anno.get(s, Key.ITERATED) for s in nodes.walk(fn)
                                   if anno.has(s, Key.ITERATED)})),
            folds=folded_paths(fn), outlines=tuple(self.outlines))

    # walking the body ---------------------------------------------------------------
    def block(self, stmts: list[gast.stmt], carried: tuple[str, ...] | None
              ) -> list[gast.stmt]:
        """Emit `stmts` into the current host block; returns their TF statements. Unless
        `carried` is None (a TF `with` body), the TF statements end by returning
        `_gpe_rt.end(carried)`: (still going, the carried names' values); the rest of a
        block after a place where the host may cancel it is nested in a function."""
        out: list[gast.stmt] = []
        target = out
        for stmt in stmts:
            place = anno.get(stmt, Key.PLACE)
            crossing: list[str] = []
            if isinstance(stmt, gast.With) and place == Place.TF:
                gate = anno.get(stmt, Key.GATE)
                if gate is not None:  # the block needs host values computed before it
                    target = self.writer.gate(stmt, gate, target, carried, crossing)
                header = copy.copy(stmt)
                self.writer.report(stmt, crossing)
                self._twin(stmt)
                self.in_tf_with += 1
                outer, self.gates_in_with = self.gates_in_with, []
                self.bound_in_with.append(frozenset(_computed(stmt.body)))
                self.bound_in_tapes |= self.bound_in_with[-1]
                header.body = self.block(stmt.body, None) or [gast.Pass()]
                self.bound_in_with.pop()
                gates, self.gates_in_with = self.gates_in_with, outer
                self.in_tf_with -= 1
                target.append(_in_line_scope(header))
                for seg, assign, k in gates:
                    self.writer.finish_with_gate(seg, assign)
                    if carried is not None:
                        target = self.writer.resume(k, target, carried)
                continue
            if carried is None and (anno.get(stmt, Key.MIRROR) or anno.get(stmt, Key.NESTED)):
                raise Refusal("unsupported-order", "a loop, `if` or sliced call the host "
                              "decides inside a TF `with` block", "move it out of the block",
                              self.parsed.filename, stmt.lineno)
            if anno.get(stmt, Key.MIRROR):
                target = self.follow.mirror(stmt, target, carried, crossing)
            elif anno.get(stmt, Key.NESTED):
                target = self.follow.nested(stmt, target, carried, crossing)
            elif place == Place.TF:
                target = self._tf_statement(stmt, target, carried, crossing)
            elif place == Place.HOST:
                self.writer.host_order(stmt, target)
                self.writer.host.append(raising.attempted(
                    stmt, self.recompute, self.writer.rescuable and not self.in_tf_with,
                    self.parsed.filename))
            else:
                target.append(shapes.checked(stmt))
                self.writer.host.append(stmt)
            if not anno.get(stmt, Key.MIRROR):
                self.writer.mark_kept(stmt, place == Place.TF)
                self.writer.report(stmt, crossing)
        if carried is not None:
            target += templates.replace("return _gpe_rt.end(__c__)", __c__=templates.names(carried))
        return out

    def _tf_statement(self, stmt, target, carried, crossing):
        gate = anno.get(stmt, Key.GATE)
        if gate is not None and self.in_tf_with:
            seg, assign, k = self.writer.gate_in_with(stmt, gate, target, crossing,
                                                      self.bound_in_with[-1])
            self.gates_in_with.append((seg, assign, k))
            target = seg.body
        elif gate is not None:
            target = self.writer.gate(stmt, gate, target, carried, crossing)
            # a tensor host code made inside a tape, sent after it (`tape.gradient(loss,
            # ...)` of a loss a host call computed): the TF part's tape never saw how it
            # was computed, its gradients would be None (or silently zero): refused too
            made = tuple(n for n in gate if n in self.bound_in_tapes)
            if made:
                k = next(c.index for c in reversed(self.writer.channels)
                         if c.kind == ChannelKind.GATE)
                self.writer.with_gates.append((k, made))
        target.append(_in_line_scope(_tf_calls(shapes.checked(stmt))))
        self._twin(stmt)
        self.writer.host += _host_halves(stmt, self.parsed.filename)
        self.writer.outputs(stmt, target, crossing)
        return target

    def _twin(self, stmt) -> None:
        """The host's copy of a TF statement, run only after a rescue (see rescuable); it
        computes a temporary hoisted out of a loop that may raise where eager does."""
        if self.writer.rescuable and not self.in_tf_with:
            (twin,) = templates.replace("if _gpe_c.eager:\n    __s__",
                                        __s__=[raising.recomputed(stmt, self.recompute)])
            self.writer.host.append(twin)

    def _observed(self, stmts: list[gast.stmt]) -> list[gast.stmt]:
        """`stmts` for the profile program: observations before the statements that have a
        gate, inside the loops and branches the TF part follows too."""
        out = []
        for stmt in stmts:
            if anno.get(stmt, Key.RAISES):  # (observed at its gate; recomputed below)
                out.append(raising.attempt(stmt))
                continue
            out += self.writer.profile_before.get(id(stmt), [])
            stmt = self.writer.profile_replace.get(id(stmt), stmt)
            if anno.get(stmt, Key.MIRROR):
                each = self.writer.profile_each.get(id(stmt), [])
                if anno.has(stmt, Key.ITERATED):
                    each = _iteration_observed(stmt) + each
                stmt = copy.copy(stmt)
                stmt.body = each + self._observed(stmt.body)
                stmt.orelse = self._observed(stmt.orelse)
            elif isinstance(stmt, gast.With) and anno.get(stmt, Key.PLACE) == Place.TF:
                stmt = copy.copy(stmt)  # its gates (gate_in_with) are observed inside
                stmt.body = self._observed(stmt.body)
            elif anno.has(stmt, Key.ITERATED) and anno.get(stmt, Key.PLACE) == Place.HOST:
                stmt = copy.copy(stmt)  # what each iteration binds (Facts.iterables)
                stmt.body = _iteration_observed(stmt) + stmt.body
            elif outline.holds(stmt):  # a host loop or branch holding an outlined loop
                stmt = copy.copy(stmt)
                stmt.body, stmt.orelse = self._observed(stmt.body), self._observed(stmt.orelse)
            if anno.has(stmt, Key.OUTLINE):  # a training loop's body, sliced on its own
                self.outlines.append(anno.get(stmt, Key.OUTLINE))
                stmt = outline.profile_loop(stmt, len(self.outlines) - 1)
            out.append(raising.recomputed(stmt, self.recompute))
        return out

    # sources ------------------------------------------------------------------------
    def _captures(self, tf_body) -> tuple[str, ...]:
        """What the TF program reads from outside when it is traced: free names, and
        attribute chains on them or on arguments (`self.w`); guarded by identity."""
        names = [n for s in tf_body for n in scope.walk(s) if isinstance(n, gast.Name)]
        stored = {n.id for n in names if not isinstance(n.ctx, gast.Load)}
        read = {n.id for n in names if isinstance(n.ctx, gast.Load)}
        paths = set()
        for node in (n for s in tf_body for n in nodes.walk(s)):
            if isinstance(node, gast.FunctionDef):
                stored |= {a.id for a in node.args.args}
            # (a Name with a PATH: an object argument the TF part captures, a model, a loss
            # function passed in: the call key describes only its type, so guard its
            # identity)
            elif isinstance(node, (gast.Attribute, gast.Name)) and anno.has(node, Key.PATH):
                paths.add(anno.get(node, Key.PATH))
            elif isinstance(node, gast.Call):  # what sliced callees read
                paths |= {p for p, _ in anno.get(node, Key.CALLEE_READS, ())}
        free = {n for n in read - stored if not n.startswith("_gpe_")}
        return tuple(sorted(free | paths))

    def _factory(self, template, runtime, body, with_args=False, **subs) -> Program:
        params = runtime + list(self.parsed.fn.__code__.co_freevars)
        # the program is named apart from the function: a recursive call inside must find
        # the function's own global (its gpe wrapper), not the factory's local program
        subs.update(__body__=body or [gast.Pass()], __name__="_gpe_program")
        if with_args:
            subs["__args__"] = _plain_arguments(self.parsed.node.args)
        (factory,) = templates.replace(template, **subs)
        factory.args = templates.arguments(params)
        gast.copy_location(factory, self.parsed.node)
        return Program(gast.Module(body=[factory], type_ignores=[]))


def _tf_calls(stmt: gast.stmt) -> gast.stmt:
    """Calls the TF runtime handles itself, rewritten in the TF part:
    `tf.constant(v, ...)` becomes `_gpe_rt.constant(tf.constant, v, ...)` (a value sent by
    the host arrives as a tensor, which tf.constant cannot take in a graph), and a call of
    a sliced callee `f(a)` becomes `_gpe_rt.call(f, a)` (a call of f's own FunctionDef)."""
    def special(node):
        return isinstance(node, gast.Call) and (
            anno.get(node.func, Key.KIND) == Kind.TF_CONSTANT or anno.get(node, Key.CALLEE)
            or anno.has(node, Key.ARITY))
    if not any(special(n) or anno.get(n, Key.ROWS) for n in nodes.walk(stmt)):
        return stmt
    stmt = copy.deepcopy(stmt)  # the profile program keeps the original
    for loop in [n for n in nodes.walk(stmt) if isinstance(n, gast.For)]:
        # `for row in t` over a tensor: `for row in _gpe_rt.rows(t)` (a graph tensor
        # cannot be iterated; its rows, unstacked, are eager's slices)
        header = loop.iter.args if isinstance(loop.iter, gast.Call) else None
        if anno.get(loop.iter, Key.ROWS):
            loop.iter = templates.expr("_gpe_rt.rows(t)", t=loop.iter)
        elif header:
            loop.iter.args = [templates.expr("_gpe_rt.rows(t)", t=a)
                              if anno.get(a, Key.ROWS) else a for a in header]
    for call in [n for n in nodes.walk(stmt) if special(n)]:
        method = "call" if anno.get(call, Key.CALLEE) else "constant"
        method = "unrolled" if anno.get(call, Key.UNROLLED) is not None else method
        method = "inline" if anno.get(call, Key.INLINE) else method
        for index, path, _, _ in anno.get(call, Key.CALLEE_TESTS, ()):
            # a number the host sends, which the callee branches on: the TF part takes
            # the branch its value when built takes (the call key guards the outcome)
            call.args[index] = templates.expr("_gpe_rt.speculate(v, seen)",
                                              v=call.args[index], seen=templates.expr(path))
        for index, dims in anno.get(call, Key.CALLEE_SHAPES, ()):
            # the static dimensions the callee reads of it: known when traced (shapes.py)
            call.args[index] = templates.expr(
                f"_gpe_rt.known(v, {dims!r}, {dotted(call.func)!r})", v=call.args[index])
        if anno.has(call, Key.ARITY):  # `model(*batch[:-1])`: checked when traced
            method = "call_exactly"
            call.args = [gast.Constant(value=anno.get(call, Key.ARITY), kind=None)] + call.args
        call.args = [call.func] + call.args
        call.func = templates.expr(f"_gpe_rt.{method}")
    return stmt


def _tests(tf_body) -> tuple[tuple[str, str, str], ...]:
    """(path, parameter, test source) of every branch a callee takes on a number the
    host sends (Key.CALLEE_TESTS): the call key holds their outcomes."""
    found = {(path, name, text) for s in tf_body for n in nodes.walk(s)
             if isinstance(n, gast.Call) for _, path, name, text in
             anno.get(n, Key.CALLEE_TESTS, ())}
    return tuple(sorted(found))


_ONCE = (gast.Assign, gast.AugAssign, gast.AnnAssign, gast.Expr, gast.Return)
# expressions whose parts may run other than once per statement
_NOT_ONCE = (gast.ListComp, gast.SetComp, gast.DictComp, gast.GeneratorExp, gast.Lambda,
             gast.IfExp, gast.BoolOp)


def _host_halves(stmt: gast.stmt, filename: str) -> list[gast.stmt]:
    """For each recursion over a tree in a TF statement (Key.UNROLLED), in eager's order:
    `_gpe_c.unrolled(f, args)`, the host running its host half (its counters) there. Only
    where each runs once per statement (not in a loop the TF part unrolls, a
    comprehension or a conditional expression: refused there)."""
    calls = [n for n in nodes.walk(stmt) if isinstance(n, gast.Call) and
             anno.get(n, Key.UNROLLED) is not None]
    if calls and (not isinstance(stmt, _ONCE) or any(
            isinstance(n, _NOT_ONCE) and any(c in calls for c in nodes.walk(n))
            for n in nodes.walk(stmt))):
        raise Refusal("unsupported-statement", "a recursion over a tree called other "
                      "than once per statement (in a loop, a comprehension or a "
                      "conditional expression)", "call it in a statement of its own",
                      filename, stmt.lineno)
    calls.sort(key=lambda c: (c.lineno, c.col_offset))
    out = []
    for call in calls:
        (half,) = templates.replace("_gpe_c.unrolled(__f__)", __f__=copy.deepcopy(call.func))
        half.value.args += [copy.deepcopy(a) for a in call.args]
        gast.copy_location(half, stmt)
        out.append(half)
    return out


_HEADERS = {gast.If: ("test",), gast.While: ("test",), gast.For: ("iter",),
            gast.With: ("items",)}


def _counters_unread(fn: gast.FunctionDef, filename: str) -> None:
    """A recursion's counters (`self.nodes_seen`) change on the host during the statement
    that calls it: refused where that statement itself, TF work or what a sliced callee
    reads reads them too (the TF part would see the value from before the call); host
    statements after it read them as eager does."""
    calls = [n for n in nodes.walk(fn) if isinstance(n, gast.Call)
             and anno.get(n, Key.UNROLLED) is not None]
    counters = {a for c in calls for a in anno.get(c, Key.UNROLLED)}
    if not counters:
        return
    lines = {c.lineno for c in calls}
    for stmt in [n for n in nodes.walk(fn) if isinstance(n, gast.stmt) and n is not fn]:
        fields = _HEADERS.get(type(stmt))
        parts = [getattr(stmt, f) for f in fields] if fields else [stmt]
        found = [n for p in parts for item in (p if isinstance(p, list) else [p])
                 for n in nodes.walk(item)]
        read = any(isinstance(n, gast.Attribute) and n.attr in counters and
                   isinstance(n.ctx, gast.Load) for n in found) or any(
            p.rsplit(".", 1)[-1] in counters for n in found
            for p, _ in anno.get(n, Key.CALLEE_READS, ()))
        if read and (stmt.lineno in lines or fields is None and
                     anno.get(stmt, Key.PLACE) in (Place.TF, Place.BOTH) or
                     any(anno.has(n, Key.CALLEE_READS) for n in found)):
            raise Refusal("unsupported-order", "a recursion over a tree changes "
                          f"{', '.join(sorted(counters))} on the host, and TF work (or "
                          "its own statement) reads it", "read it in host code after the "
                          "call", filename, stmt.lineno)


def _in_line_scope(stmt: gast.stmt) -> gast.stmt:
    """Wrap a TF statement in `with _gpe_rt.line(lineno, effect):` (ops are named after the
    user's line; an effect waits for the earlier ops that can fail)."""
    line = anno.get(stmt, Key.ORIGIN, getattr(stmt, "lineno", 0))
    effect = bool(anno.get(stmt, Key.EFFECT))
    (wrapped,) = templates.replace(f"with _gpe_rt.line({line}, {effect}):\n    __body__",
                                   __body__=[stmt])
    return wrapped


def _computed(stmts: list[gast.stmt]) -> set[str]:
    """Names bound in `stmts` by computations: not by reading a name or an attribute chain
    of a value made elsewhere (`h = self.state`); a chain on a name computed earlier in
    `stmts` is computed there too (`l = model.loss(x); loss = l`)."""
    computed, reads = set(), set()
    for stmt in stmts:
        root = _chain(stmt.value) if isinstance(stmt, gast.Assign) else None
        if root is not None and root not in computed:
            reads |= generated.bound([stmt])
        else:
            computed |= generated.bound([stmt])
    return generated.bound(stmts) - (reads - computed)


def _chain(node: gast.expr) -> str | None:
    """The root name of an attribute chain (a name itself), else None."""
    while isinstance(node, gast.Attribute):
        node = node.value
    return node.id if isinstance(node, gast.Name) else None


def _plain_arguments(args: gast.arguments) -> gast.arguments:
    """The signature without default values (the runtime sets __defaults__)."""
    plain = copy.copy(args)
    plain.defaults = []
    plain.kw_defaults = [None] * len(args.kwonlyargs)
    return plain


def _iteration_observed(loop: gast.For) -> list[gast.stmt]:
    """`_gpe_obs(("iterated", path, n), (x, y))`: a host loop's target values, observed at
    the start of each iteration of a profile call (n: 0 for a name, else the tuple's
    length)."""
    target = loop.target
    names = [target] if isinstance(target, gast.Name) else list(target.elts)
    count = 0 if isinstance(target, gast.Name) else len(names)
    values = gast.Tuple(elts=[gast.Name(id=n.id, ctx=gast.Load(), annotation=None,
                                        type_comment=None) for n in names], ctx=gast.Load())
    index = f"('iterated', {anno.get(loop, Key.ITERATED)!r}, {count})"
    return templates.replace(f"_gpe_obs({index}, __v__)", __v__=values)


def folded_paths(fn: gast.FunctionDef) -> tuple[str, ...]:
    """The guarded paths the tests hoist folded away read (Key.FOLDED on the function): a
    plan holds them as captures (the key guards them) and as its `folds`."""
    return tuple(sorted({anno.get(n, Key.PATH) for test in anno.get(fn, Key.FOLDED, ())
                         for n in nodes.walk(test) if anno.has(n, Key.PATH)}))
