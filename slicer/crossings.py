"""Crossings: which values cross between the parts, and where the parts wait for each other.

`resolve(parsed, facts)` sets:
- `Key.ENTRY` on the FunctionDef: names the host sends when a call starts;
- `Key.OUTPUTS` on a TF statement: names the TF part sends to the host after it;
- `Key.GATE` on a TF statement: the TF part waits there until the host has run every
  host statement before it (a host exception there cancels the rest of the TF part), and
  receives the named host values computed since the call started;
- `Key.BARRIER` on a host statement that touches TF state: the host first waits for the
  TF part's earlier effects; the next TF statement waits for the host (a gate);
- `Key.CHECK` on the first host statement after TF statements: the host waits there for
  the TF work before it when that work can fail at run time (an error then surfaces
  before any later host statement runs, as eagerly).

Rules (DESIGN.md section 4): a TF effect, or a TF statement needing a host value computed
mid-call, that follows host work in program order gets a gate. Values cross once per
definition. Needs placement.resolve first.
"""
from __future__ import annotations

import gast

from slicer import anno
from slicer.anno import Key
from slicer.errors import Refusal
from slicer.facts import TF_KINDS, Facts, Kind
from slicer.hoist import is_tf_with
from slicer.parser import MISSING, Parsed
from slicer.placement import Place

_HOST, _TF, _BOTH = "host", "tf", "both"


def resolve(parsed: Parsed, facts: Facts) -> None:
    _Crossings(parsed, facts).run()


def flat_statements(stmts: list[gast.stmt]):
    """Statements in program order, TF `with` headers before their bodies (a compound
    statement the host runs whole is one statement)."""
    for stmt in stmts:
        yield stmt
        if is_tf_with(stmt):
            yield from flat_statements(stmt.body)


class _Crossings:
    def __init__(self, parsed: Parsed, facts: Facts):
        self.parsed, self.facts = parsed, facts
        # where the current definition of each local lives, and the statement defining it
        self.side: dict[str, str] = {}
        self.def_stmt: dict[str, gast.stmt | None] = {}
        self.on_tf: set[str] = set()    # names whose current value the TF part has
        self.on_host: set[str] = set()  # names whose current value the host has
        self.entry: list[str] = []
        self.host_work = False
        # a host statement since the last gate may change TF state or leave the function:
        # the next TF statement waits for the host
        self.state_touched = False
        self.tf_since_check = False
        for name, fact in facts.args.items():
            self.side[name], self.def_stmt[name] = _HOST, None
            self.on_host.add(name)
            if fact.constant:
                self.on_tf.add(name)

    def run(self) -> None:
        for stmt in flat_statements(self.parsed.node.body):
            place = anno.get(stmt, Key.PLACE)
            if place == Place.TF:
                self._tf(stmt)
            elif place == Place.HOST:
                self._host(stmt)
            else:
                self._define(stmt, _BOTH)
        anno.set(self.parsed.node, Key.ENTRY, tuple(self.entry))

    def _tf(self, stmt: gast.stmt) -> None:
        needed = [n for n in sorted(anno.get(stmt, Key.READS)) if self._needs_send(n, stmt)]
        if needed and not self.host_work:
            self.entry.extend(n for n in needed if n not in self.entry)
        gate_here = self.host_work and (needed or anno.get(stmt, Key.EFFECT)
                                        or self.state_touched)
        if gate_here:
            if _inside_with(self.parsed.node, stmt):
                raise Refusal("unsupported-order",
                              "a host statement inside a `with` block precedes TF work "
                              "that must wait for it", "move the host work out of the block",
                              self.parsed.filename, stmt.lineno)
            anno.set(stmt, Key.GATE, tuple(needed))
            self.host_work = self.state_touched = False
        self.on_tf.update(needed)
        self.tf_since_check = True
        self._define(stmt, _TF)

    def _needs_send(self, name: str, stmt: gast.stmt) -> bool:
        if name in self.on_tf:
            return False
        if name in self.side:
            if self.side[name] == _TF:
                return False
            return True
        obj = self.parsed.lookup(name)  # a global or closure name
        return isinstance(obj, (bool, int, float)) or (
            obj is not MISSING and self.facts.classify(obj) == Kind.HOST_DATA
            and not isinstance(obj, (str, type(None))))

    def _host(self, stmt: gast.stmt) -> None:
        if anno.get(stmt, Key.SYNC):
            anno.set(stmt, Key.BARRIER, True)
            self.state_touched = True
        elif anno.get(stmt, Key.EXITS):
            self.state_touched = True  # TF work after it runs only if the host gets there
        elif self.tf_since_check and not _trivial(stmt):
            anno.set(stmt, Key.CHECK, True)
        if not _trivial(stmt):
            self.tf_since_check = False
        for name in sorted(anno.get(stmt, Key.READS)):
            if self.side.get(name) == _TF and name not in self.on_host:
                definer = self.def_stmt[name]
                if isinstance(definer, gast.For) and _bound_by_loop(definer, name):
                    raise Refusal("unsupported-order", f"`{name}` is set by a loop the TF part "
                                  "unrolls, and read on the host after it", "",
                                  self.parsed.filename, stmt.lineno)
                anno.set(definer, Key.OUTPUTS, anno.get(definer, Key.OUTPUTS, ()) + (name,))
                self.on_host.add(name)
        if not _trivial(stmt):
            self.host_work = True
        self._define(stmt, _HOST)

    def _define(self, stmt: gast.stmt, side: str) -> None:
        for name in anno.get(stmt, Key.WRITES, ()):
            self.side[name], self.def_stmt[name] = side, stmt
            self.on_tf.discard(name)
            self.on_host.discard(name)
            if side in (_TF, _BOTH):
                self.on_tf.add(name)
            if side in (_HOST, _BOTH):
                self.on_host.add(name)


def _bound_by_loop(loop: gast.For, name: str) -> bool:
    """`name` holds a Python value while the TF part is built (a loop counter, or a value
    computed from counters), not a tensor the host could receive."""
    return any(isinstance(n, gast.Name) and n.id == name and isinstance(n.ctx, gast.Store)
               and anno.get(n, Key.KIND) not in TF_KINDS for n in gast.walk(loop))


def _trivial(stmt: gast.stmt) -> bool:
    """Host statements that cannot fail or be observed: `a = b`, `pass`."""
    return isinstance(stmt, gast.Pass) or (
        isinstance(stmt, gast.Assign) and isinstance(stmt.value, (gast.Name, gast.Constant))
        and all(isinstance(t, gast.Name) for t in stmt.targets))


def _inside_with(fn: gast.FunctionDef, target: gast.stmt) -> bool:
    return any(target is s for w in fn.body if isinstance(w, gast.With)
               for s in flat_statements(w.body))

