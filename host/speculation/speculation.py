"""What a sliced function's variants assume, and how each assumption relaxes (JANUS
sections 3-4; DESIGN.md section 5).

`Assumptions` (one per SlicedFunction) holds what the profile calls and the broken guards
have shown: int arguments that keep changing (sent, not folded), tensor arguments that
keep changing shape (relaxed dimensions), Python numbers on objects that keep changing
(sent, not folded), entry values that broke their folded constant, names whose values
cannot cross. It describes a call's arguments for the call key and turns a key that
matched no variant into "expected X, got Y". The functions below turn profile
observations into channel specs and folded constants.
"""
from __future__ import annotations

import dataclasses
import inspect
import logging
from typing import Any

import tensorflow as tf

from ..facts import signature
from ...slicer import SlicePlan
from ...slicer.plan import ChannelKind
from ...tfprog.channels import Structure, Unsendable, flatten, spec_of, width
from ...tfprog.channels import relaxed as relaxed_spec
from ...tfprog.part import PartError
from ...tfprog.unreached import Unreached

log = logging.getLogger("gpe")

FOLDABLE = (bool, int, float)
MAX_INT_VALUES = 4   # values of an int argument folded before it is sent
COUNTER_CALLS = 3    # an int argument new at each of its first this many calls is sent
MAX_PATH_VALUES = 2  # values of a number on an object (a flag, a rate) folded before it is sent
PATH_WINDOW = 8      # ...counted over this many calls
MAX_PATH_VALUES_EVER = 2  # ...and in all: one that changed twice is sent (a rate annealed
# every few dozen steps would otherwise get a variant per value)
MAX_SHAPES = 2       # exact shapes of a tensor argument before its changing dimensions relax
_LIBRARIES = frozenset({"tensorflow", "keras", "tf_keras", "numpy", "gpe"})
MAX_UNFOLDS = 2      # times a folded entry value may change before it is sent


def user_iterable(obj: Any) -> bool:
    """An object of a user's class that defines `__iter__` (a data loader), not a builtin
    container, an array or a TF or Keras object."""
    iterate = getattr(type(obj), "__iter__", None)
    return inspect.isfunction(iterate) and (iterate.__module__ or "").split(".")[0] not in \
        _LIBRARIES



class Assumptions:
    def __init__(self, qualname: str):
        self.qualname = qualname
        self.dynamic: set[str] = set()           # int arguments sent, not folded
        self.int_values: dict[str, set[int]] = {}
        self.int_calls: dict[str, int] = {}      # calls noted (new keys) per int argument
        self.shapes: dict[str, list] = {}        # a tensor argument's shapes seen
        self.relaxed: dict[str, tuple] = {}      # argument -> dimensions any size may take
        self.exact: set[str] = set()             # arguments whose relaxed variant failed
        self.path_values: dict[str, dict] = {}   # values of numbers read by paths: last call
        self.dynamic_paths: set[str] = set()     # ...that change too often to be folded
        self.fold_failures: dict[str, int] = {}  # entry values that broke their constant
        self.unfolded: set[str] = set()          # entry values never folded again
        self.host_only: set[str] = set()         # names seen not to fit a channel
        self.iterables: dict[str, int] = {}      # loops' objects seen to give tensors
        self.not_iterated: set[str] = set()      # loops' objects not speculated on
        self.entry_always = False                # random ops' seeds need an entry
        self.exact_loops = False                 # loops' values at one shape (_agreed)

    def describe(self, values) -> tuple:
        """The arguments' part of the call key."""
        relaxed, dynamic, describe = self.relaxed, self.dynamic, signature.describe
        if not relaxed and not dynamic:  # (every call's path)
            return tuple([describe(v) for v in values.values()])
        return tuple([describe(v, n in dynamic, relaxed.get(n)) for n, v in values.items()])

    def facts(self) -> dict[str, frozenset]:
        """What the slicer is told besides the arguments (see slicer.facts.Facts)."""
        return {"host_only": frozenset(self.host_only),
                "dynamic_paths": frozenset(self.dynamic_paths),
                "entry_always": self.entry_always,
                # sent for good: not fixed for a call (a callee given one is not traced
                # with it as a constant: slicer/callsites.py)
                "host_numbers": frozenset(self.unfolded)}

    def iterables_for(self, objects: dict) -> dict[str, int]:
        """What the slicer is told of what iterating objects gives (Facts.iterables): the
        object arguments that are a user's iterables, speculated to give tensors (-1, until
        a profile call has seen them), and the objects the profile calls saw give tensors."""
        out = {name: -1 for name, obj in objects.items()
               if name not in self.not_iterated and user_iterable(obj)}
        out.update(self.iterables)
        return out

    def plan_state(self) -> tuple:
        """What of these assumptions a plan depends on besides the arguments' kinds."""
        return (frozenset(self.dynamic), frozenset(self.host_only),
                frozenset(self.dynamic_paths), self.entry_always, frozenset(self.unfolded),
                frozenset(self.iterables.items()), frozenset(self.not_iterated))

    def plan_key(self, described: tuple) -> tuple:
        """Where plans for arguments described so (see describe) are cached: calls that
        differ only in tensor shapes, which the slicer does not look at, share them."""
        return (_shape_free(described), frozenset(self.host_only),
                frozenset(self.dynamic_paths), self.entry_always, frozenset(self.unfolded),
                frozenset(self.iterables.items()), frozenset(self.not_iterated))

    # seen while calling ----------------------------------------------------------------
    def note_ints(self, values) -> bool:
        """An int argument folded into the TF part as a constant (a loop count, an index)
        gets a variant per value; once it has taken more than MAX_INT_VALUES values, or a
        new value at each of its first COUNTER_CALLS calls (a step counter: each value a
        variant of its own, never called again), it is sent as a value instead (loops over
        it then run on the host). True if one was just made so."""
        changed = False
        for name, value in values.items():
            if name in self.dynamic:
                continue
            # an int in a dict argument too (d2l's `hyperparams['t']`, a step count):
            # then the dict's ints are all sent
            ints = [(name, value)] if type(value) is int else [
                (f"{name}[{k!r}]", v) for k, v in value.items() if type(v) is int] \
                if type(value) is dict else []
            for counted, number in ints:
                seen = self.int_values.setdefault(counted, set())
                seen.add(number)
                calls = self.int_calls[counted] = self.int_calls.get(counted, 0) + 1
                if len(seen) > MAX_INT_VALUES or len(seen) == calls == COUNTER_CALLS:
                    self.dynamic.add(name)
                    changed = True
                    log.debug("%s: argument %s keeps changing; sent as a value from now on",
                              self.qualname, counted)
                    break
        return changed

    def relax(self, values) -> bool:
        """A tensor argument that keeps changing shape (same rank; a third shape) is
        described with None in the dimensions that changed (JANUS: (4, 8), (3, 8), (5, 8)
        give (?, 8)); True if any was. Two shapes (a smaller last batch) get an exact
        variant each: exact shapes keep every op's checks static, so the host runs ahead."""
        changed = False
        for name, value in values.items():
            if name in self.exact or not (
                    isinstance(value, tf.Tensor) or hasattr(value, "_gpe_pending")):
                continue
            shape = tuple(value.shape)
            seen = self.shapes.setdefault(name, [])
            if shape not in seen:
                seen.append(shape)
            first = seen[0]
            if len(seen) <= MAX_SHAPES or len(first) != len(shape) or first == shape:
                continue
            old = self.relaxed.get(name, (False,) * len(shape))
            mask = tuple(o or any(s[i] != first[i] for s in seen if len(s) == len(first))
                         for i, o in enumerate(old))
            if mask != old:
                self.relaxed[name], changed = mask, True
                log.info("%s: argument %s changed shape; relaxed to any size in dimension(s) "
                         "%s", self.qualname, name,
                         ", ".join(str(i) for i, r in enumerate(mask) if r))
        return changed

    def unrelax(self, values) -> list[str]:
        """A relaxed variant could not be built: those arguments get a variant per shape."""
        relaxed = [n for n in self.relaxed if n in values]
        self.exact.update(relaxed)
        for name in relaxed:
            del self.relaxed[name]
        return relaxed

    def note_path_value(self, path: str, value: tuple, call: int = 0) -> bool:
        """A Python number read by the TF part when built took `value` at the `call`th
        call; True once it has taken more than MAX_PATH_VALUES within PATH_WINDOW calls,
        or MAX_PATH_VALUES_EVER in all (it is sent as a value from then on): a flag
        flipped back and forth keeps its two folded variants; a rate a schedule changes
        (every step in a warm-up, every few dozen steps later) is sent from its third
        value (a callee branching on it: slicer/speculated.py)."""
        seen = self.path_values.setdefault(path, {})
        seen[value] = call
        recent = {v for v, at in seen.items() if at > call - PATH_WINDOW}
        if (len(recent) > MAX_PATH_VALUES or len(seen) > MAX_PATH_VALUES_EVER) and \
                path not in self.dynamic_paths:
            self.dynamic_paths.add(path)
            log.info("%s: %s keeps changing; sent as a value from now on", self.qualname, path)
        return path in self.dynamic_paths

    def unfold(self, name: str) -> None:
        """An entry value folded as a constant changed; after MAX_UNFOLDS it is sent."""
        count = self.fold_failures[name] = self.fold_failures.get(name, 0) + 1
        if count >= MAX_UNFOLDS:
            self.unfolded.add(name)
        log.info("%s: %s changed; slicing again%s", self.qualname, name,
                 " (sent as a value from now on)" if count >= MAX_UNFOLDS else "")

    def miss(self, last: tuple, key: tuple, names: list[str], guards: tuple[str, ...],
             call: int = 0) -> str:
        """Why `key` matched no variant: its first difference from `last` (the key of the
        variant built last), as "expected X, got Y"."""
        for i, (old, new) in enumerate(zip(last, key)):
            if old == new:
                continue
            if i < len(names):
                return f"argument {names[i]}{signature.difference(old, new)}"
            guard = guards[i - len(names)] if i - len(names) < len(guards) else "?"
            if isinstance(old, tuple) and old and old[0] == "tests":  # a callee's branch
                return f"{guard}: expected {old[2]!r}, got {new[2]!r}"
            if isinstance(old, tuple) and isinstance(new, tuple):  # Python numbers
                self.note_path_value(guard, new, call)
                return f"{guard}: expected {old[1]!r}, got {new[1]!r}"
            return f"{guard}: expected the object seen when sliced, got another one"
        return "a new argument signature"


def guard_value(obj) -> Any:
    """A captured object's part of the call key: its identity, for a Python number (read
    by the TF part as a constant) its type and value, for a list its elements' identities.
    On every call's path: an object of a type seen to be guarded by identity is at once."""
    cls = type(obj)
    if cls in BY_IDENTITY:
        return id(obj)
    if cls in FOLDABLE:
        return (type(obj).__name__, obj)
    if inspect.ismethod(obj):  # made anew on each access: its object and function
        return ("method", id(obj.__self__), id(obj.__func__))
    if getattr(type(obj), "_gpe_sliced", False) and hasattr(obj, "__func__"):
        return ("method", id(obj.__self__), id(obj.__func__))  # a sliced method, bound
    if type(obj) in (list, tuple) and len(obj) <= MAX_ITEMS_GUARDED:
        # a list of variables on an object (`model.variables`): what the TF part reads
        # is its elements (the list may be the same object with other contents)
        return Items(tuple(id(v) for v in obj))
    if type(obj) is dict and len(obj) <= MAX_ITEMS_GUARDED:  # a dict of variables: its
        return Items(tuple((k, id(v)) for k, v in obj.items()))  # keys and elements
    if cls not in (list, tuple, dict) and not getattr(cls, "_gpe_sliced", False) and \
            len(BY_IDENTITY) < MAX_TYPES_REMEMBERED:
        BY_IDENTITY.add(cls)  # every object of this type: its identity (see above)
    return id(obj)


MAX_ITEMS_GUARDED = 256
MAX_TYPES_REMEMBERED = 1024
BY_IDENTITY: set = set()  # types whose objects guard_value always gives by identity


@dataclasses.dataclass(frozen=True)
class Items:
    """A captured list's part of the call key: the identities of its elements."""

    ids: tuple


def _shape_free(described: tuple) -> tuple:
    def strip(entry):
        if isinstance(entry, tuple) and entry and entry[0] == "tensor":
            return entry[:2]
        if isinstance(entry, tuple) and entry and entry[0] == "sequence":
            return entry[:2] + (tuple(strip(e) for e in entry[2]),)
        if isinstance(entry, tuple) and entry and entry[0] == "mapping":
            return (entry[0], tuple((k, strip(e)) for k, e in entry[1]))
        return entry
    return tuple(strip(e) for e in described)


# from profile observations to what a variant is built with ----------------------------
class NotObserved(PartError):
    """No profile call has reached a crossing yet: profile more calls."""


def channel_specs(plan: SlicePlan, runs: list[dict[int, list]], relaxed: dict[str, tuple],
                  speculate: bool = False, exact_loops: bool = False) -> tuple[dict, dict]:
    """Channel specs and layouts from what the profile calls saw crossing host->TF (an
    entry value of an argument with relaxed dimensions takes any size there). speculate:
    a gate no profile call reached is built as never reached (Unreached: the host hands
    a call that gets there to its eager code), where `unreachable` allows."""
    specs, layouts = {}, {}
    for channel in plan.channels:
        if not channel.to_tf:
            continue
        # the latest profile call that got there (one may return before a crossing)
        seen = next((run[channel.index] for run in reversed(runs) if channel.index in run),
                    None)
        if seen is None and not channel.names:
            seen = []  # a gate carrying no values (the profile call left before it)
        if seen is None and speculate and unreachable(plan, channel):
            specs[channel.index], layouts[channel.index] = Unreached(), []
            continue
        if seen is None:
            raise NotObserved(f"no profile call reached the crossing at line "
                              f"{channel.lineno}")
        pairs = [flatten(v) for v in seen]
        # a tree of data objects crosses only when the call starts, where its shape is
        # the call key's (mid-call, a shape the channel was not built for could not be
        # handed back to the host inside a tape)
        bad = tuple(name for name, (layout, leaves) in zip(channel.names, pairs)
                    if not all(_sendable(leaf) for leaf in leaves) or (
                        isinstance(layout, Structure) and channel.kind != ChannelKind.ENTRY))
        if bad:
            what = ", ".join(plan.spell(n) for n in bad)
            raise Unsendable(f"{what} ({plan.where(channel.lineno)}) cannot cross into the "
                             "TF part (not a tensor or Python number: TF work that reads it "
                             "runs on the host)", bad)
        if channel.kind != ChannelKind.ENTRY:
            _same_kinds(plan, channel, runs)
        layouts[channel.index] = [layout for layout, _ in pairs]
        found = [spec_of(leaf) for _, leaves in pairs for leaf in leaves]
        if channel.kind == ChannelKind.ENTRY:
            specs[channel.index] = _relax_entry(channel, layouts[channel.index], found, relaxed)
        elif channel.kind == ChannelKind.LOOP and all(len(leaves) == 1 for _, leaves in pairs):
            specs[channel.index] = [_agreed(spec, channel.index, i, runs, exact_loops)
                                    for i, spec in enumerate(found)]
        elif channel.kind == ChannelKind.LOOP:  # `for batch in loader`: a tuple each time
            specs[channel.index] = [s for i, (_, leaves) in enumerate(pairs) for s in
                                    _agreed_leaves([spec_of(v) for v in leaves],
                                                   channel.index, i, runs, exact_loops)]
        else:
            # a gate's values are used as they are (keeping their rank and width)
            gate = channel.kind == ChannelKind.GATE
            specs[channel.index] = [relaxed_spec(s, keep_rank=gate) for s in found]
    return specs, layouts


def unreachable(plan: SlicePlan, channel) -> bool:
    """Whether a variant can be built speculating that no call reaches `channel`: a gate
    outside TF `with` blocks, in a plan whose host program holds the TF statements (a call
    that gets there is finished by the host's eager code; variants.unreached checks that
    the TF part can hand its live values over there)."""
    return plan.rescuable and channel.kind == ChannelKind.GATE and \
        channel.index not in dict(plan.with_gates)


def _agreed(spec, index: int, position: int, runs: list[dict], exact: bool = False):
    """The spec of a value a loop's iterations start with (`for X, y in data`): the
    dimensions every iteration of every profile call agreed on stay known (a Keras model
    or a loop over X's rows needs them when traced); one that varied (a smaller last
    batch) is any size (`exact`: the largest seen, the last batch handed back); values of
    several ranks, any shape. An iteration whose value then does not fit hands the call
    over to the host (a rescue)."""
    seen = [k for run in runs
            for k in run.get(("kinds", index), [()] * (position + 1))[position]]
    shapes = {k.shape if k is not None else None for k in seen}
    if not shapes or None in shapes or len({len(s) for s in shapes}) != 1:
        return relaxed_spec(spec)
    if exact:
        return dataclasses.replace(spec, shape=max(shapes))
    first = next(iter(shapes))
    dims = tuple(d if all(s[j] == d for s in shapes) else None for j, d in enumerate(first))
    return dataclasses.replace(spec, shape=dims)


def leaf_shapes(value) -> tuple | None:
    """The shapes of a tuple or list of tensors a loop's iteration starts with (`batch`
    from a loader), else None."""
    if type(value) not in (tuple, list) or not value or not all(
            isinstance(v, (tf.Tensor, tf.Variable)) for v in value):
        return None
    return tuple(tuple(v.shape) for v in value)


def _agreed_leaves(specs: list, index: int, position: int, runs: list[dict],
                   exact: bool = False) -> list:
    """As _agreed, for a tuple of tensors: each keeps the dimensions every iteration of
    every profile call agreed on, so its rank above all (traced with an unknown rank,
    `tf.matmul` becomes BatchMatMulV2, whose float results differ from MatMul's)."""
    seen = [s for run in runs
            for s in run.get(("shapes", index), [()] * (position + 1))[position]]
    if not seen or None in seen or len({tuple(map(len, s)) for s in seen}) != 1 or \
            len(seen[0]) != len(specs):
        return [relaxed_spec(s) for s in specs]
    if exact:
        return [dataclasses.replace(spec, shape=s) for spec, s in zip(specs, max(seen))]
    return [dataclasses.replace(spec, shape=tuple(
        d if all(s[j][n] == d for s in seen) else None for n, d in enumerate(seen[0][j])))
        for j, spec in enumerate(specs)]


def _same_kinds(plan: SlicePlan, channel, runs: list[dict]) -> None:
    """A value sent mid-call must fit the channel built from the latest one each time: one
    whose type changed between the times the profile calls reached the crossing (in a
    loop, or from call to call) would fail its guard where the host cannot take over.
    The TF work that reads it runs on the host instead."""
    keep_rank = channel.kind == ChannelKind.GATE
    bad = []
    for i, name in enumerate(channel.names):
        kinds = {relaxed_spec(k, keep_rank) if k is not None else None
                 for run in runs for k in run.get(("kinds", channel.index), [()] * (i + 1))[i]}
        if len(kinds) > 1:
            bad.append(name)
    if bad:
        what = ", ".join(plan.spell(n) for n in bad)
        raise Unsendable(f"{what} ({plan.where(channel.lineno)}) crosses into the TF part "
                         "as values of different types (TF work that reads it runs on the "
                         "host)", tuple(bad))


def stable_entry_values(plan: SlicePlan, runs, layouts, unfolded, sibling=()) -> dict:
    """Python numbers sent when the call starts that every profile call saw the same (JANUS:
    a stable value is folded into the graph as a constant, its value guarded):
    {leaf position: (name, index among the entry values, value)}. One profile call cannot
    tell a stable value: nothing is folded then, but what a sibling variant (same plan)
    folded with the same value is folded again."""
    entry = next((c for c in plan.channels if c.kind == ChannelKind.ENTRY), None)
    if entry is None or any(entry.index not in run for run in runs):
        return {}
    folded_before = {(name, value) for name, _, value in sibling}
    if sibling:
        runs = runs[-1:]  # this call's values, checked against the sibling's below
    elif len(runs) < 2:
        return {}
    out, position = {}, 0
    for i, (name, layout) in enumerate(zip(entry.names, layouts[entry.index])):
        if layout is not None:
            position += width(layout)
            continue
        seen = [run[entry.index][i] for run in runs]
        first = seen[0]
        if (name not in unfolded and type(first) in FOLDABLE and first == first
                and all(type(v) is type(first) and v == first for v in seen)
                and (not sibling or (name, first) in folded_before)):
            out[position] = (name, i, first)
        position += 1
    return out


def sent_numbers(plan: SlicePlan, runs) -> set[str]:
    """The entry's Python numbers whose values differed between the profile `runs`."""
    entry = next((c for c in plan.channels if c.kind == ChannelKind.ENTRY), None)
    if entry is None or any(entry.index not in run for run in runs):
        return set()
    out = set()
    for i, name in enumerate(entry.names):
        seen = [run[entry.index][i] for run in runs]
        if type(seen[0]) in FOLDABLE and any(v != seen[0] for v in seen):
            out.add(name)
    return out


def refolded(plan: SlicePlan, values: dict, key: tuple, built: dict) -> dict | None:
    """For a call whose key differs from a variant of the same plan only in the values of
    Python numbers on objects that the TF part folds (a dropout rate a schedule changes
    every few dozen steps), the observations to build its variant from without an eager
    profile call: that variant's last profile call's, with this call's entry values (the
    numbers themselves are read when the new variant is traced, as eager code reads them).
    Values the host sends mid-call are checked against the specs so observed at every send,
    as any variant's are. Else None."""
    count = len(values)
    for other, variant in built.items():
        runs = getattr(variant, "runs", None)
        if variant.plan != plan or not runs or len(other) != len(key) or \
                other[:count] != key[:count] or other == key:
            continue
        if all(old == new or (_number(old) and _number(new))
               for old, new in zip(other[count:], key[count:])):
            run = dict(runs[-1])
            entry = next((c for c in plan.channels if c.kind == ChannelKind.ENTRY), None)
            if entry is not None:
                if any(name not in values for name in entry.names):
                    return None
                run[entry.index] = [values[name] for name in entry.names]
            return run
    return None


def profiled_before(key: tuple, count: int, built: dict) -> bool:
    """A variant was built for these same arguments under another plan (the plan changed
    because a number on an object became sent): one profile call of the new plan is
    enough (its entry values are then sent, not folded)."""
    return any(other[:count] == key[:count] for other in built)


def _number(entry) -> bool:
    """A call key's entry for a Python number a TF part folded (see guard_value)."""
    return isinstance(entry, tuple) and len(entry) == 2 and entry[0] in ("bool", "int",
                                                                         "float")


def _relax_entry(channel, layouts, found, relaxed) -> list:
    out, i = [], 0
    for name, layout in zip(channel.names, layouts):
        n = width(layout)
        for spec in found[i:i + n]:
            mask = relaxed.get(name) if layout is None else None
            if mask is not None and spec.shape is not None and len(mask) == len(spec.shape):
                spec = dataclasses.replace(spec, shape=tuple(
                    None if r else d for d, r in zip(spec.shape, mask)))
            out.append(spec)
        i += n
    return out


def _sendable(value) -> bool:
    """A tf.Variable made or picked by host code is not sent: it would arrive as its
    value, a tensor no tape watches and no `assign` reaches (gradients None, silently
    zero with `unconnected_gradients`); TF work that reads it runs on the host."""
    if isinstance(value, tf.Variable):
        return False
    try:
        spec_of(value)
    except Unsendable:
        return False
    return True
