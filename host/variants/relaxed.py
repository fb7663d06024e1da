"""A variant for any size of an argument is kept only where it computes what the call's
own sizes would have it compute.

An argument that keeps changing shape is relaxed to any size in the dimensions that changed
(host/speculation: `Assumptions.relax`), and its variant is traced with those dimensions
unknown. Library code that reads the static shape can then take another path than eager,
which always knows the size: Keras' convolution, not knowing its input's channels, runs
the op compiled with XLA, whose results differ from those of the Conv2D kernels eager runs
(d2l's ResNet under `gpe run`: its Residual blocks of 3 to 128 channels share one `call`;
the validation loss came out an ulp off eager's). `differs` traces the part once more for
the sizes of the profile call it was built from and compares the contractions,
convolutions and XLA code the two traces run (tfprog/arithmetic.py); where they differ the
builder makes a variant per shape instead, as where a relaxed part cannot be traced at all.
The second trace is made only when a relaxed variant is built.
"""
from __future__ import annotations

import dataclasses

from ..speculation.speculation import Assumptions
from ..speculation.specs import channel_specs
from .variant import Crossings, Variant, traced
from ...slicer import SlicePlan
from ...slicer.plan import ChannelKind
from ...tfprog.arithmetic import differences
from ...tfprog.channels import Unsendable
from ...tfprog.part import PartError


def differs(variant: Variant, plan: SlicePlan, values: dict, runs: list, crossings: Crossings,
            assumed: Assumptions, speculate: bool) -> str:
    """Why `variant`, built for `crossings` with some of its arguments relaxed, computes
    otherwise than for the profile call's own sizes; "" where it does not (or where no
    argument of this call is relaxed)."""
    relaxed = [name for name, mask in assumed.relaxed.items() if name in values and any(mask)]
    if not relaxed:
        return ""
    exact_specs, _ = channel_specs(plan, runs, {}, speculate)
    specs = dict(crossings.specs)
    for channel in plan.channels:
        if channel.kind == ChannelKind.ENTRY and channel.index in exact_specs:
            specs[channel.index] = exact_specs[channel.index]
    if specs == crossings.specs:
        return ""
    exact = traced(variant, values, dataclasses.replace(crossings, specs=specs))
    found = differences(variant.part.function, exact.function)
    if not found:
        return ""
    return (f"traced for any size of {', '.join(relaxed)}, the TF part computes otherwise "
            f"than for the sizes of the call ({found}): library code chose its ops by the "
            "static shape")


def loops_vary(plan: SlicePlan, runs: list, relaxed: dict) -> bool:
    """Whether a loop of `plan` takes its values any size in some dimension (they varied
    in the profile `runs`): where its part then fails to trace, the builder tries the
    largest size seen (Assumptions.exact_loops), the others handed back to the host."""
    try:
        return channel_specs(plan, runs, relaxed)[0] != \
            channel_specs(plan, runs, relaxed, exact_loops=True)[0]
    except (PartError, Unsendable):  # (raised again where the variant is built)
        return False
