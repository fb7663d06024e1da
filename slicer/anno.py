"""Analysis results attached to AST nodes.

Every analysis stores what it finds on the nodes it analysed, under a key of `Key`; the
key's value documents what is stored. Nothing else passes facts around between passes.
"""
from __future__ import annotations

import enum
from typing import Any

_FIELD = "_gpe_anno"


class Key(enum.Enum):
    KIND = "facts.Kind of an expression's value (set by kinds.resolve)"
    CONSTANT = ("bool: an expression whose value is fixed for the call (literals, folded "
                "arguments, loop counters of unrolled loops, pure builtins of those): either "
                "side may compute it (set by kinds.resolve)")
    READS = ("frozenset of names whose value from before a statement it may read (set by "
             "activity.resolve)")
    WRITES = "frozenset of names a statement binds (set by activity.resolve)"
    KEEPS = ("frozenset of names a compound statement binds on some paths only: their values "
             "from before it may survive it (set by activity.resolve)")
    PLACE = "placement.Place of a statement (set by placement.resolve)"
    REASON = "str: why the statement has its place (set by placement.resolve)"
    EFFECT = "bool: the statement changes TF state (set by placement.resolve)"
    SYNC = "bool: a host statement that touches TF state directly (set by placement.resolve)"
    PATH = ("str: a dotted attribute chain (`self.w`, `trainer.model`) resolved when slicing "
            "to a TF object; the TF part reads it when traced, guarded by identity")
    ITEM = ("bool on `d['lr']`: an item of a dict argument of Python numbers, read before "
            "anything in the function may change the dict; the TF part reads it from the "
            "entry value (slicer/chains.fixed_items)")
    SPLICE = ("(function, a method?, gpe slices it?) on a call of the user's own function "
              "the kinds pass could not judge all TF work: the call is spliced "
              "(slicer/splice.py)")
    ARITY = ("int on a call spreading a tuple into a layer whose `call` takes *args: how "
             "many positional parameters it names (slicer/arity.py)")
    CALLEE = ("bool: a call of a user function whose body is all TF work; the TF part calls "
              "the callee's own FunctionDef")
    CALLEE_READS = ("tuple of (dotted path, bool) on a CALLEE call: what the callee reads from "
                    "the objects passed to it (`model.w1`; True: a Python number, `hp.rate`), "
                    "as the caller names them; captured and guarded as the caller's PATHs")
    SENT = ("str on an attribute chain holding a Python number that keeps changing (in "
            "facts.dynamic_paths), and on the host temporary hoisting made of it: its dotted "
            "path; the number is sent to the TF part, not folded")
    CALLEE_SHAPES = ("tuple of (index among the call's arguments, dims) on a CALLEE call: the "
                     "static dimensions the callee reads of what it is given (slicer/shapes.py); "
                     "the TF part checks, when traced, that it knows them")
    CALLEE_TESTS = ("tuple of (argument index, dotted path, parameter, test source) on a "
                    "CALLEE call: `if` tests of the callee on a Python number the caller "
                    "sends (slicer/speculated.py); the call key holds their outcomes")
    WHY_HOST = ("str on a call's function: why calling it is host work, where the caller "
                "knows (facts.why_host)")
    UNROLLED = ("tuple of attribute names on a CALLEE call: a recursion over a tree of data "
                "objects, the attributes its counters change; the TF part runs its TF half "
                "(unrolled for the tree's shape), the host its host half (recursion.py)")
    OUTLINE = ("outline.Outline on a `for` holding a tape whose body can run as a function of "
               "its own (set by outline.mark): a profile call runs it so, sliced, once the loop "
               "has run a few passes (partition.py _observed, host/variants/outlined.py)")
    RAISES = ("bool on a host temporary's assignment hoisted out of a loop (hoist.py "
              "_invariant_reads) whose arithmetic may raise (`1 - beta1 ** hp['t']`): the host "
              "computes it under a `try`; a failure sends a value no channel takes, so the call "
              "is rescued there, and the host's copy of the loop computes the expression again "
              "where eager does (partition.py)")
    FOLDED = ("bool on an `if` (or `a if t else b`) test fixed for the call whose value the "
              "slicer knows (`isinstance(loss, Loss)` on an object argument the call key "
              "holds, `not self.built`): the branch it takes replaces the `if` on both sides "
              "(hoist.py); on the function, the tests it folded away (what they read is "
              "still guarded: the plan's folds)")
    GLOBALS = ("frozenset on the FunctionDef: the global (or closure) Python numbers its TF "
               "part reads when traced, folded and guarded by value (kinds.py): not sent")
    INLINE = ("True on a CALLEE call of a callee that returns TF objects themselves "
              "(variables, lists of them: `model.params()`): the TF part traces it inline, "
              "not as its own FunctionDef, so that it gets the objects")
    ORIGIN = "int: source line (in the user's file) the statement was derived from"
    ENTRY = "tuple of names sent host->TF when a call starts (on the FunctionDef; crossings)"
    OUTPUTS = "tuple of names the TF part sends to the host right after this statement"
    GATE = ("tuple of names: before this TF statement the TF part waits for the host to get "
            "here (and receives these values); absent when no gate is needed")
    RESCUE = ("tuple of names on a statement with a GATE: the TF values live there, which the "
              "TF part hands to the host if a value sent at the gate no longer fits (the host "
              "then finishes the call eagerly)")
    RESCUE_EACH = ("tuple of names on a MIRROR loop: the TF values live when an iteration starts, "
                   "handed to the host if the values sent with its flag no longer fit")
    BARRIER = "bool: before this host statement the host waits for the TF part's effects"
    CHECK = ("bool: before this host statement the host waits for the TF work before it if "
             "that work can fail at run time (known once the TF part is built)")
    EXITS = "bool: a host statement that may return from the function (e.g. an `if` with `return`)"
    ROWS = ("bool on a Name in the header of a `for` the TF part unrolls: a tensor iterated "
            "row by row (the TF part unstacks it; eagerly Python slices it)")
    ITERATED = ("str on a `for` holding TF ops over an object reached by a name or a chain (a "
                "user's data loader): its dotted path; the profile program records what each "
                "iteration binds (Facts.iterables)")
    NESTED = ("bool: a host statement that calls a function gpe slices too: the TF part "
              "follows the call, running that function's TF part when the host says so")
    MIRROR = ("bool: a `for`, `while` or `if` the host decides whose body holds TF work: the TF "
              "part follows it (a while_loop told each iteration, a cond told the branch)")
    EACH = ("tuple of names on a MIRROR loop: host values sent with each iteration's flag (what "
            "the TF part reads in the body before any host work there)")
    CARRIED = ("tuple of names on a MIRROR statement: TF values it rebinds that exist before "
               "it (the TF part's loop variables, or the outputs of its branches)")
    KEPT = ("tuple of names on a MIRROR statement: carried names the host has before it (a "
            "Python number, say): after it the host keeps its own value unless TF work "
            "inside rebound the name last (eagerly a zero-trip loop leaves `s = 0` an int)")
    BRANCH = ("bool on a generated function: a branch of an `if` the TF part follows (a "
              "switch traces each branch in turn: what one rebinds stays its own)")


def get(node: Any, key: Key, default: Any = None) -> Any:
    return getattr(node, _FIELD, {}).get(key, default)


def has(node: Any, key: Key) -> bool:
    return key in getattr(node, _FIELD, {})


def set(node: Any, key: Key, value: Any) -> None:  # noqa: A001 - mirrors get/has
    annos = getattr(node, _FIELD, None)
    if annos is None:
        annos = {}
        setattr(node, _FIELD, annos)
    annos[key] = value
