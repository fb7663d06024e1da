"""Variants built speculating that no call reaches a gate no profile call reached (JANUS).

A function whose profile calls never reach a crossing where the host sends the TF part a
value it computed (a branch never taken, a tensor loop that never iterated, an early
return every time) is built all the same after its profile calls: such a gate gets
`Unreached` specs (host/speculation/speculation.py, tfprog/unreached.py). A call that
gets there is handed over to the host's eager code at that gate, as a value that no longer
fits is (a rescue: stubs.CallContext), which is eager's behaviour from there on; what it
would have sent is recorded (`reached`) as a profile observation, and the variant is built
again with it (Variants.retire). Also here: how profile observations are taken.
"""
from __future__ import annotations

from ..runtime.pending import resolved
from ...slicer import SlicePlan
from ...tfprog.channels import spec_of
from ...tfprog.unreached import Unreached


def handed_over(plan: SlicePlan, part) -> bool:
    """Whether a call that reaches any Unreached gate of `part` can be handed over to the
    host there: the TF part can send the host the values live at each such gate (tensors)."""
    rescues = dict(plan.rescues)
    return all(part.specs.get(rescues[k]) is not None for k, specs in part.specs.items()
               if type(specs) is Unreached and k in rescues)


def unreached_lines(plan: SlicePlan, specs: dict) -> str:
    """The user's lines of the Unreached gates among `specs`, for a log line."""
    return ", ".join(str(c.lineno) for c in plan.channels
                     if type(specs.get(c.index)) is Unreached)


def reached(variant, k: int, values) -> str:
    """A sliced call got to the Unreached gate `k` with `values`: note them as a profile
    call would have (the last profile call's observations with these added), so that the
    variant is built again knowing them; returns the guard failure's text."""
    run = dict(variant.runs[-1]) if variant.runs else {}
    values = [resolved(v) for v in values]  # (a TF value the host got back: a Pending)
    run[k] = [snapshot(v) for v in values]
    run[("kinds", k)] = [{kind(v)} for v in values]
    variant.learned = run
    plan = variant.plan
    channel = plan.channel(k)
    names = ", ".join(plan.spell(n) for n in channel.names)
    return (f"line {channel.lineno} ({names}): no profile call had reached it (built "
            "speculating that no call does)")


def relink(caller, callee) -> None:
    """A call of `caller` calls a function gpe slices whose variant for the call is `callee`,
    not the one its TF part runs there (none: it was not built when the caller was, or
    it was built again since, after a call reached an Unreached gate of it): the caller
    is built again after this call, from its profile runs and one more, to run `callee`
    (until then it runs eagerly when called there). A few times per function at most."""
    if callee.eager_faster or callee.part is None or caller.stale or not caller.runs:
        return
    if sum(caller.owner.cache.learned.values()) < MAX_RELINKS:
        caller.stale, caller.learned = True, dict(caller.runs[-1])


MAX_RELINKS = 8  # builds again after a call reached an Unreached gate, or to relink


def snapshot(value):
    """A crossing value as it is now: a list or dict the function mutates later (`buf.append`)
    is copied, so the profile sees the layout that crossed."""
    if type(value) in (list, tuple):
        return type(value)(snapshot(v) for v in value)
    if type(value) is dict:
        return {k: snapshot(v) for k, v in value.items()}
    return value


def kind(value):
    """What a plain value crossing host->TF is (its spec), to tell a crossing whose values
    change type between the times it is reached (a loop's `scale` a Python float in its
    first iteration, a NumPy float32 after); None for other values."""
    try:
        return spec_of(value) if not isinstance(value, (list, tuple, dict)) else None
    except TypeError:
        return None

