"""Host temporaries hoisted out of a loop whose arithmetic may raise (Key.RAISES: d2l's
Adam computes `1 - beta1 ** hyperparams['t']` in its loop over the parameters).

The host computes such a temporary before the loop, under a `try` (`attempt`): a failure
gives a value no channel takes (host/variants/stubs.py Raised), so the gate that sends it
hands the call back to the host there, and the host's copy of the loop, like the profile
program's, computes the expression again where eager does (`recomputed`): the exception
comes from the same statement, after the same updates.
"""
from __future__ import annotations

import copy

import gast

from . import anno, nodes, templates
from .anno import Key
from .errors import Refusal


def attempted(stmt: gast.stmt, recompute: dict, handed_back: bool, filename: str
              ) -> gast.stmt:
    """A host statement as the host program runs it: a hoisted temporary that may raise
    (Key.RAISES) under a `try`, its expression kept in `recompute`, where the call can be
    handed back to the host (`handed_back`: a plan that is rescuable there)."""
    if not anno.get(stmt, Key.RAISES):
        return stmt
    if not handed_back:
        raise Refusal("unsupported-order", "a loop whose invariant arithmetic may raise, "
                      "where the call cannot be handed back to the host",
                      "compute it before the loop", filename, stmt.lineno)
    recompute[stmt.targets[0].id] = stmt.value
    return attempt(stmt)


def attempt(stmt: gast.Assign) -> gast.stmt:
    """`n = expr` as `try: n = expr / except Exception as e: n = _gpe_rt.raised(e)`."""
    (attempt,) = templates.replace(
        "try:\n    __s__\nexcept Exception as _gpe_e:\n    n = _gpe_rt.raised(_gpe_e)",
        __s__=[stmt], n=templates.name(stmt.targets[0].id, store=True))
    return attempt


def recomputed(stmt: gast.stmt, raising: dict[str, gast.expr]) -> gast.stmt:
    """`stmt` reading each temporary of `raising` as the expression it holds."""
    if not raising or not any(isinstance(n, gast.Name) and n.id in raising
                              for n in nodes.walk(stmt)):
        return stmt

    class Recompute(gast.NodeTransformer):
        def visit_Name(self, node):
            if node.id in raising and isinstance(node.ctx, gast.Load):
                return copy.deepcopy(raising[node.id])
            return node
    return Recompute().visit(copy.deepcopy(stmt))
