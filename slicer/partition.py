"""Partition: turn an analysed function into a `SlicePlan` (host, TF and profile programs).

`transform(parsed, facts)` reads the annotations of placement and crossings and writes
three programs as source text, each wrapped in a factory whose parameters are the
runtime objects and the original function's free variables:
- host: the original signature; host statements plus channel operations on `_gpe_c`;
- tf: `_gpe_tf(_gpe_q)`, the TF statements plus channel operations on `_gpe_rt`; the rest
  of the body after a gate is nested in a function the gate runs only if the host says so;
- profile: every statement in program order plus `_gpe_obs(channel, values)` where values
  would cross host->TF, for the eager profiling call.
Needs crossings.resolve first.
"""
from __future__ import annotations

import ast
import copy

import gast

from slicer import anno, templates
from slicer.anno import Key
from slicer.facts import Facts, Kind
from slicer.parser import Parsed
from slicer.placement import Place
from slicer.plan import Channel, ChannelKind, LineReport, SlicePlan

HOST_FACTORY = """
def _gpe_factory(__params__):
    def __name__(__args__):
        __declarations__
        _gpe_c = _gpe_rt.begin(__entry__)
        try:
            __body__
        finally:
            _gpe_c.finish()
    return __name__
"""

TF_FACTORY = """
def _gpe_factory(__params__):
    def _gpe_tf(_gpe_q):
        __body__
        return _gpe_rt.done()
    return _gpe_tf
"""

PROFILE_FACTORY = """
def _gpe_factory(__params__):
    def __name__(__args__):
        __body__
    return __name__
"""

SEGMENT = """
def __seg__(__args__):
    __body__
    return _gpe_rt.done()
"""


def transform(parsed: Parsed, facts: Facts) -> SlicePlan:
    return _Partition(parsed, facts).run()


def source_of(node: gast.AST) -> str:
    return ast.unparse(gast.gast_to_ast(node))


class _Partition:
    def __init__(self, parsed: Parsed, facts: Facts):
        self.parsed, self.facts = parsed, facts
        self.channels: list[Channel] = []
        self.host_ops: list[int] = []
        self.host: list[gast.stmt] = []
        self.profile: list[gast.stmt] = []
        self.lines: list[LineReport] = []
        self.segments: list[tuple[gast.FunctionDef, tuple[str, ...]]] = []
        self.profile_entry: list[gast.stmt] = []
        self.profile_before: dict[int, list[gast.stmt]] = {}

    def channel(self, kind: ChannelKind, names: tuple[str, ...], lineno: int) -> int:
        index = len(self.channels)
        self.channels.append(Channel(index, kind, names, lineno))
        return index

    def run(self) -> SlicePlan:
        fn = self.parsed.node
        entry = anno.get(fn, Key.ENTRY, ())
        bound = tuple(n for n, f in self.facts.args.items() if f.constant)
        tf_body: list[gast.stmt] = [
            templates.replace("n = _gpe_k[key]", n=templates.name(n, store=True),
                              key=gast.Constant(value=n, kind=None))[0] for n in bound]
        entry_tuple = _tuple(entry)
        if entry:
            k = self.channel(ChannelKind.ENTRY, entry, fn.lineno)
            self.host_ops.append(k)
            tf_body += templates.replace(f"__t__ = _gpe_rt.entry(_gpe_q, {k})",
                                         __t__=_tuple(entry, store=True))
            self.profile_entry = templates.replace(f"_gpe_obs({k}, __v__)", __v__=entry_tuple)
            self.lines.append(LineReport(fn.lineno, "host", "call starts", "(arguments)",
                                         (f"in: {', '.join(entry)} (host->TF when the call "
                                          "starts)",)))
        tf_body += self.block(fn.body)
        self._close_segments(tf_body)
        self.profile = list(self.profile_entry)
        for stmt in fn.body:
            self.profile += self.profile_before.get(id(stmt), []) + [stmt]
        declarations = [s for s in self.host if isinstance(s, (gast.Global, gast.Nonlocal))]
        body = [s for s in self.host if not isinstance(s, (gast.Global, gast.Nonlocal))]
        host_source, host_tree = self._factory(HOST_FACTORY, ["_gpe_rt"], body,
                                               with_args=True, __entry__=entry_tuple,
                                               __declarations__=declarations)
        tf_source, _ = self._factory(TF_FACTORY, ["_gpe_rt", "_gpe_k"], tf_body)
        profile_source, profile_tree = self._factory(PROFILE_FACTORY, ["_gpe_obs"],
                                                     self.profile, with_args=True)
        return SlicePlan(
            name=fn.name, qualname=self.parsed.fn.__qualname__,
            filename=self.parsed.filename, lineno=fn.lineno,
            host_source=host_source, tf_source=tf_source, profile_source=profile_source,
            host_tree=host_tree, profile_tree=profile_tree, captures=self._captures(tf_body),
            channels=tuple(self.channels), host_ops=tuple(self.host_ops), bound=bound,
            lines=tuple(self.lines), assumptions=(self.facts.assumed,) if self.facts.assumed
            else ())

    # walking the body ---------------------------------------------------------------
    def block(self, stmts: list[gast.stmt]) -> list[gast.stmt]:
        """Emit `stmts`; returns the TF statements for the list that was current."""
        out: list[gast.stmt] = []
        target = out
        for stmt in stmts:
            place = anno.get(stmt, Key.PLACE)
            crossing: list[str] = []
            if isinstance(stmt, gast.With) and place == Place.TF:
                header = copy.copy(stmt)
                self._report(stmt, crossing)
                header.body = self.block(stmt.body) or [gast.Pass()]
                target.append(_in_line_scope(header))
                continue
            if place == Place.TF:
                target = self._tf_statement(stmt, target, crossing)
            elif place == Place.HOST:
                self._host_statement(stmt, target, crossing)
            else:
                target.append(stmt)
                self.host.append(stmt)
            self._report(stmt, crossing)
        return out

    def _tf_statement(self, stmt, target, crossing):
        gate = anno.get(stmt, Key.GATE)
        if gate is not None:
            k = self.channel(ChannelKind.GATE, gate, stmt.lineno)
            self.host_ops.append(k)
            self.host += templates.replace(f"_gpe_c.gate({k}, __v__)", __v__=_tuple(gate))
            self.profile_before[id(stmt)] = templates.replace(f"_gpe_obs({k}, __v__)",
                                                              __v__=_tuple(gate))
            (seg,) = templates.replace(SEGMENT, __seg__=f"_gpe_seg{k}",
                                       __args__=_arguments(gate), __body__=[])
            seg.body = seg.body[:-1]
            self.segments.append((seg, gate))
            target += [seg] + templates.replace(f"_gpe_rt.gate(_gpe_q, {k}, _gpe_seg{k})")
            target = seg.body
            crossing.append("waits for the host to get here" + (
                f"; in: {', '.join(gate)} (host->TF)" if gate else ""))
        target.append(_in_line_scope(_tf_calls(stmt)))
        for name in anno.get(stmt, Key.OUTPUTS, ()):
            k = self.channel(ChannelKind.OUTPUT, (name,), stmt.lineno)
            self.host_ops.append(k)
            target += templates.replace(f"_gpe_rt.output(_gpe_q, {k}, n)", n=name)
            self.host += templates.replace(f"n = _gpe_c.recv({k})",
                                           n=templates.name(name, store=True))
            crossing.append(f"out: {name} (TF->host)")
        return target

    def _host_statement(self, stmt, target, crossing):
        if anno.get(stmt, Key.BARRIER):
            k = self.channel(ChannelKind.BARRIER, (), stmt.lineno)
            self.host_ops.append(k)
            target += templates.replace(f"_gpe_rt.barrier(_gpe_q, {k})")
            self.host += templates.replace(f"_gpe_c.barrier({k})")
            crossing.append("waits for the TF part's earlier effects")
        elif anno.get(stmt, Key.CHECK):
            k = self.channel(ChannelKind.CHECK, (), stmt.lineno)
            self.host_ops.append(k)
            target += templates.replace(f"_gpe_rt.check(_gpe_q, {k})")
            self.host += templates.replace(f"_gpe_c.check({k})")
        self.host.append(stmt)

    def _report(self, stmt, crossing):
        shown = copy.copy(stmt)
        if isinstance(stmt, gast.With):
            shown.body = [gast.Pass()]
        text = source_of(shown).splitlines()[0]
        self.lines.append(LineReport(anno.get(stmt, Key.ORIGIN, stmt.lineno),
                                     anno.get(stmt, Key.PLACE).value,
                                     anno.get(stmt, Key.REASON, ""), text, tuple(crossing)))

    def _close_segments(self, tf_body: list[gast.stmt]) -> None:
        """Declare `nonlocal` the names a segment rebinds that an enclosing scope binds."""
        outer = _bound(tf_body)
        for seg, params in self.segments:
            seg.body += templates.replace("return _gpe_rt.done()")
            here = _bound(seg.body)
            shared = sorted((here & outer) - set(params))
            if shared:
                seg.body.insert(0, gast.Nonlocal(names=shared))
            outer |= here | set(params)

    # sources ------------------------------------------------------------------------
    def _captures(self, tf_body) -> tuple[str, ...]:
        """What the TF program reads from outside when it is traced: free names, and
        attribute chains on them or on arguments (`self.w`); guarded by identity."""
        names = [n for s in tf_body for n in gast.walk(s) if isinstance(n, gast.Name)]
        stored = {n.id for n in names if not isinstance(n.ctx, gast.Load)}
        stored |= {a.id for s in tf_body for n in gast.walk(s) if isinstance(n, gast.FunctionDef)
                   for a in n.args.args}
        read = {n.id for n in names if isinstance(n.ctx, gast.Load)}
        free = {n for n in read - stored if not n.startswith("_gpe_")}
        paths = {anno.get(n, Key.PATH) for s in tf_body for n in gast.walk(s)
                 if isinstance(n, gast.Attribute) and anno.has(n, Key.PATH)}
        return tuple(sorted(free | paths))

    def _factory(self, template, runtime, body, with_args=False, **subs) -> str:
        params = runtime + list(self.parsed.fn.__code__.co_freevars)
        subs.update(__body__=body or [gast.Pass()], __name__=self.parsed.node.name)
        if with_args:
            subs["__args__"] = _plain_arguments(self.parsed.node.args)
        (factory,) = templates.replace(template, **subs)
        factory.args = _arguments(params)
        gast.copy_location(factory, self.parsed.node)
        module = gast.Module(body=[factory], type_ignores=[])
        return source_of(module), module


def _tf_calls(stmt: gast.stmt) -> gast.stmt:
    """Calls the TF runtime handles itself, rewritten in the TF part:
    `tf.constant(v, ...)` becomes `_gpe_rt.constant(tf.constant, v, ...)` (a value sent by
    the host arrives as a tensor, which tf.constant cannot take in a graph), and a call of
    a sliced callee `f(a)` becomes `_gpe_rt.call(f, a)` (a call of f's own FunctionDef)."""
    def special(node):
        return isinstance(node, gast.Call) and (
            anno.get(node.func, Key.KIND) == Kind.TF_CONSTANT or anno.get(node, Key.CALLEE))
    if not any(special(n) for n in gast.walk(stmt)):
        return stmt
    stmt = copy.deepcopy(stmt)  # the profile program keeps the original
    for call in [n for n in gast.walk(stmt) if special(n)]:
        method = "call" if anno.get(call, Key.CALLEE) else "constant"
        call.args = [call.func] + call.args
        call.func = templates.expr(f"_gpe_rt.{method}")
    return stmt


def _in_line_scope(stmt: gast.stmt) -> gast.stmt:
    """Wrap a TF statement in `with _gpe_rt.line(lineno, effect):` (ops are named after the
    user's line; an effect waits for the earlier ops that can fail)."""
    line = anno.get(stmt, Key.ORIGIN, getattr(stmt, "lineno", 0))
    effect = bool(anno.get(stmt, Key.EFFECT))
    (wrapped,) = templates.replace(f"with _gpe_rt.line({line}, {effect}):\n    __body__",
                                   __body__=[stmt])
    return wrapped


def _walk_scope(node):
    """Nodes of `node` not inside a nested function."""
    yield node
    for child in gast.iter_child_nodes(node):
        if not isinstance(child, (gast.FunctionDef, gast.Lambda)):
            yield from _walk_scope(child)


def _bound(stmts: list[gast.stmt]) -> set[str]:
    return {n.id for s in stmts if not isinstance(s, gast.FunctionDef)
            for n in _walk_scope(s) if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store)}


def _tuple(names, store=False) -> gast.Tuple:
    ctx = gast.Store() if store else gast.Load()
    return gast.Tuple(elts=[templates.name(n, store) for n in names], ctx=ctx)


def _arguments(names) -> gast.arguments:
    return gast.arguments(args=[templates.name(n) for n in names], posonlyargs=[],
                          vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                          defaults=[])


def _plain_arguments(args: gast.arguments) -> gast.arguments:
    """The signature without default values (the runtime sets __defaults__)."""
    plain = copy.copy(args)
    plain.defaults = []
    plain.kw_defaults = [None] * len(args.kwonlyargs)
    return plain
