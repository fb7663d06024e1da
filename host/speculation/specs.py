"""What the profile calls' observations say a variant carries across (JANUS section 4).

`channel_specs(plan, runs, relaxed)`: the specs and layouts of each host->TF channel from
what crossed in the profile runs: an entry's relaxed dimensions any size, a loop's values
the dimensions every iteration agreed on (or the largest seen: `exact_loops`), a gate's as
they came; a value that cannot cross raises Unsendable, a crossing no run reached
NotObserved (or, speculating, Unreached). `stable_entry_values`: the Python numbers every
run sent the same (folded as constants); `sent_numbers`: those that changed.
"""
from __future__ import annotations

import dataclasses

import tensorflow as tf

from .speculation import FOLDABLE
from ...slicer import SlicePlan
from ...slicer.plan import ChannelKind
from ...tfprog.channels import Structure, Unsendable, flatten, spec_of, width
from ...tfprog.channels import relaxed as relaxed_spec
from ...tfprog.part import PartError
from ...tfprog.unreached import Unreached


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
    if isinstance(value, tf.Variable) or getattr(value, "_keras_mask", None) is not None:
        return False  # (a tensor's Keras mask does not cross with it)
    try:
        spec_of(value)
    except Unsendable:
        return False
    return True
