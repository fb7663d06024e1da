"""The statements the TF part follows, for partition: loops and branches the host decides
(MIRROR) and calls of functions gpe slices too (NESTED).

`Follow(writer, block)` writes them through partition's `Writer` (slicer/writer.py):
`mirror` and `nested` emit one such statement into the host program (the statement, with
its flag sends) and the TF program (a `while_loop` or a switch, and the rest of the block
nested in a function run only if the host did not cancel inside); `block(stmts, carried)`
is partition's walk, called back to write a body the TF part follows.
"""
from __future__ import annotations

import copy
from typing import Callable

import gast

from . import anno, templates
from .anno import Key
from .plan import ChannelKind
from .writer import Block, Writer

WriteBlock = Callable[[list, tuple], list]
"""partition's `block(stmts, carried)`: writes `stmts` into the writer's current host
block and returns their TF statements."""


class Follow:
    def __init__(self, writer: Writer, block: WriteBlock):
        self.writer, self.block = writer, block

    def mirror(self, stmt, target, carried, crossing):
        """A loop or `if` the host decides: the host tells the TF part each iteration (1,
        then 0 after the last) or the branch taken (1 or 0); -1 cancels the rest."""
        w = self.writer
        w.host_order(stmt, target)
        gate = anno.get(stmt, Key.GATE)
        if gate is not None:
            target = w.gate(stmt, gate, target, carried, crossing)
        loop = not isinstance(stmt, gast.If)
        each = anno.get(stmt, Key.EACH, ())
        k = w.channel(ChannelKind.LOOP if loop else ChannelKind.BRANCH, each, stmt.lineno,
                      _iterates(stmt, w.params))
        live = anno.get(stmt, Key.RESCUE_EACH, ()) if w.rescuable and each else ()
        if each:
            w.profile_each[id(stmt)] = templates.replace(f"_gpe_obs({k}, __v__)",
                                                         __v__=templates.names(each))
        crossing.append("the host tells the TF part " + (
            "each iteration" if loop else "the branch taken") + (
            f"; in: {', '.join(each)} (host->TF, each iteration)" if each else ""))
        w.report(stmt, crossing)
        own = anno.get(stmt, Key.CARRIED, ())
        kept = {n: f"_gpe_set{k}_{n}" for n in anno.get(stmt, Key.KEPT, ())}
        for name, flag in kept.items():
            w.host += templates.replace(f"{flag} = False")
            w.kept.setdefault(name, []).append(flag)
        names, rescue = self._bodies(stmt, k, each + own, own, live, target)
        for name, flag in kept.items():
            w.kept[name].remove(flag)
        alive = f"_gpe_alive{k}"
        result = gast.Tuple(elts=[templates.name(alive, True)] + [
            templates.name(n, True) for n in own], ctx=gast.Store())
        if loop:
            w.host += templates.replace(f"_gpe_c.flag({w.site(k)}, 0)")
            call = (f"_gpe_rt.loop(_gpe_q, {k}, {names[0]}, __c__, {rescue}, "
                    f"lambda {', '.join(own)}: __l__)")
        else:
            call = f"_gpe_rt.branch(_gpe_q, {k}, {names[0]}, {names[1]}, __c__)"
        target += templates.replace(f"__r__ = {call}", __r__=result, __c__=templates.names(own),
                                    __l__=templates.names(live))
        rest = templates.function(f"_gpe_rest{k}", ())
        target += [rest] + templates.replace(
            f"return _gpe_rt.proceed({alive}, _gpe_rest{k}, __c__)",
            __c__=templates.names(carried))
        w.outputs(stmt, rest.body, [], kept)
        return rest.body

    def _bodies(self, stmt, k, params, own, live, target):
        """The bodies of a MIRROR loop (one) or `if` (two): in the host program, the
        statement with a flag send at the start of each body; in the TF part (`target`), a
        function of `params` per body. Returns their names and the RESCUE channel."""
        w = self.writer
        loop = not isinstance(stmt, gast.If)
        each = anno.get(stmt, Key.EACH, ())
        construct = Block("loop" if loop else "if", k, w.current)
        w.current.entries.append(construct)
        host_stmt, names, rescue = copy.copy(stmt), [], None
        for i, (block, flag) in enumerate(
                [(stmt.body, 1)] if loop else [(stmt.body, 1), (stmt.orelse, 0)]):
            name = f"_gpe_{'loop' if loop else ('then', 'else')[i]}{k}"
            saved = w.host, w.current
            w.host = []
            w.current = Block("loop", k, saved[1]) if loop else Block("branch", k, construct)
            construct.entries.append(w.current)
            w.host += templates.replace(f"_gpe_c.flag({w.site(k)}, {flag}, __v__)",
                                        __v__=templates.names(each))
            rescue = w.rescue(k, live, stmt.lineno)  # the iteration's values no longer fit
            fn = templates.function(name, params)
            anno.set(fn, Key.BRANCH, not loop)
            fn.body = self.block(block, own)
            target.append(fn)
            setattr(host_stmt, ("body", "orelse")[i], w.host)
            w.host, w.current = saved
            names.append(name)
        w.host.append(host_stmt)
        return names, rescue

    def nested(self, stmt, target, carried, crossing):
        """A call of a function gpe slices too: the host calls its variant in nested mode
        and tells the TF part (1) to run that variant's TF part here, or (0) that it calls
        the function eagerly instead, after the TF part's earlier effects (a barrier: the
        function may read TF state); -1 cancels the rest (see CallContext.nested)."""
        w = self.writer
        w.host_order(stmt, target)
        k = w.channel(ChannelKind.BRANCH, (), stmt.lineno)
        wait = w.channel(ChannelKind.BARRIER, (), stmt.lineno)
        slot = len(w.nested)
        w.nested.append(k)
        construct = Block("if", k, w.current)
        w.current.entries.append(construct)
        sites = []
        for channels in ((k,), (k, wait)):
            block = Block("branch", k, construct)
            construct.entries.append(block)
            saved, w.current = w.current, block
            sites += [w.site(c) for c in channels]
            w.current = saved
        host = copy.copy(stmt)
        host.value = _rerouted(stmt.value, f"_gpe_c.nested({sites[0]}, {sites[1]}, "
                                           f"{sites[2]}, {slot}, f)")
        w.host.append(host)
        profile = copy.copy(stmt)
        profile.value = _rerouted(stmt.value, f"_gpe_obs_call({slot}, f)")
        w.profile_replace[id(stmt)] = profile
        crossing.append("the host tells the TF part whether it runs the callee's TF part")
        then = templates.function(f"_gpe_then{k}", ())
        orelse = templates.function(f"_gpe_else{k}", ())
        then.body = templates.replace(f"_gpe_rt.invoke(_gpe_q, {slot})\nreturn _gpe_rt.end(())")
        orelse.body = templates.replace(f"_gpe_rt.barrier(_gpe_q, {wait})\n"
                                        "return _gpe_rt.end(())")
        target += [then, orelse] + templates.replace(
            f"_gpe_alive{k}, = _gpe_rt.branch(_gpe_q, {k}, _gpe_then{k}, _gpe_else{k}, ())")
        rest = templates.function(f"_gpe_rest{k}", ())
        target += [rest] + templates.replace(
            f"return _gpe_rt.proceed(_gpe_alive{k}, _gpe_rest{k}, __c__)",
            __c__=templates.names(carried))
        return rest.body


def _rerouted(call: gast.Call, template: str) -> gast.Call:
    """`f(a, k=b)` as a call of `template` (whose last argument is `f`) with the same
    arguments after it."""
    new = templates.expr(template, f=call.func)
    new.args = new.args + list(call.args)
    new.keywords = list(call.keywords)
    return new


def _iterates(stmt, params: frozenset) -> tuple[str, tuple[str, ...]] | None:
    """A `for` binding names over an object reached by a path (Key.ITERATED) or over a
    parameter the function never rebinds: (the path, the names), which the iteration's
    flag sends first where the TF part reads them (Channel.iterates)."""
    if not isinstance(stmt, gast.For):
        return None
    path = anno.get(stmt, Key.ITERATED) if anno.has(stmt, Key.ITERATED) else \
        stmt.iter.id if isinstance(stmt.iter, gast.Name) and stmt.iter.id in params else None
    if path is None:
        return None
    target = stmt.target
    names = [target] if isinstance(target, gast.Name) else list(
        getattr(target, "elts", [None]))
    if not all(isinstance(n, gast.Name) for n in names):
        return None
    return path, tuple(n.id for n in names)
