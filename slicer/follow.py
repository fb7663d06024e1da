"""The statements the TF part follows, for partition: loops and branches the host decides
(MIRROR) and calls of functions gpe slices too (NESTED), and the cancel routes through them.

`Follow` is mixed into partition's writer: `_mirror` and `_nested` emit one such statement
into the host program (the statement, with its flag sends) and the TF program (a
`while_loop` or a switch, and the rest of the block nested in a function run only if the
host did not cancel inside); `_routes` gives, for each site, what the TF part does next if
the host leaves the call there.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import gast

from gpe.slicer import anno, templates
from gpe.slicer.anno import Key
from gpe.slicer.plan import ChannelKind


@dataclass(eq=False)
class Block:
    """A block of the host program, for the cancel routes: its entries are sites (ints)
    and the MIRROR statements in it (`Block`s of kind "loop" or "if", holding theirs)."""

    kind: str                           # "top", "loop" (a loop body), "branch", "if"
    channel: int | None = None          # the flag channel of a loop body or an `if`
    parent: "Block | None" = None
    entries: list = field(default_factory=list)


class Follow:
    def _mirror(self, stmt, target, carried, crossing):
        """A loop or `if` the host decides: the host tells the TF part each iteration (1,
        then 0 after the last) or the branch taken (1 or 0); -1 cancels the rest."""
        self._host_order(stmt, target)
        gate = anno.get(stmt, Key.GATE)
        if gate is not None:
            target = self._gate(stmt, gate, target, carried, crossing)
        loop = not isinstance(stmt, gast.If)
        each = anno.get(stmt, Key.EACH, ())
        k = self.channel(ChannelKind.LOOP if loop else ChannelKind.BRANCH, each, stmt.lineno)
        live = anno.get(stmt, Key.RESCUE_EACH, ()) if self.rescuable and each else ()
        rescue = None
        if each:
            self.profile_each[id(stmt)] = templates.replace(f"_gpe_obs({k}, __v__)",
                                                            __v__=templates.names(each))
        crossing.append("the host tells the TF part " + (
            "each iteration" if loop else "the branch taken") + (
            f"; in: {', '.join(each)} (host->TF, each iteration)" if each else ""))
        self._report(stmt, crossing)
        own = anno.get(stmt, Key.CARRIED, ())
        construct = Block("loop" if loop else "if", k, self.current)
        self.current.entries.append(construct)
        host_stmt, names = copy.copy(stmt), []
        for i, (block, flag) in enumerate(
                [(stmt.body, 1)] if loop else [(stmt.body, 1), (stmt.orelse, 0)]):
            name = f"_gpe_{'loop' if loop else ('then', 'else')[i]}{k}"
            saved = self.host, self.current
            self.host = []
            self.current = Block("loop", k, saved[1]) if loop else Block("branch", k, construct)
            construct.entries.append(self.current)
            self.host += templates.replace(f"_gpe_c.flag({self.site(k)}, {flag}, __v__)",
                                           __v__=templates.names(each))
            rescue = self._rescue(k, live, stmt.lineno)  # the iteration's values no longer fit
            fn = templates.function(name, each + own)
            fn.body = self.block(block, own)
            target.append(fn)
            setattr(host_stmt, ("body", "orelse")[i], self.host)
            self.host, self.current = saved
            names.append(name)
        self.host.append(host_stmt)
        alive = f"_gpe_alive{k}"
        result = gast.Tuple(elts=[templates.name(alive, True)] + [
            templates.name(n, True) for n in own], ctx=gast.Store())
        if loop:
            self.host += templates.replace(f"_gpe_c.flag({self.site(k)}, 0)")
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
        self._outputs(stmt, rest.body, [])
        return rest.body

    def _nested(self, stmt, target, carried, crossing):
        """A call of a function gpe slices too: the host calls its variant in nested mode
        and tells the TF part (1) to run that variant's TF part here, or (0) that it calls
        the function eagerly instead, after the TF part's earlier effects (a barrier: the
        function may read TF state); -1 cancels the rest (see CallContext.nested)."""
        self._host_order(stmt, target)
        k = self.channel(ChannelKind.BRANCH, (), stmt.lineno)
        wait = self.channel(ChannelKind.BARRIER, (), stmt.lineno)
        slot = len(self.nested)
        self.nested.append(k)
        construct = Block("if", k, self.current)
        self.current.entries.append(construct)
        sites = []
        for channels in ((k,), (k, wait)):
            block = Block("branch", k, construct)
            construct.entries.append(block)
            saved, self.current = self.current, block
            sites += [self.site(c) for c in channels]
            self.current = saved
        host = copy.copy(stmt)
        host.value = _rerouted(stmt.value, f"_gpe_c.nested({sites[0]}, {sites[1]}, "
                                           f"{sites[2]}, {slot}, f)")
        self.host.append(host)
        profile = copy.copy(stmt)
        profile.value = _rerouted(stmt.value, f"_gpe_obs_call({slot}, f)")
        self.profile_replace[id(stmt)] = profile
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

    def _routes(self) -> tuple:
        """For each site (and, last, for the call's start): what the TF part does next if
        the host leaves the call there: the TF->host channels it fills before it next waits
        for the host (to drain), and the channel it then waits on (to cancel), or None."""
        return tuple(_route(block, index, self.sites, self.channels)
                     for block, index in self.where + [(self.top, -1)])


def _rerouted(call: gast.Call, template: str) -> gast.Call:
    """`f(a, k=b)` as a call of `template` (whose last argument is `f`) with the same
    arguments after it."""
    new = templates.expr(template, f=call.func)
    new.args = new.args + list(call.args)
    new.keywords = list(call.keywords)
    return new


def _route(block: Block, index: int, sites, channels) -> tuple:
    drains = []
    while True:
        for entry in block.entries[index + 1:]:
            if isinstance(entry, Block):
                return tuple(drains), entry.channel
            kind = channels[sites[entry]].kind
            if kind == ChannelKind.GATE:
                return tuple(drains), sites[entry]
            if kind in (ChannelKind.OUTPUT, ChannelKind.BARRIER, ChannelKind.CHECK):
                drains.append(sites[entry])
        if block.kind == "top":
            return tuple(drains), None
        if block.kind == "loop":
            return tuple(drains), block.channel
        construct = block.parent  # a branch: go on after its `if`
        block = construct.parent
        index = next(i for i, e in enumerate(block.entries) if e is construct)
