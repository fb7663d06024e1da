"""The user's words for the names the slicer makes up.

Hoisting (slicer/hoist.py) moves sub-expressions into temporaries (`_gpe_h0 =
model.trainable_variables`, `_gpe_t1 = tf.reduce_sum(x)`); messages about a crossing,
a fallback or a plan name those. `temporaries(fn)` maps each temporary of an analysed
function to the source of the expression it holds (temporaries inside it spelled out
too); `user_terms(text, temps)` rewrites a message or a line of `gpe explain` with them.
Needs hoist.transform to have run.
"""
from __future__ import annotations

import re
from typing import Mapping

import gast

from . import nodes
from .templates import source_of

TEMPORARY = re.compile(r"\b_gpe_[htn]\d+\b")  # hoist.py, unnest.py
SPLICED = re.compile(r"\b([A-Za-z_]\w*?)_gpe_s\d+\b")  # a spliced callee's local (splice.py)
# a variable the host reads, read in the TF part (hoist._read_value): `v.read_value()`
READ_VARIABLE = re.compile(r"_gpe_rt\.read_variable\(([^()]*)\)")


def temporaries(fn: gast.FunctionDef) -> dict[str, str]:
    temps: dict[str, str] = {}
    for node in nodes.walk(fn):
        if isinstance(node, gast.Assign) and len(node.targets) == 1 and isinstance(
                node.targets[0], gast.Name) and TEMPORARY.fullmatch(node.targets[0].id):
            temps[node.targets[0].id] = source_of(node.value)
    for name in list(temps):  # hoisted before its user: spell out what it reads
        temps[name] = user_terms(temps[name], temps, quote=False)
    return temps


def user_terms(text: str, temps: Mapping[str, str], quote: bool = True) -> str:
    """`text` with every temporary replaced by its expression (in backticks: `quote`),
    and a spliced callee's local by its own name (`fn_gpe_s9`: `fn`). A line that only
    binds one (`_gpe_h0 = expr`) reads as the expression."""
    text = READ_VARIABLE.sub(r"\1.read_value()", text).replace(
        "_gpe_rt.read_variable", "read_value")
    bound = re.match(r"\s*(_gpe_[htn]\d+) = ", text)
    if bound and bound.group(1) in temps:
        text = text[bound.end():]
    for _ in range(8):  # temporaries that read temporaries
        new = TEMPORARY.sub(lambda m: _spelled(m.group(0), temps, quote), text)
        if new == text:
            break
        text = new
    return SPLICED.sub(r"\1", text)  # (as the callee names it)


def spell(name: str, temps: Mapping[str, str]) -> str:
    """A name for a message: the user's own (`loss`), or what a temporary holds."""
    return f"`{temps.get(name, name)}`"


def _spelled(name: str, temps: Mapping[str, str], quote: bool) -> str:
    if name not in temps:
        return name
    return f"`{temps[name]}`" if quote else f"({temps[name]})"
