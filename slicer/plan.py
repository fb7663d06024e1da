"""The slicer's output: a `SlicePlan` (frozen data, no TensorFlow objects)."""
from __future__ import annotations

import ast
import enum
import os
import types
from dataclasses import dataclass, field

import gast

from .words import spell, user_terms


class ChannelKind(enum.Enum):
    ENTRY = "host->TF values sent when a call starts"
    GATE = "host->TF: a bool 'go on' (False cancels the rest of the call) and values"
    OUTPUT = "TF->host: one value, received lazily as a Pending"
    BARRIER = "TF->host: a token sent once the TF part's earlier effects are done"
    LOOP = ("host->TF: an int32 flag before each iteration of a loop the host decides (1: one "
            "more iteration, 0: the loop is over, -1: cancel the rest of the call)")
    BRANCH = ("host->TF: an int32 flag saying which branch of an `if` the host took (1: the "
              "body, 0: the else branch, -1: cancel the rest of the call)")
    RESCUE = ("TF->host: the TF values live at a gate, sent only when a value the host sends "
              "there no longer fits (the host then finishes the call eagerly)")
    CHECK = ("TF->host: a token sent once the TF work before it is done; the host waits for it "
             "only if that work can fail at run time, so errors surface where eager raises")


@dataclass(frozen=True)
class Channel:
    index: int
    kind: ChannelKind
    names: tuple[str, ...]  # values carried, in order (a GATE's flag is not listed)
    lineno: int             # the user's line where the crossing happens
    # a LOOP of a `for` over an object reached by a path (Key.ITERATED): (its dotted path,
    # the loop's target names), where the host can say what iterating it is sure to give
    iterates: tuple[str, tuple[str, ...]] | None = None

    @property
    def to_tf(self) -> bool:
        return self.kind in (ChannelKind.ENTRY, ChannelKind.GATE, ChannelKind.LOOP,
                             ChannelKind.BRANCH)


EAGER_INSIDE = "its TF ops run eagerly"  # a host statement holding TF ops (its reason says)


@dataclass(frozen=True)
class LineReport:
    """One statement of the sliced function, for `gpe explain`."""

    lineno: int
    place: str
    reason: str
    source: str
    crossings: tuple[str, ...] = ()

    @property
    def eager_inside(self) -> bool:
        """A host statement with TF ops inside, which run eagerly there."""
        return EAGER_INSIDE in self.reason


class Program:
    """A generated program: its gast tree (with the user's line numbers), compiled from
    that tree once per file name, and its source text, unparsed only when asked for (a
    message, a log line, a bundle, a comparison of plans). One of `tree` and `text`."""

    __slots__ = ("tree", "_text", "_code")

    def __init__(self, tree: gast.Module | None = None, text: str | None = None):
        self.tree, self._text, self._code = tree, text, {}

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = ast.unparse(gast.gast_to_ast(self.tree))
        return self._text

    def code(self, filename: str) -> types.CodeType:
        code = self._code.get(filename)
        if code is None:
            source = self.text if self.tree is None else ast.fix_missing_locations(
                gast.gast_to_ast(self.tree))
            code = self._code[filename] = compile(source, filename, "exec")
        return code

    def __eq__(self, other) -> bool:
        return self is other or isinstance(other, Program) and self.text == other.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"Program({self.text!r})"


@dataclass(frozen=True)
class SlicePlan:
    name: str
    qualname: str
    filename: str
    lineno: int
    host: Program     # the host program (see slicer/partition.py)
    tf: Program       # the TF program (an empty text: a bundle's plan, whose part is built)
    profile: Program  # the profile program (likewise)
    channels: tuple[Channel, ...]
    sites: tuple[int, ...]          # the channel of each place the host program uses one
    # per site, and last for the call's start: if the host leaves the call there, the
    # channels to drain (TF->host, in order) and the one to cancel (or None)
    routes: tuple[tuple[tuple[int, ...], int | None], ...]
    bound: tuple[str, ...]          # argument names bound into the TF part at trace time
    lines: tuple[LineReport, ...]
    assumptions: tuple[str, ...] = field(default=())
    captures: tuple[str, ...] = ()  # free names the TF part reads (bound at trace time)
    # branches callees take on numbers the host sends: (path, parameter, test source),
    # their outcomes guarded by the call key (slicer/speculated.py)
    tests: tuple[tuple[str, str, str], ...] = ()
    rescuable: bool = False  # the host program holds the TF statements too (RESCUE)
    nested: tuple[int, ...] = ()  # per call of a function gpe slices too: its BRANCH channel
    rescues: tuple[tuple[int, int], ...] = ()  # (gate or loop channel, its RESCUE channel)
    # gates inside a TF `with` block, with the names they get that host code in the block
    # binds: those must be host values (a tensor made by host code there would escape the
    # block's GradientTape)
    with_gates: tuple[tuple[int, tuple[str, ...]], ...] = ()
    # the temporaries hoisting made: (name, the source of the expression it holds)
    temporaries: tuple[tuple[str, str], ...] = ()
    # the dotted paths of the objects loops holding TF work iterate (Key.ITERATED): their
    # profile observations say what iterating them gives (Facts.iterables)
    iterated: tuple[str, ...] = ()
    # the paths of the flags whose `if` the plan took one branch of (hoist._taken): a plan
    # is shared only by calls whose flags have the same values (host/variants/builder.py)
    folds: tuple[str, ...] = ()
    # training loops whose body a profile call runs as a function gpe slices, after a few
    # passes (slicer/outline.py): each an outline.Outline, in the profile program's order
    outlines: tuple = ()

    @property
    def host_source(self) -> str:
        return self.host.text

    @property
    def tf_source(self) -> str:
        return self.tf.text

    @property
    def profile_source(self) -> str:
        return self.profile.text

    @property
    def host_tree(self) -> gast.Module | None:
        """The host program's gast tree with the user's line numbers (None: only text)."""
        return self.host.tree

    def channel(self, index: int) -> Channel:
        return self.channels[index]

    def user_terms(self, text: str, quote: bool = True) -> str:
        """`text` (a message, a line of explain) without the slicer's temporaries."""
        return user_terms(text, dict(self.temporaries), quote)

    def spell(self, name: str) -> str:
        """A crossing's name for a message: `loss`, or `model.variables` for a temporary."""
        return spell(name, dict(self.temporaries))

    @property
    def host_only_work(self) -> bool:
        """No statement runs in the graph, nor a nested call's TF part, nor the body of a
        training loop outlined (its passes run as a function gpe slices)."""
        return not self.outlines and self._no_tf_statement

    @property
    def outlined_only(self) -> bool:
        """Its only TF work is in the bodies of training loops outlined, which run sliced
        in its profile calls (host/variants/outlined.py): a variant would run the loops'
        TF work eagerly, so every call is a profile call."""
        return bool(self.outlines) and self._no_tf_statement

    @property
    def _no_tf_statement(self) -> bool:
        return not self.nested and all(line.place != "TF" for line in self.lines)

    def where(self, lineno: int) -> str:
        """The user's file and line, for messages."""
        return f"{os.path.basename(self.filename)}:{lineno}"

    def made_by(self, name: str) -> str:
        """Why the host statement that made `name` runs on the host, where a callee it calls
        says so (a user layer's `call` with a host statement: `self.add_loss(...)`), followed
        back through the host statements it was computed from (`l2 = l * 2.0` after
        `l = loss_fn(...)`)."""
        names, seen = {name}, set()
        for line in reversed(self.lines):
            try:
                tree = ast.parse(line.source)
            except SyntaxError:
                continue
            if line.place != "host" or id(line) in seen or not any(
                    isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Store)
                    for n in ast.walk(tree)):
                continue
            seen.add(id(line))
            if "may touch TF state; " in line.reason:
                return (f"; `{self.user_terms(line.source, quote=False)}` "
                        f"({self.where(line.lineno)}) runs on the host: "
                        f"{line.reason.split(': ', 1)[-1]}")
            names |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                      and isinstance(n.ctx, ast.Load)}
        return ""
