"""Call sites the kinds pass hands to the callee analysis (slicer/kinds.py, callees.py).

`target(inf, call)`: for a call of a user function, method or callable object, (the
function to analyse, the argument expressions it gets: an object first); `reads(inf,
reads, sites)`: what a callee reads from the objects it was given, as the caller's
dotted paths. `inf` is the kinds pass's inferer (its facts, names, object lookups).
"""
from __future__ import annotations

import copy
import inspect

import gast

from . import anno, namespaces, shapes, splice
from .anno import Key
from .chains import chain_root, dotted, is_static, user_code
from .facts import CALLEE_ARG_KINDS, TF_KINDS, Kind
from .parser import MISSING


def judged(arg_kinds: list[Kind], objects: list) -> bool:
    """Whether a call of a user function may be judged as a callee at all: it is given a
    TF value or an object, or only values a callee can take in the TF part (NumPy data,
    numbers: the classic `linear_regression(X)` on NumPy globals). A call given some other
    host value and neither of the first two stays on the host unjudged."""
    return any(k in TF_KINDS for k in arg_kinds) or any(o is not MISSING for o in objects) \
        or all(k in CALLEE_ARG_KINDS for k in arg_kinds)


def callee_kind(inf, node: gast.Call) -> Kind | None:
    """The kinds pass's kind of a call of a user's function (`inf`: its inferer), or None
    where the call is not a callee: a user function called on TF values or objects whose
    body is all TF work (see callees.py), a user method of an object (`model.encode(x)`), a call of a user's
    object with its own `__call__` (`model(x, rate)`), or a user function passed as an
    argument (`loss(y_pred, y)`: guarded by identity): an object is the callee's
    first argument. What the callee reads from objects it is given becomes the call's
    CALLEE_READS, in the caller's names (captured and guarded by the caller)."""
    found = target(inf, node) if inf.callee is not None else None
    if found is None:
        return None
    fn, sites = found
    sent = [sent_number(inf, a) for a in sites]  # sent, not folded
    arg_kinds = [Kind.PY_SCALAR if path else anno.get(a, Key.KIND)
                 for a, path in zip(sites, sent)]
    objects = [MISSING if path else inf.object_of(a) for a, path in zip(sites, sent)]
    if not judged(arg_kinds, objects):
        return None
    constants = [fixed(inf, a) for a in sites]
    verdict = inf.callee(fn, arg_kinds, inf.facts, objects, constants)
    if verdict is None:
        splice.note(inf, node, fn)  # inside a tape, its statements are spliced
    paths = verdict and reads(inf, verdict.reads, sites)
    if paths is not None and verdict is not None:  # and from its own namespace (guarded
        if any(number and path in inf.facts.dynamic_paths  # unless a number there
               for path, number in verdict.globals) or \
                _changes_numbers(inf, verdict.globals):  # keeps changing: traced stale)
            return None
        paths = paths + verdict.globals
    checks = verdict and tests(node, verdict.tests, sites, sent)
    needs = verdict and shapes.at_call(verdict.shapes, node, sites)
    if paths is None or checks is None or needs is None:
        return None
    anno.set(node, Key.CALLEE_SHAPES, needs)  # (dimensions its trace must know)
    if checks:
        anno.set(node, Key.CALLEE_TESTS, checks)
    if isinstance(node.func, gast.Name) and node.func.id in inf.facts.objects:
        anno.set(node.func, Key.PATH, node.func.id)  # the function passed: its identity
    anno.set(node, Key.CALLEE_READS, paths)
    owner = sites[0] if sites and (sites[0] is node.func or isinstance(
        node.func, gast.Attribute) and sites[0] is node.func.value) else None
    if isinstance(owner, gast.Attribute) and not anno.has(owner, Key.PATH):
        # `self.model.loss(x)` on a user's plain object: the TF part calls the method
        # on the object it captured, guarded by identity (not a host value to send)
        path = path_of(inf, owner)
        if path is not None:
            anno.set(owner, Key.PATH, path)
    if verdict.unrolled is not None:
        anno.set(node, Key.UNROLLED, verdict.unrolled)
    if verdict.inline:
        anno.set(node, Key.INLINE, True)
    return verdict.kind



def target(inf, node: gast.Call) -> tuple | None:
    """(the user's function, the argument expressions it gets) for a call that may be
    a callee (see callee_kind), else None."""
    if any(_spreads_nothing(inf, a) for a in node.args):  # `self.forward(X, *args)`
        node = copy.copy(node)
        node.args = [a for a in node.args if not _spreads_nothing(inf, a)]
    fn = inf.value_of(node.func)
    if anno.get(node.func, Key.KIND) == Kind.SLICED_FN or (
            isinstance(node.func, gast.Name) and node.func.id in inf.facts.objects
            and getattr(type(fn), "_gpe_sliced", False)):  # wrapped by gpe run
        owner = getattr(fn, "__self__", None)
        fn = getattr(getattr(fn, "__func__", fn), "__wrapped__", None)
        held = owner is None and _function_attribute(inf, node.func)
        if owner is not None and isinstance(node.func, gast.Attribute) and \
                inf.object_of(node.func.value) is owner:
            owner = node.func.value
        elif owner is not None or not (is_static(node.func, inf) or held or isinstance(
                node.func, gast.Name) and node.func.id in inf.facts.objects):
            return None
        if held:  # a function the object holds, wrapped by gpe run (see below)
            anno.set(node.func, Key.PATH, dotted(node.func))
    elif inspect.isfunction(fn) and isinstance(node.func, gast.Name) and \
            node.func.id in inf.facts.objects:
        owner = None  # a function passed as an argument
    elif inspect.isfunction(fn) and _function_attribute(inf, node.func):
        owner = None  # `self.forward_fn(X, state)`: a function the object holds
        anno.set(node.func, Key.PATH, dotted(node.func))  # (the key guards which)
    elif inspect.ismethod(fn) and isinstance(node.func, gast.Attribute):
        owner, fn = node.func.value, fn.__func__
    elif fn is not MISSING and not inspect.isroutine(fn) and not isinstance(fn, type):
        owner, fn = node.func, getattr(type(fn), "__call__", None)  # model(x)
        if getattr(type(fn), "_gpe_sliced", False):  # its __call__ wrapped by gpe run
            fn = getattr(fn, "__wrapped__", None)
    elif is_static(node.func, inf):
        owner = None
    else:
        return None
    if owner is None:
        args = in_order(fn, node, 0) if fn is not None else None
        return (fn, args) if args is not None else None
    args = in_order(fn, node, 1)
    if args is None or inf.object_of(owner) is MISSING or not user_code(fn):
        return None
    return fn, [owner] + args


def _spreads_nothing(inf, arg: gast.expr) -> bool:
    """`*args` of an empty tuple fixed for the call (a layer's `call` judged for calls that
    pass nothing there: slicer/layers.py)."""
    if not (isinstance(arg, gast.Starred) and isinstance(arg.value, gast.Name)):
        return False
    fact = inf.facts.args.get(arg.value.id)
    return fact is not None and fact.constant and fact.value == () and \
        arg.value.id not in inf.rebound


def _function_attribute(inf, func: gast.AST) -> bool:
    """`obj.attr` where the object (an argument or a global) holds a plain function in its
    own `__dict__` (d2l's RNNModelScratch keeps `forward_fn` and `init_state` so)."""
    if not isinstance(func, gast.Attribute):
        return False
    owner = inf.object_of(func.value)
    return owner is not MISSING and func.attr in getattr(owner, "__dict__", {})


def in_order(fn, node: gast.Call, bound: int) -> list | None:
    """The call's argument expressions in the order of `fn`'s parameters (after `bound`
    ones its object fills): the positional ones, then keyword ones that fill the next
    parameters (`loss(model, x, y, training=True)`, the TF guides' helpers); None where
    a keyword leaves a parameter before it to its default, or names none. Keywords no
    parameter names go to its `**kwargs` (`begin_state(batch_size=n, dtype=tf.float32)`),
    left out here: the callee is judged only where its body never reads them (callees.py)."""
    if not node.keywords:
        return list(node.args)
    if any(k.arg is None for k in node.keywords) or any(
            isinstance(a, gast.Starred) for a in node.args):
        return None
    try:
        signature = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    named = [p.name for p in signature if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    params = named[bound + len(node.args):]
    given = {k.arg: k.value for k in node.keywords}
    if any(p.kind == p.VAR_KEYWORD for p in signature):
        given = {name: value for name, value in given.items() if name in named}
    if set(given) != set(params[:len(given)]):
        return None
    return list(node.args) + [given[name] for name in params[:len(given)]]



def _changes_numbers(inf, paths: tuple) -> bool:
    """Whether the caller may change an object on the way to a number a callee reads from
    its own namespace (`layer.rate += 0.25` before `forward(x)`, whose `layer(x)` reads
    `layer.rate` through its closure): its trace would have the value from before."""
    changed = {id(v) for v in (inf.facts.objects.get(r, inf.parsed.lookup(r))
                               for r in inf.mutated) if v is not MISSING}
    for path, number in paths:
        if not number:
            continue
        root, *attrs = path.split(".")
        value = namespaces.resolve(root)
        for attr in attrs[:-1]:
            if value is MISSING or id(value) in changed:
                break
            value = getattr(value, attr, MISSING)
        if value is not MISSING and id(value) in changed:
            return True
    return False


def reads(inf, reads: tuple, sites: list) -> tuple | None:
    """The callee's reads from its object arguments as the caller's paths; None where
    one cannot be guarded here (an object with no path, a number the caller changes
    or that keeps changing: the callee would be traced with a stale value)."""
    out = []
    for position, below, number in reads:
        base = path_of(inf, sites[position])
        if base is None:
            return None
        path = base + below
        if number and (path in inf.facts.dynamic_paths or base.split(".")[0] in
                       inf.mutated):
            return None
        out.append((path, number))
    return tuple(out)

def sent_number(inf, node: gast.AST) -> str | None:
    """The caller's path of a Python number on an object that keeps changing
    (`hp.dropout_rate`, in facts.dynamic_paths: sent to the TF part, not folded), given
    to a callee; None for any other argument."""
    path = anno.get(node, Key.SENT, None)  # set by kinds (and on hoist's temporary)
    if path is None or anno.get(node, Key.KIND) != Kind.HOST:
        return None
    root = path.split(".")[0]
    if root in inf.rebound or root in inf.mutated or path not in inf.facts.dynamic_paths:
        return None
    return path


def fixed(inf, node: gast.AST) -> bool | tuple:
    """What the call key fixes of an argument at a call site: True for a value folded
    for the call; the shape of a tensor argument of the caller's whose every dimension
    the key fixes (the callee's `real.shape[0]` is a number then, as the caller's is);
    else False."""
    if anno.get(node, Key.CONSTANT):
        return True
    if isinstance(node, gast.Name) and inf._exact_tensor_argument(node):  # noqa: SLF001
        return tuple(inf.facts.args[node.id].shape)
    return _global_number(inf, node)


def _global_number(inf, node: gast.AST) -> bool:
    """A Python number the function reads from its namespace (`dropout1`, a module-level
    rate): the TF statement passing it is traced with its value, and the call key guards
    it by value as it guards every free name the TF part reads (plan captures)."""
    if not isinstance(node, gast.Name) or node.id in inf.env or node.id in inf.local_names \
            or node.id in inf.facts.host_numbers:
        return False
    return type(inf.parsed.lookup(node.id)) in (bool, int, float)


def tests(call: gast.Call, judged: tuple, sites: list, sent: list) -> tuple | None:
    """The callee's branches on numbers the caller sends, for the caller's call key:
    (index among the call's arguments, the caller's path, the parameter, the test's
    text); None where such a number is not one the caller can guard by its path."""
    out = []
    for position, text, name in judged:
        if not sent[position]:
            return None
        index = next((i for i, a in enumerate(call.args) if a is sites[position]), None)
        if index is None:
            return None
        out.append((index, sent[position], name, text))
    return tuple(out)


def path_of(inf, node: gast.AST) -> str | None:
    """The dotted path the call key can resolve for an object expression."""
    if anno.has(node, Key.PATH):
        return anno.get(node, Key.PATH)
    root = chain_root(node)
    if root is None or root.id in inf.rebound:
        return None
    if root.id in inf.facts.objects or is_static(node, inf):
        return dotted(node)
    return None


def method_reads(inf, node: gast.Call, fkind: Kind) -> Kind:
    """A TF method or a layer that reads attributes of its object when traced (facts.reads:
    `model.compute_loss` reads `model._compile_loss`, a layer's `call` its `training` flag
    and sublayers): the call's CALLEE_READS get them in the caller's paths (captured and
    guarded as a callee's reads are). The call stays on the host (HOST) where its object
    has no path the call key can resolve, where a number it reads keeps changing between
    calls (facts.dynamic_paths), or where this function may change the object a number is
    read from (`self.model.training = True` before `self.model(X)`: a key checked at entry
    cannot see that)."""
    if fkind not in (Kind.TF_OP, Kind.TF_EFFECT_OP) or inf.facts.reads is None:
        return fkind
    value = inf.value_of(node.func)
    reads = inf.facts.reads(value) if value is not MISSING else ()
    if reads == ():
        return fkind
    owner = node.func.value if inspect.ismethod(value) else node.func
    base = path_of(inf, owner) if reads is not None else None
    paths = tuple((f"{base}.{attr}", number) for attr, number in reads or ())
    changed = [path for path, number in paths if number and (
        path in inf.facts.dynamic_paths or chain_root(owner).id in inf.mutated)]
    if base is None or changed:
        why = inf.facts.why_host(value) if inf.facts.why_host is not None and \
            reads is None else None
        anno.set(node.func, Key.KIND, Kind.HOST)
        anno.set(node.func, Key.WHY_HOST, f"its trace would freeze `{changed[0]}`, which "
                 "changes between or during calls" if changed else
                 why or "its trace reads a number of a layer it holds in a list")
        return Kind.HOST
    anno.set(node, Key.CALLEE_READS, tuple(anno.get(node, Key.CALLEE_READS, ())) + paths)
    return fkind
