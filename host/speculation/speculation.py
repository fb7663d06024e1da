"""What a sliced function's variants assume, and how each assumption relaxes (JANUS
sections 3-4; DESIGN.md section 5).

`Assumptions` (one per SlicedFunction) holds what the profile calls and the broken guards
have shown: int arguments that keep changing (sent, not folded), tensor arguments that
keep changing shape (relaxed dimensions), Python numbers on objects that keep changing
(sent, not folded), entry values that broke their folded constant, names whose values
cannot cross. It describes a call's arguments for the call key and turns a key that
matched no variant into "expected X, got Y". What the profile observations say a
variant's channels carry is host/speculation/specs.py.
"""
from __future__ import annotations

import dataclasses
import inspect
import logging
from typing import Any

import tensorflow as tf

from ..facts import signature
from ...slicer import SlicePlan
from ...slicer.chains import appended_only
from ...slicer.plan import ChannelKind

log = logging.getLogger("gpe")

FOLDABLE = (bool, int, float)
APPENDED = ("data", "list")  # a list argument the function only appends to, described
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
        self.appended: set[str] = set()          # list arguments only appended to
        self.appended_known = False              # (found at the first call: note_appended)

    def describe(self, values) -> tuple:
        """The arguments' part of the call key (of a list the function only appends to,
        its type: `losses.append(l)` adds a tensor at every call)."""
        relaxed, dynamic, describe = self.relaxed, self.dynamic, signature.describe
        if not relaxed and not dynamic and not self.appended:  # (every call's path)
            return tuple([describe(v) for v in values.values()])
        return tuple([APPENDED if n in self.appended and type(v) is list else
                      describe(v, n in dynamic, relaxed.get(n)) for n, v in values.items()])

    def note_appended(self, fn, values) -> bool:
        """At the first call: the list arguments `fn` only appends to, described by their
        type from now on (a key holding their items changed at every call, and the
        function ran eagerly after the churn bound). True if there are any."""
        if self.appended_known:
            return False
        self.appended_known = True
        self.appended = {n for n in appended_only(fn) if type(values.get(n)) is list}
        return bool(self.appended)

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
    """`described` with each tensor's dimensions left out but its rank, which the slicer
    may fold (`if len(X.shape) == 3:`, slicer/chainkinds.py)."""
    def strip(entry):
        if isinstance(entry, tuple) and entry and entry[0] == "tensor":
            return entry[:2] + (None if entry[2] is None else len(entry[2]),)
        if isinstance(entry, tuple) and entry and entry[0] == "sequence":
            return entry[:2] + (tuple(strip(e) for e in entry[2]),)
        if isinstance(entry, tuple) and entry and entry[0] == "mapping":
            return (entry[0], tuple((k, strip(e)) for k, e in entry[1]))
        return entry
    return tuple(strip(e) for e in described)


# from profile observations to what a variant is built with ----------------------------
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
