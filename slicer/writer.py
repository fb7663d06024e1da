"""What partition writes as it walks a function, shared with follow (slicer/follow.py).

A `Writer` holds the programs' bookkeeping: the channels, the sites (each place the host
program uses a channel) and the `Block` of the host program each is in, the host block
being written (`host`) and its `Block` (`current`), the line reports, and the profile
program's observations. Its emitters write what both partition and follow write: a gate,
the outputs after a TF statement, a barrier or check before a host statement, a rescue, a
line report. `routes()` gives the cancel routes once the programs are written.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import gast

from . import anno, scope, templates
from .anno import Key
from .plan import Channel, ChannelKind, LineReport


@dataclass(eq=False)
class Block:
    """A block of the host program, for the cancel routes: its entries are sites (ints)
    and the MIRROR statements in it (`Block`s of kind "loop" or "if", holding theirs)."""

    kind: str                           # "top", "loop" (a loop body), "branch", "if"
    channel: int | None = None          # the flag channel of a loop body or an `if`
    parent: "Block | None" = None
    entries: list = field(default_factory=list)


class Writer:
    def __init__(self, rescuable: bool):
        # the host program holds each TF statement too, run only once a value no longer
        # fits a gate's channel (see partition)
        self.rescuable = rescuable
        self.channels: list[Channel] = []
        self.sites: list[int] = []   # the channel of each place the host program uses one
        self.where: list[tuple[Block, int]] = []  # each site's block and index in it
        self.top = self.current = Block("top")
        self.host: list[gast.stmt] = []  # the host block being written
        self.lines: list[LineReport] = []
        self.profile_before: dict[int, list[gast.stmt]] = {}
        self.profile_each: dict[int, list[gast.stmt]] = {}  # at the start of each iteration
        self.profile_replace: dict[int, gast.stmt] = {}  # nested calls, observed
        self.nested: list[int] = []  # per nested call site: its BRANCH channel
        self.rescues: dict[int, int] = {}  # gate or loop channel -> its RESCUE channel
        # gates inside TF `with` blocks (see gate_in_with): (channel, names bound in the block)
        self.with_gates: list[tuple[int, tuple[str, ...]]] = []
        # names kept by the MIRROR statements being written (Key.KEPT): name -> the host
        # flags saying TF work rebound it last
        self.kept: dict[str, list[str]] = {}
        # the function's parameters it never rebinds: a loop over one iterates the
        # argument the call key describes (Channel.iterates)
        self.params: frozenset[str] = frozenset()

    def channel(self, kind: ChannelKind, names: tuple[str, ...], lineno: int,
                iterates: tuple[str, tuple[str, ...]] | None = None) -> int:
        index = len(self.channels)
        self.channels.append(Channel(index, kind, names, lineno, iterates))
        return index

    def site(self, channel: int) -> int:
        """A new place where the host program uses `channel` (in the current block)."""
        self.where.append((self.current, len(self.current.entries)))
        self.current.entries.append(len(self.sites))
        self.sites.append(channel)
        return len(self.sites) - 1

    def gate(self, stmt, names, target, carried, crossing):
        """The TF part waits here for the host (and receives `names`); the rest of the
        block is nested in a function it runs only if the host says go on."""
        k = self.channel(ChannelKind.GATE, names, stmt.lineno)
        site = self.site(k)
        self.host += templates.replace(f"_gpe_c.gate({site}, __v__)", __v__=templates.names(names))
        self.profile_before[id(stmt)] = templates.replace(f"_gpe_obs({k}, __v__)",
                                                          __v__=templates.names(names))
        live = anno.get(stmt, Key.RESCUE, ()) if self.rescuable else ()
        rescue = self.rescue(k, live, stmt.lineno)
        seg = templates.function(f"_gpe_seg{k}", names)
        target += [seg] + templates.replace(
            f"return _gpe_rt.gate(_gpe_q, {k}, _gpe_seg{k}, __c__, {rescue}, __l__)",
            __c__=templates.names(carried), __l__=templates.names(live))
        crossing.append("waits for the host to get here" + (
            f"; in: {', '.join(names)} (host->TF)" if names else ""))
        return seg.body

    def gate_in_with(self, stmt, names, target, crossing, inside: frozenset):
        """A gate inside a TF `with` block (a GradientTape): the rest of the block is nested
        in a function whose results (the names it binds, set by `finish_with_gate`) come out
        of a `tf.cond` inside the block, so the tape records them; the statements after the
        block run under the same decision (`resume`). Returns (the segment, its
        assignment, the channel)."""
        k = self.channel(ChannelKind.GATE, names, stmt.lineno)
        self.with_gates.append((k, tuple(n for n in names if n in inside)))
        site = self.site(k)
        self.host += templates.replace(f"_gpe_c.gate({site}, __v__)", __v__=templates.names(names))
        self.profile_before[id(stmt)] = templates.replace(f"_gpe_obs({k}, __v__)",
                                                          __v__=templates.names(names))
        seg = templates.function(f"_gpe_seg{k}", names)
        (assign,) = templates.replace(f"_gpe_out = _gpe_rt.gate_in_with(_gpe_q, {k}, _gpe_seg{k})")
        target += [seg, assign]
        crossing.append("waits for the host to get here" + (
            f"; in: {', '.join(names)} (host->TF)" if names else ""))
        return seg, assign, k

    @staticmethod
    def finish_with_gate(seg: gast.FunctionDef, assign: gast.Assign) -> None:
        """The segment returns the names its own statements bind; the block gets them."""
        bound = []
        for node in _own_statements(seg.body):
            for target in scope.walk(node):
                if isinstance(target, gast.Name) and isinstance(target.ctx, gast.Store) \
                        and not target.id.startswith("_gpe_") and target.id not in bound:
                    bound.append(target.id)
        seg.body += templates.replace("return __v__", __v__=templates.names(bound))
        assign.targets = [templates.names(bound, store=True)]

    def resume(self, k: int, target, carried):
        """After a `with` block that held the gate on channel `k`: the rest of this block
        runs only if the host said go on there."""
        seg = templates.function(f"_gpe_seg{k}r", ())
        target += [seg] + templates.replace(
            f"return _gpe_rt.resume({k}, _gpe_seg{k}r, __c__)", __c__=templates.names(carried))
        return seg.body

    def rescue(self, k: int, live: tuple[str, ...], lineno: int) -> int | None:
        """The RESCUE channel of decision channel `k` (None without live values): the host
        statement just written (the gate or flag send) becomes `if <it>: live = rescued`."""
        if not live:
            return None
        rescue = self.channel(ChannelKind.RESCUE, live, lineno)
        self.rescues[k] = rescue
        (check,) = templates.replace(
            f"if __send__:\n    __live__ = _gpe_c.rescued({rescue})",
            __send__=self.host.pop().value, __live__=templates.names(live, store=True))
        self.host.append(check)
        return rescue

    def outputs(self, stmt, target, crossing, kept: dict[str, str] | None = None) -> None:
        """The TF part sends each of the statement's OUTPUTS after it; the host takes it
        (a name in `kept` only if its flag says TF work rebound it last)."""
        for name in anno.get(stmt, Key.OUTPUTS, ()):
            k = self.channel(ChannelKind.OUTPUT, (name,), stmt.lineno)
            site = self.site(k)
            target += templates.replace(f"_gpe_rt.output(_gpe_q, {k}, n)", n=name)
            recv = templates.replace(f"n = _gpe_c.recv({site})",
                                     n=templates.name(name, store=True))
            if kept and name in kept:
                recv = templates.replace(
                    f"_gpe_got = _gpe_c.recv({site})\nif {kept[name]}:\n    n = _gpe_got",
                    n=templates.name(name, store=True))
            if self.rescuable:  # after a rescue the host computed it itself
                recv = templates.replace("if not _gpe_c.eager:\n    __s__", __s__=recv)
            self.host += _at(stmt, recv)
            crossing.append(f"out: {name} (TF->host)")

    def mark_kept(self, stmt, place_tf: bool) -> None:
        """After a statement in a MIRROR body that rebinds a kept name: whether the TF part
        (not the host's own Python) has its latest value."""
        for name in anno.get(stmt, Key.WRITES, ()):
            for flag in self.kept.get(name, ()):
                self.host += templates.replace(f"{flag} = {place_tf}")

    def host_order(self, stmt, target) -> None:
        if anno.get(stmt, Key.BARRIER):
            k = self.channel(ChannelKind.BARRIER, (), stmt.lineno)
            target += templates.replace(f"_gpe_rt.barrier(_gpe_q, {k})")
            self.host += _at(stmt, templates.replace(f"_gpe_c.barrier({self.site(k)})"))
        elif anno.get(stmt, Key.CHECK):
            k = self.channel(ChannelKind.CHECK, (), stmt.lineno)
            target += templates.replace(f"_gpe_rt.check(_gpe_q, {k})")
            self.host += _at(stmt, templates.replace(f"_gpe_c.check({self.site(k)})"))

    def report(self, stmt, crossing) -> None:
        shown = copy.copy(stmt)  # its first line only: a compound statement's header
        for block in ("body", "orelse", "finalbody", "handlers"):
            if getattr(stmt, block, None):
                setattr(shown, block, [gast.Pass()] if block == "body" else [])
        text = templates.source_of(shown).splitlines()[0]
        self.lines.append(LineReport(anno.get(stmt, Key.ORIGIN, stmt.lineno),
                                     anno.get(stmt, Key.PLACE).value,
                                     anno.get(stmt, Key.REASON, ""), text, tuple(crossing)))

    def routes(self) -> tuple:
        """For each site (and, last, for the call's start): what the TF part does next if
        the host leaves the call there: the TF->host channels it fills before it next waits
        for the host (to drain), and the channel it then waits on (to cancel), or None."""
        return tuple(_route(block, index, self.sites, self.channels)
                     for block, index in self.where + [(self.top, -1)])


def _at(stmt: gast.stmt, made: list[gast.stmt]) -> list[gast.stmt]:
    """`made` (host statements that wait on the graph for `stmt`) at `stmt`'s line: an
    error raised in the TF part is raised there, and the traceback shows the user's line."""
    for node in (n for new in made for n in gast.walk(new)):
        if hasattr(node, "lineno"):  # (a template's nodes are at its own line 1)
            node.lineno, node.end_lineno = stmt.lineno, stmt.end_lineno
            node.col_offset, node.end_col_offset = stmt.col_offset, stmt.end_col_offset
    return made


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


def _own_statements(stmts: list[gast.stmt]):
    """Statements of a block and of the compound statements in it, not of nested defs."""
    for stmt in stmts:
        if isinstance(stmt, (gast.FunctionDef, gast.ClassDef)):
            continue
        yield stmt
