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
  before any later host statement runs, as eagerly);
- on a MIRROR statement (a loop or `if` the TF part follows): `Key.GATE` for the values
  the TF part needs before it, `Key.CARRIED` for the TF values it rebinds; its blocks are
  walked like the function's body, each starting after a host decision.

Rules (DESIGN.md section 4): a TF effect, or a TF statement needing a host value computed
mid-call, that follows host work in program order gets a gate. Values cross once per
definition; a value the host reads inside or after a loop comes from every TF statement
that may have defined it. Needs placement.resolve first.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import gast

from . import anno, nodes, scope
from .anno import Key
from .errors import Refusal
from .facts import TF_KINDS, Facts, Kind
from .hoist import is_tf_with
from .parser import MISSING, Parsed
from .placement import Place, loop_targets, mirrored_statements
from .words import spell, temporaries

_HOST, _TF, _BOTH = "host", "tf", "both"
# kinds of values that may cross into the TF part (slicer/facts.py)
_MAY_CROSS = TF_KINDS | {Kind.PY_SCALAR, Kind.HOST_DATA}


def resolve(parsed: Parsed, facts: Facts) -> None:
    _Crossings(parsed, facts).run()


def _header_after_effects(loop: gast.While, tf_stmts: list, filename: str) -> None:
    """The host tests `while v < 4.0:` again after each iteration; where the TF work of the
    body changes TF state (`v.assign_add(...)`) nothing makes that test wait for it (only
    the barrier before the loop does, once): it could read the value from before the
    iteration and run one more (fuzz seed 28520, now and then). Refused: eager."""
    reads_state = any(anno.get(n, Key.KIND) == Kind.VARIABLE for n in scope.walk(loop.test))
    if reads_state and any(anno.get(c, Key.EFFECT) for c in tf_stmts):
        raise Refusal("unsupported-order", "the loop's test reads a variable that the TF "
                      "work in its body changes, and the host runs the loop (the test could "
                      "read it before that work is done)", "", filename, loop.lineno)


def flat_statements(stmts: list[gast.stmt]):
    """Statements in program order, TF `with` headers before their bodies (a compound
    statement the host runs whole is one statement)."""
    for stmt in stmts:
        yield stmt
        if is_tf_with(stmt):
            yield from flat_statements(stmt.body)


_LOST = "lost"  # bound by TF work inside a MIRROR statement the TF part does not carry out


@dataclass
class _State:
    """Where values are at one point of the function (see _Crossings)."""

    side: dict = field(default_factory=dict)     # name -> side of its current definition
    defs: dict = field(default_factory=dict)     # name -> statements that may have defined it
    on_tf: set = field(default_factory=set)      # names whose current value the TF part has
    on_host: set = field(default_factory=set)    # names whose current value the host has
    host_work: bool = False   # host work since the TF part last waited for the host
    # a host statement since the last gate may change TF state or leave the function:
    # the next TF statement waits for the host
    state_touched: bool = False
    tf_since_check: bool = False
    # where the TF part last waited for the host: (statement, Key.GATE or Key.EACH), or
    # None for the call's entry
    gate: tuple | None = None
    # names bound by host statements since the TF part last waited for the host (a value
    # is never sent with an earlier wait, before its definition)
    host_defs: set = field(default_factory=set)

    def copy(self) -> "_State":
        return _State(dict(self.side), dict(self.defs), set(self.on_tf), set(self.on_host),
                      self.host_work, self.state_touched, self.tf_since_check, self.gate,
                      set(self.host_defs))

    def late(self, names) -> bool:
        """Host work came since the last wait, or some of `names` were bound since."""
        return self.host_work or bool(self.host_defs.intersection(names))


class _Crossings:
    def __init__(self, parsed: Parsed, facts: Facts):
        self.parsed, self.facts = parsed, facts
        self.entry: list[str] = []
        self.s = _State()
        self.loads = [(getattr(n, "lineno", 0), n.id) for n in scope.reads(parsed.node)]
        self.loops: list[gast.stmt] = []  # the MIRROR loops around the statement walked
        # names declared global or nonlocal: the caller sees them once the function returns
        # or raises, so the host holds them then (`global x; x = a + 1`: leaky_function)
        self.escaping = sorted({name for n in nodes.walk(parsed.node)
                                if isinstance(n, (gast.Global, gast.Nonlocal))
                                for name in n.names})
        for name, fact in facts.args.items():
            self.s.side[name], self.s.defs[name] = _HOST, ()
            self.s.on_host.add(name)
            if fact.constant:
                self.s.on_tf.add(name)

    def run(self) -> None:
        self.block(self.parsed.node.body)
        anno.set(self.parsed.node, Key.ENTRY, tuple(self.entry))

    def block(self, stmts: list[gast.stmt]) -> None:
        for stmt in stmts:
            place = anno.get(stmt, Key.PLACE)
            if anno.get(stmt, Key.MIRROR):
                self._mirror(stmt)
            elif place == Place.TF:
                self._tf(stmt)
            elif place == Place.HOST:
                self._host(stmt)
            else:
                self._define(stmt, _BOTH)
            if is_tf_with(stmt):
                self.block(stmt.body)
                self._left_with(stmt)

    def _left_with(self, stmt: gast.With) -> None:
        """After a TF `with` block: a value sent at a gate inside it was the gate's segment's
        own (a parameter); only what the block's TF statements bound comes out of it, so a
        name sent there and not rebound by TF work is sent again where TF work after the
        block reads it (seed 49904: after the tape's block the TF part read the folded
        argument `n`, not the host's new value sent inside)."""
        inside = [c for c in nodes.walk(stmt) if isinstance(c, gast.stmt) and c is not stmt]
        sent = {n for c in inside for n in anno.get(c, Key.GATE, ())}
        self.s.on_tf -= {n for n in sent if self.s.side.get(n) != _TF}
        if self.s.gate is not None and any(self.s.gate[0] is c for c in inside):
            self.s.host_work = True  # later values cannot go with that gate: a new one
    def _tf(self, stmt: gast.stmt) -> None:
        s = self.s
        # a name the statement binds on some paths only keeps its value from before on the
        # others (`if flag: z = t` after the host's `z = scale`): the TF part needs it too
        # (outside the loops the TF part follows, for a name bound before it: inside one,
        # a name an earlier iteration bound may be unbound on the host in the first)
        # On the paths that do not bind it the host gets the name back from the TF part: a
        # Python number sent in comes back as that Python number (tfprog/hostvalue.py); a
        # NumPy value would come back a tensor (seed 14522: eager printed `z 3.0`, gpe a
        # tf.Tensor), so the TF part gives none back (tfprog/part.py: _check_returnable)
        # and that variant runs eagerly. An object, or a value a profile call saw cannot
        # cross, is not sent (that variant is not built: it runs eagerly, as before).
        kept = {n for n in anno.get(stmt, Key.KEEPS, frozenset()) & self._read_later(stmt)
                if not self.loops and n in s.side and self._may_cross(n)}
        needed = self._sends(anno.get(stmt, Key.READS) | kept, stmt)
        arguments = [n for n in needed if self._unchanged_tensor_argument(n)]
        if arguments:  # known when the call starts: sent then, with their exact shapes
            self.entry.extend(n for n in arguments if n not in self.entry)
            needed = [n for n in needed if n not in arguments]
        late = s.late(needed)
        if needed and not late:
            self._send_earlier(needed)
        gate_here = late and (needed or anno.get(stmt, Key.EFFECT) or s.state_touched)
        if gate_here:
            if _inside_nested_with(self.parsed.node, stmt):
                raise Refusal("unsupported-order",
                              "a host statement inside nested `with` blocks precedes TF "
                              "work that must wait for it",
                              "move the host work out of the inner block",
                              self.parsed.filename, stmt.lineno)
            self._set_gate(stmt, needed)
        s.on_tf.update(needed)
        s.tf_since_check = True
        self._define(stmt, _TF)

    def _set_gate(self, stmt: gast.stmt, names: list[str]) -> None:
        s = self.s
        anno.set(stmt, Key.GATE, tuple(names))
        self._set_rescue(stmt, Key.RESCUE)
        s.host_work = s.state_touched = False
        s.host_defs = set()
        s.gate = (stmt, Key.GATE)

    def _set_rescue(self, stmt: gast.stmt, key: Key) -> None:
        s = self.s
        anno.set(stmt, key, tuple(sorted(
            n for n in s.on_tf - s.on_host if n in self._read_later(stmt)
            and s.side.get(n) == _TF)))

    def _read_later(self, stmt: gast.stmt) -> set[str]:
        """Names read from `stmt`'s line on, or anywhere in a loop around it."""
        read = {n for line, n in self.loads if line >= stmt.lineno}
        for loop in self.loops:
            read |= {n.id for n in scope.reads(loop)}
        return read

    def _may_cross(self, name: str) -> bool:
        """Whether every definition of `name` that may reach here gives a TF value, a Python
        number or plain data: a value that may cross into the TF part (an object would
        only cost profile calls to find it cannot: host/variants/builder.py, Unsendable)."""
        if name in self.facts.host_only:
            return False
        defs = self.s.defs.get(name)
        if defs == ():
            fact = self.facts.args.get(name)
            return fact is not None and fact.kind in _MAY_CROSS
        return bool(defs) and all(
            isinstance(d, gast.Assign) and anno.get(d.value, Key.KIND) in _MAY_CROSS
            for d in defs)

    def _unchanged_tensor_argument(self, name: str) -> bool:
        fact = self.facts.args.get(name)
        return (fact is not None and fact.kind == Kind.TENSOR and fact.python_type == "Tensor"
                and self.s.defs.get(name) == ())

    def _send_earlier(self, names: list[str]) -> None:
        """No host work since the TF part last waited: the values go with that wait (the
        call's entry, or the last gate)."""
        if self.s.gate is None:
            self.entry.extend(n for n in names if n not in self.entry)
        else:
            stmt, key = self.s.gate
            sent = anno.get(stmt, key, ())
            anno.set(stmt, key, sent + tuple(n for n in names if n not in sent))

    def _sends(self, names, stmt: gast.stmt) -> list[str]:
        """The names among `names` the host must send for the TF part to read them (a value
        only the TF part computed, on a path the TF part does not carry, comes to the host
        first)."""
        needed = [n for n in sorted(names) if self._needs_send(n)]
        self._to_host([n for n in needed if n not in self.s.on_host], stmt)
        return needed

    def _needs_send(self, name: str) -> bool:
        s = self.s
        if name in s.on_tf:
            return False
        if name in s.side:
            return s.side[name] != _TF
        obj = self.parsed.lookup(name)  # a global or closure name
        if name in anno.get(self.parsed.node, Key.GLOBALS, frozenset()):
            return False  # a number the TF part reads when traced (folded, guarded)
        return isinstance(obj, (bool, int, float)) or (
            obj is not MISSING and self.facts.classify(obj) == Kind.HOST_DATA
            and not isinstance(obj, (str, type(None))))

    def _host(self, stmt: gast.stmt) -> None:
        self._host_order(stmt)
        # a name the statement binds on some paths only keeps its value from before on the
        # others: the host must hold that value too (`if c: z = 1.0` after TF's `z = t`)
        kept = anno.get(stmt, Key.KEEPS, frozenset()) & self._read_later(stmt)
        if isinstance(stmt, (gast.Return, gast.Raise)):
            kept |= set(self.escaping)
        self._to_host(sorted(anno.get(stmt, Key.READS) | kept), stmt)
        if not _trivial(stmt):
            self.s.host_work = True
        self.s.host_defs.update(anno.get(stmt, Key.WRITES, ()))
        self._define(stmt, _HOST)

    def _host_order(self, stmt: gast.stmt) -> None:
        """Barrier and check before a host statement (see the module docstring)."""
        s = self.s
        if anno.get(stmt, Key.SYNC):
            anno.set(stmt, Key.BARRIER, True)
            s.state_touched = True
        elif anno.get(stmt, Key.EXITS):
            s.state_touched = True  # TF work after it runs only if the host gets there
        elif s.tf_since_check and not _trivial(stmt):
            anno.set(stmt, Key.CHECK, True)
        if anno.get(stmt, Key.NESTED):
            # the callee may run eagerly (another variant, its entry does not fit), or its
            # host part touch TF state after its own TF part is done: either way the TF
            # work after the call must not run before the host is back from it
            s.state_touched = True
        if not _trivial(stmt):
            s.tf_since_check = False

    def _to_host(self, names, stmt: gast.stmt) -> None:
        """The host reads `names` at `stmt`: each TF statement that may have defined one the
        host does not hold sends it to the host right after it runs."""
        s = self.s
        for name in names:
            if name in s.on_host:
                continue
            # a statement the TF part follows defines it only as a value it carries out (a
            # name the host rebinds inside is the host's: seed 41876, `COUNT += 1` in a
            # tensor `while`, got the TF part's trace-time COUNT back after the loop)
            definers = [d for d in s.defs.get(name, ()) if d is not None and (
                anno.get(d, Key.PLACE) == Place.TF or anno.get(d, Key.MIRROR)
                and name in anno.get(d, Key.CARRIED, ()))]
            for definer in definers:
                if isinstance(definer, gast.With):  # `with tf.GradientTape() as tape`
                    what = spell(name, temporaries(self.parsed.node))
                    raise Refusal("unsupported-order", f"{what} exists in the TF part only "
                                  "(a TF `with` binds it) and is read on the host", "",
                                  self.parsed.filename, stmt.lineno)
                if isinstance(definer, gast.For) and _bound_by_loop(definer, name):
                    what = spell(name, temporaries(self.parsed.node))
                    raise Refusal("unsupported-order", f"{what} is set by a loop the TF part "
                                  "unrolls, and read on the host after it", "",
                                  self.parsed.filename, stmt.lineno)
                outputs = anno.get(definer, Key.OUTPUTS, ())
                if name not in outputs:
                    anno.set(definer, Key.OUTPUTS, outputs + (name,))
            if definers:
                s.on_host.add(name)

    def _define(self, stmt: gast.stmt, side: str) -> None:
        s = self.s
        for name in anno.get(stmt, Key.WRITES, ()):
            s.side[name], s.defs[name] = side, (stmt,)
            s.on_tf.discard(name)
            s.on_host.discard(name)
            if side in (_TF, _BOTH):
                s.on_tf.add(name)
            if side in (_HOST, _BOTH):
                s.on_host.add(name)

    # statements the TF part follows ------------------------------------------------
    def _mirror(self, stmt: gast.stmt) -> None:
        """Before it: the host sends what the TF part reads inside and does not compute
        there (and the starting values of what it rebinds). Inside: each block starts after
        a host decision. After it: a value bound by TF work inside is where the TF part left
        it if it existed before (a loop variable or branch output), else the host has it."""
        s = self.s
        inner = list(mirrored_statements(stmt))
        tf_stmts = [c for c in inner if anno.get(c, Key.PLACE) == Place.TF]
        tf_writes = {n for c in tf_stmts for n in anno.get(c, Key.WRITES, ())}
        host_writes = {n for c in inner if anno.get(c, Key.PLACE) != Place.TF
                       and not anno.get(c, Key.MIRROR) for n in anno.get(c, Key.WRITES, ())}
        host_writes |= loop_targets([stmt] + inner)
        tf_reads = {n for c in tf_stmts for n in anno.get(c, Key.READS, ())}
        self._host_order(stmt)
        # a name the host rebinds or mutates inside, from a value it reads there (`y[0] =
        # y[0] * 2`, `n = n + 1`): its value from before the statement comes to the host
        host_reads = {n for c in inner if anno.get(c, Key.PLACE) != Place.TF
                      and not anno.get(c, Key.MIRROR) for n in anno.get(c, Key.READS, ())}
        self._to_host(sorted(host_writes & host_reads), stmt)
        carried = tuple(sorted(n for n in tf_writes if _carries(stmt, s.side.get(n, _LOST))))
        send = self._sends(set(carried) | (tf_reads - tf_writes - host_writes), stmt)
        if send and s.late(send):
            self._set_gate(stmt, send)
        elif send:
            self._send_earlier(send)
        s.on_tf.update(send)
        anno.set(stmt, Key.CARRIED, carried)
        anno.set(stmt, Key.KEPT, tuple(n for n in carried if n in s.on_host))
        header_reads = _header_reads(stmt)
        if isinstance(stmt, gast.If):
            self._to_host(sorted(header_reads), stmt)
            self._branches(stmt, carried, host_writes)
        else:
            if isinstance(stmt, gast.For):
                self._to_host(sorted(header_reads), stmt)
            self._rebind(stmt, tf_writes, host_writes, carried, tf_stmts)
            if isinstance(stmt, gast.While):
                self._to_host(sorted(header_reads), stmt)
                _header_after_effects(stmt, tf_stmts, self.parsed.filename)
            # the TF part starts an iteration when the host sends its flag, with the values
            # the TF work before any host work in the body needs
            anno.set(stmt, Key.EACH, ())
            touched = self.s.state_touched
            self.s.host_work = self.s.state_touched = False
            self.s.host_defs = set()
            self.s.gate = (stmt, Key.EACH)
            self.loops.append(stmt)
            self._set_rescue(stmt, Key.RESCUE_EACH)  # held when an iteration starts
            self.block(stmt.body)
            self.loops.pop()
            _check_after_back_edge(stmt.body, self.s.tf_since_check)
            touched = self.s.state_touched or touched
            self._rebind(stmt, tf_writes, host_writes, carried, tf_stmts)
            self.s.state_touched = touched
        for name in carried:  # the host reads these after it from the TF part's result
            self.s.defs[name] = (stmt,)
        self._rebind_lost(tf_writes, carried)
        self.s.host_work = True
        self.s.tf_since_check = self.s.tf_since_check or bool(tf_stmts)

    def _branches(self, stmt: gast.If, carried: tuple[str, ...], host_writes: set) -> None:
        """The branches of a MIRROR `if`, each walked from the state before it; after it,
        their states merged, with the carried values where the TF part left them. A name
        the host rebinds in a branch and sends to a segment there: that copy was the
        segment's own; after the `if` the TF part has it only if carried (seed 34854)."""
        before, ends = self.s.copy(), []
        for branch in (stmt.body, stmt.orelse):
            self.s = before.copy()
            self._enter_block()
            self.block(branch)
            ends.append(self.s)
        self.s = _merge(ends)
        self.s.on_tf -= host_writes - set(carried)
        for name in carried:
            self.s.side[name] = _TF
            self.s.on_tf.add(name)

    def _enter_block(self) -> None:
        """A block the TF part enters once the host has decided to (host work came first)."""
        self.s.host_work, self.s.state_touched = True, False

    def _rebind(self, stmt, tf_writes, host_writes, carried, tf_stmts) -> None:
        """Where the names a loop rebinds are at the start of an iteration, and after it:
        from before the loop or from the end of an iteration."""
        s = self.s
        for name in host_writes:
            s.side[name], s.defs[name] = _HOST, s.defs.get(name, ()) + (stmt,)
            s.on_host.add(name)
            s.on_tf.discard(name)
        for name in tf_writes:
            body_defs = tuple(c for c in tf_stmts if name in anno.get(c, Key.WRITES, ()))
            s.defs[name] = tuple(dict.fromkeys(s.defs.get(name, ()) + body_defs))
            s.side[name] = _TF if name in carried else _LOST
            s.on_host.discard(name)
            (s.on_tf.add if name in carried else s.on_tf.discard)(name)

    def _rebind_lost(self, tf_writes, carried) -> None:
        for name in tf_writes - set(carried):
            self.s.side[name] = _LOST
            self.s.on_tf.discard(name)


def _check_after_back_edge(body: list[gast.stmt], tf_at_end: bool) -> None:
    """TF work ends a loop body with no host statement after it (`tf_at_end`): in the next
    iteration the body's first host statement comes after it, and waits there for it as
    after TF work in a straight line (`tf.print` then `print`; tfprog/iterations.py)."""
    for stmt in flat_statements(body) if tf_at_end else ():
        if anno.get(stmt, Key.MIRROR) or anno.get(stmt, Key.PLACE) == Place.HOST and \
                not _trivial(stmt):
            if not (anno.get(stmt, Key.BARRIER) or anno.get(stmt, Key.EXITS)):
                anno.set(stmt, Key.CHECK, True)
            return


def _header_reads(stmt: gast.stmt) -> set[str]:
    """The names a MIRROR statement's header (its test or iterable) reads."""
    header = stmt.test if isinstance(stmt, (gast.If, gast.While)) else stmt.iter
    return {n.id for n in scope.walk(header) if isinstance(n, gast.Name)
            and isinstance(n.ctx, gast.Load)}


def _merge(ends: list[_State]) -> _State:
    """The state after an `if` whose branches ended in `ends` (carried names are set by
    the caller)."""
    out = _State()
    for name in set().union(*(e.side for e in ends)):
        sides = {e.side.get(name, _LOST) for e in ends}
        out.side[name] = sides.pop() if len(sides) == 1 else _LOST
        out.defs[name] = tuple(dict.fromkeys(d for e in ends for d in e.defs.get(name, ())))
    out.on_tf = set.intersection(*(e.on_tf for e in ends))
    out.on_host = set.intersection(*(e.on_host for e in ends))
    out.host_work = True
    out.host_defs = set().union(*(e.host_defs for e in ends))
    out.state_touched = any(e.state_touched for e in ends)
    out.tf_since_check = any(e.tf_since_check for e in ends)
    return out


def _carries(stmt: gast.stmt, side: str) -> bool:
    """A name TF work inside `stmt` rebinds is carried by the TF part through it (a loop
    variable, a branch output) when it exists before it; for an `if`, only when its value
    there is the TF part's: a value of the host's (a Python float or int) rebound in one
    branch stays the host's, and a Python value, when the other branch is taken (the host
    receives the TF value inside the branch that computed it)."""
    if isinstance(stmt, gast.If):
        return side == _TF
    return side != _LOST


def _bound_by_loop(loop: gast.For, name: str) -> bool:
    """`name` holds a Python value while the TF part is built (a loop counter, or a value
    computed from counters), not a tensor the host could receive."""
    return any(isinstance(n, gast.Name) and n.id == name and isinstance(n.ctx, gast.Store)
               and anno.get(n, Key.KIND) not in TF_KINDS for n in nodes.walk(loop))


def _trivial(stmt: gast.stmt) -> bool:
    """Host statements that cannot fail or be observed: `a = b`, `pass`."""
    return isinstance(stmt, gast.Pass) or (
        isinstance(stmt, gast.Assign) and isinstance(stmt.value, (gast.Name, gast.Constant))
        and all(isinstance(t, gast.Name) for t in stmt.targets))


def _inside_nested_with(fn: gast.FunctionDef, target: gast.stmt) -> bool:
    """`target` is inside a TF `with` block that is itself inside one."""
    return any(target is s for outer in fn.body if isinstance(outer, gast.With)
               for inner in flat_statements(outer.body) if isinstance(inner, gast.With)
               for s in flat_statements(inner.body))

