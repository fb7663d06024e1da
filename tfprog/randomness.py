"""Eager's numbers from legacy stateful random ops run in a TF part.

Eagerly, each run of a stateful random op with no op seed (`tf.random.normal`, `uniform`,
`truncated_normal`, `uniform` of ints, `shuffle`, `gamma`; `tf.nn.dropout`) takes its seeds
from `random_seed.get_seed(None)`: the global seed and a draw from the context's Python
RNG, and gets a fresh kernel for them: Philox with key `seed` and counter [0, seed2]. In a
graph its seeds are fixed when traced and its kernel keeps its state: another stream.

So while a part is traced (`recording`), these ops are built as their V2 stateless twins
(the same sampling code on the same Philox key and counter: tests/test_random.py checks
them bit for bit) reading key and counter from one row of a uint64 [k, 3] tensor (key,
counter low, counter high) that the call's entry carries (`Recorder.received`); at each
call the host draws the k rows in trace order (`draw`), as eager's k ops would have.
A first trace counts the ops; the part is traced again with the seeds only if it has any.
Eager caches a stateful op's kernel by its seeds, so an op whose drawn pair was used before
(by any eager random op since the last `tf.random.set_seed`: `_Kernels`) continues that
kernel's stream: such a call runs eagerly instead, its ops taking the pairs drawn.

Refused (the variant is not built; calls run eagerly), with the user's file and line:
ops with no twin (multinomial, poisson, parameterized truncated normal), an explicit op
seed (eagerly its cached kernel continues one stream across calls), an op that may run
other than once per call (inside a `tf.cond` branch, a loop body, a user's tf.function,
or after a host gate that carries values, where the host may take over the call), a
gamma under a tape (its twin's gradient is another computation), an op after TF work
that can raise on its values, and host statements before the last op that could draw
from the same RNG, raise or return (eager's draws would interleave with theirs, or stop
early; drawing at the call's start is exact only without them: see `_host_lines`). A
part with no entry channel has no row to carry the seeds: `NoEntry` (the builder slices
it again with an entry that carries only the seeds).
"""
from __future__ import annotations

import ast
import functools
import inspect
import linecache
import os
import re
import threading

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context, tape as tape_lib
from tensorflow.python.framework import ops, random_seed
from tensorflow.python.ops import gen_random_ops, gen_stateless_random_ops_v2 as stateless

from ..slicer.plan import ChannelKind, SlicePlan
from . import failing
from .channels import ValueSpec

PHILOX = 1  # the stateless ops' algorithm: the stateful kernels' generator
_LINE = re.compile(r"gpe(\d+)_L(\d+)")  # part.LINE_SCOPE (the trace's line scopes)
_local = threading.local()
_get_seed = random_seed.get_seed  # as TF defines it (install() wraps it)


class Refused(Exception):
    """The part's random ops cannot draw eager's numbers (the variant is not built)."""


class NoEntry(Refused):
    """Random ops in a part with no entry channel to carry their seeds."""


def _twin_normal(a, key, counter):
    return stateless.stateless_random_normal_v2(a["shape"], key, counter, PHILOX,
                                                dtype=a["dtype"], name=a["name"])


def _twin_uniform(a, key, counter):
    return stateless.stateless_random_uniform_v2(a["shape"], key, counter, PHILOX,
                                                 dtype=a["dtype"], name=a["name"])


def _twin_truncated(a, key, counter):
    return stateless.stateless_truncated_normal_v2(a["shape"], key, counter, PHILOX,
                                                   dtype=a["dtype"], name=a["name"])


def _twin_uniform_int(a, key, counter):
    return stateless.stateless_random_uniform_int_v2(a["shape"], key, counter, PHILOX,
                                                     a["minval"], a["maxval"], name=a["name"])


def _twin_shuffle(a, key, counter):
    return stateless.stateless_shuffle(a["value"], key, counter, PHILOX, name=a["name"])


def _twin_gamma(a, key, counter):
    shape = tf.convert_to_tensor(a["shape"])
    alpha = tf.convert_to_tensor(a["alpha"])
    full = tf.concat([shape, tf.shape(alpha, out_type=shape.dtype)], 0)
    return stateless.stateless_random_gamma_v3(full, key, counter, PHILOX, alpha,
                                               name=a["name"])


_TWINS = {  # gen_random_ops function -> (its stateless twin, the tf name users know)
    "random_standard_normal": (_twin_normal, "tf.random.normal"),
    "random_uniform": (_twin_uniform, "tf.random.uniform"),
    "truncated_normal": (_twin_truncated, "tf.random.truncated_normal"),
    "random_uniform_int": (_twin_uniform_int, "tf.random.uniform (of ints)"),
    "random_shuffle": (_twin_shuffle, "tf.random.shuffle"),
    "random_gamma": (_twin_gamma, "tf.random.gamma"),
    "multinomial": (None, "tf.random.categorical"),
    "parameterized_truncated_normal": (None, "a parameterized truncated normal"),
    "random_poisson": (None, "tf.random.poisson"),
    "random_poisson_v2": (None, "tf.random.poisson"),
}


class Recorder:
    """One trace's random ops. `expected`: None for the first trace (it counts them, with
    constant seeds); else the number of rows of the seeds the entry carries."""

    def __init__(self, plan: SlicePlan, uid: int, expected: int | None):
        self.plan, self.uid, self.expected = plan, uid, expected
        self.count = 0
        self.lines: list[int] = []    # the user's line of each op, in trace order
        self.graph = None             # the part's own graph (set when its trace starts)
        # graphs whose ops run once per call when the part runs on (not branches, loop
        # bodies): sliced callees' (traced once per call site), the rest of a block after
        # a host decision that only cancels (a gate carrying no values: no rescue there)
        self.once: set = set()
        self.tensor = None            # the seeds received with the entry values
        self.asked = False            # get_seed(None) ran for the op being made
        self.specs = [] if not expected else [ValueSpec(tf.uint64, (expected, 3))]

    def received(self, leaves: list) -> None:
        """The entry's values as dequeued: the seeds are the last (taken out)."""
        if self.specs:
            self.tensor = leaves.pop()

    def onward(self, fn, once: bool = True):
        """`fn` (a callee's body, a cond branch that runs unless the call is cancelled),
        noting its graph as one that runs once per call if `once`."""
        @functools.wraps(fn)
        def body(*args, **kwargs):
            if once:
                self.once.add(ops.get_default_graph())
            return fn(*args, **kwargs)
        return body

    def call(self, cache: dict, fn, plain, args, kwargs=None):
        """Call sliced callee `fn` (a graph function per callee, in `cache`); one that made
        random ops is traced anew at its next call site: each site draws its own."""
        wrapped = cache.get(fn)
        if wrapped is None:
            wrapped = cache[fn] = tf.function(self.onward(plain(fn)), autograph=False)
        before = self.count
        out = wrapped(*args, **(kwargs or {}))
        if self.count != before:
            del cache[fn]
        return out

    def where(self) -> tuple[int, str]:
        """The user's line of the statement being traced, and `file:line`: the innermost
        line scope of this part, in the graph being built or the ones around it."""
        graph, line = ops.get_default_graph(), self.plan.lineno
        while graph is not None:
            found = [int(n) for uid, n in _LINE.findall(graph.get_name_scope())
                     if int(uid) == self.uid]
            if found:
                line = found[-1]
                break
            graph = getattr(graph, "outer_graph", None)
        return line, self.plan.where(line)

    def refuse(self, what: str, why: str):
        raise Refused(f"{self.where()[1]}: {what} {why}")

    def make(self, name: str, original, args, kwargs):
        """The op `name` made in the traced part: its stateless twin on the next row."""
        twin, what = _TWINS[name]
        asked, self.asked = self.asked, False
        if twin is None:
            self.refuse(what, "has no stateless op that draws eager's numbers")
        if not asked:
            self.refuse(what, "has an explicit seed (eagerly its kernel continues one "
                        "stream from call to call; a graph's cannot)")
        self._check_graphs(what)
        if name == "random_gamma" and tape_lib.could_possibly_record():
            self.refuse(what, "under a GradientTape (its stateless twin's gradient is "
                        "computed differently)")
        bound = inspect.signature(original).bind(*args, **kwargs)
        bound.apply_defaults()
        index = self.count
        self.count += 1
        self.lines.append(self.where()[0])
        if self.expected is None:  # counting: any seeds will do
            key, counter = tf.zeros([1], tf.uint64), tf.zeros([2], tf.uint64)
        else:
            if self.tensor is None or index >= self.expected:
                raise Refused(f"{self.where()[1]}: {what}: the random ops differ from the "
                              "first trace's")
            row = self.tensor[index]
            key, counter = row[:1], row[1:]
        return twin(bound.arguments, key, counter)

    def _check_graphs(self, what: str) -> None:
        """The op runs once per call: made in the part's graph or a sliced callee's graph
        called from it (not a branch, a loop body), after no op that can raise there."""
        graph, chain = ops.get_default_graph(), []
        while graph is not self.graph:
            if graph not in self.once:
                self.refuse(what, "runs inside a tf.cond branch, a loop body or a "
                            "tf.function (it may run any number of times per call)")
            chain.append(graph)
            graph = graph.outer_graph
        if any(_may_raise(g) for g in chain + [graph]):
            self.refuse(what, "comes after TF work that can raise on its values (eager "
                        "would not draw its seeds then)")

    def finish(self) -> None:
        """After the first trace: refuse what the host part does before the last op."""
        if not self.count:
            return
        if not any(c.kind == ChannelKind.ENTRY for c in self.plan.channels):
            raise NoEntry(f"{self.plan.where(self.lines[0])}: random ops in a function "
                          "called without arguments (no entry values carry their seeds)")
        line = _host_lines(self.plan, max(self.lines))
        if line is not None:
            raise Refused(
                f"{self.plan.where(line.lineno)}: `{line.source}` runs on the host before "
                f"the random op at line {max(self.lines)}: it could draw from TF's seed "
                "stream or raise (the host draws all of the call's seeds when it starts)")


def _may_raise(graph) -> bool:
    """Whether an op made so far in `graph` can raise on the values it gets at run time
    (an op of constants cannot: tracing ran it in effect)."""
    return any(_raises(op) and not all(t.op.type == "Const" for t in op.inputs)
               for op in graph.get_operations())


def _raises(op) -> bool:
    # pylint: disable=protected-access (the same package's tables)
    return op.type in failing._FAILS_ON_VALUES or (
        op.type in failing._FUNCTION_ATTRS and failing.can_fail(op))


# what host statements may call before a random op: none draws TF seeds or raises
_SAFE_CALLS = frozenset({
    "print", "len", "range", "int", "float", "bool", "str", "repr", "format", "isinstance",
    "list", "tuple", "dict", "set", "min", "max", "abs", "sum", "round", "enumerate", "zip",
    "sorted", "reversed", "any", "all", "hasattr", "type", "id"})
_SAFE_METHODS = frozenset({"numpy", "item", "append", "tolist", "format", "join", "items",
                           "keys", "values", "get", "copy"})


def _host_lines(plan: SlicePlan, last: int):
    """The first host statement that runs before the random op at line `last` (or in a loop
    holding it) and could draw from the context's RNG (a call of user code, of a TF op
    eagerly, of a function gpe slices) or raise; None if there is none."""
    end = _loop_end(plan, last)
    for line in plan.lines:
        if line.place.lower() == "tf" or not plan.lineno < line.lineno <= max(end, last):
            continue
        tree = _statement(line.source)
        if tree is None:
            return line
        for node in ast.walk(tree):
            # a `return` on the op's own line returns after it
            if isinstance(node, ast.Return) and line.lineno == last and end == last:
                continue
            if isinstance(node, (ast.Raise, ast.Assert, ast.Return, ast.Yield,
                                 ast.YieldFrom, ast.Await, ast.Delete)):
                return line
            if isinstance(node, ast.Call) and not _safe_call(node.func):
                return line
    return None


def _statement(source: str):
    """A line's statement parsed (a block's header with an empty body), or None."""
    text = source.strip()
    if text in ("(arguments)", "else:", "try:", "finally:"):
        return ast.parse("pass")
    for attempt in (text, text + " pass", "if 1: pass\n" + text + " pass",
                    "try: pass\n" + text + " pass"):
        try:
            return ast.parse(attempt)
        except SyntaxError:
            continue
    return None


def _safe_call(func) -> bool:
    if isinstance(func, ast.Name):
        return func.id in _SAFE_CALLS
    return isinstance(func, ast.Attribute) and func.attr in _SAFE_METHODS


def _loop_end(plan: SlicePlan, line: int) -> int:
    """`line`, or the last line of the outermost loop of the function that holds it."""
    source = "".join(linecache.getlines(plan.filename))
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return 1 << 30
    end = line
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.While, ast.AsyncFor)) and \
                node.lineno <= line <= (node.end_lineno or node.lineno):
            end = max(end, node.end_lineno or line)
    return end


def recording(recorder: Recorder):
    """While the part is traced on this thread, its random ops are made by `recorder`."""
    return _Recording(recorder)


class _Recording:
    def __init__(self, recorder):
        self.recorder = recorder

    def __enter__(self):
        self.previous = getattr(_local, "recorder", None)
        _local.recorder = self.recorder
        return self.recorder

    def __exit__(self, *exc):
        _local.recorder = self.previous


_installed = False


def _install() -> None:
    """Wrap get_seed and the stateful random ops once per process: outside a part's trace
    on this thread they are what they were."""
    global _installed
    if _installed:
        return
    _installed = True
    @functools.wraps(_get_seed)
    def get_seed(op_seed):
        if context.executing_eagerly():
            return _eager_seeds(op_seed)
        recorder = getattr(_local, "recorder", None)
        if recorder is not None:  # the op made next asked for no seed of its own
            recorder.asked = op_seed is None
        return _get_seed(op_seed)
    random_seed.get_seed = get_seed
    for name in _TWINS:
        setattr(gen_random_ops, name, _wrapped(name, getattr(gen_random_ops, name)))


def _wrapped(name: str, original):
    @functools.wraps(original)
    def op(*args, **kwargs):
        recorder = getattr(_local, "recorder", None)
        if recorder is None or context.executing_eagerly():
            return original(*args, **kwargs)
        return recorder.make(name, original, args, kwargs)
    return op


def leftover(graph) -> str | None:
    """The type of a stateful op with seed attributes left in the traced part or a
    function it holds (one made otherwise than through gen_random_ops: raw ops, samplers)."""
    definition = graph.as_graph_def()
    nodes = list(definition.node)
    for function in definition.library.function:
        nodes += list(function.node_def)
    for node in nodes:
        if "seed2" in node.attr and _stateful(node.op):
            return node.op
    return None


@functools.lru_cache(maxsize=None)
def _stateful(op_type: str) -> bool:
    from tensorflow.python.framework import op_def_registry
    op_def = op_def_registry.get(op_type)
    return op_def is not None and op_def.is_stateful


_MAXINT32 = 2**31 - 1  # random_seed's


class Collision(Exception):
    """A drawn seed pair was used before: eager's op would continue that cached kernel's
    stream. The call runs eagerly, and its random ops get the pairs drawn (`_replay`)."""


class _Kernels:
    """The seed pairs eager random kernels exist for (eager caches a stateful op's kernel
    by its attributes: an op run again with a pair used before continues that kernel's
    stream, not a fresh one). `tf.random.set_seed` clears eager's kernel cache and makes
    a new RNG: the pairs are forgotten with it."""

    rng = None
    pairs: set = set()
    replay: list = []  # pairs the next eager random ops take instead of drawing

    @classmethod
    def current(cls, ctx) -> set:
        # made by the first set_seed: a program that never called it has none yet
        rng = getattr(ctx, "_rng", None)
        if rng is not cls.rng:
            cls.rng, cls.pairs, cls.replay = rng, set(), []
        return cls.pairs


def _eager_seeds(op_seed):
    """get_seed for an eager op: a pair left by a collision first, and the pair noted."""
    ctx = context.context()
    pairs = _Kernels.current(ctx)
    if op_seed is None and _Kernels.replay and ctx._seed is not None:  # noqa: SLF001
        seeds = _Kernels.replay.pop(0)
        pairs.add(seeds)
        return seeds
    seeds = _get_seed(op_seed)
    if seeds[0] is not None:
        pairs.add(seeds)
    return seeds


def draw(k: int) -> np.ndarray:
    """The seeds of a call's k random ops, as eager's k ops would draw them, in order:
    rows (key, counter low, counter high) = (global seed, 0, op seed), as `get_seed(None)`
    gives them (inlined: the same draws from the context's RNG, truncated alike), or a
    fresh random key and counter when no global seed is set (as an unseeded kernel).
    Raises Collision where a pair was used before."""
    ctx = context.context()
    seed = ctx._seed  # pylint: disable=protected-access (context.global_seed())
    if seed is None:
        _get_seed(None)  # raises where op determinism asks for a seed, as eager's op would
        fresh = np.frombuffer(os.urandom(16 * k), np.uint64).reshape(k, 2)
        rows = np.zeros((k, 3), np.uint64)
        rows[:, 0], rows[:, 2] = fresh[:, 0], fresh[:, 1]
        return rows
    pairs = _Kernels.current(ctx)
    seed %= _MAXINT32
    randint = ctx._rng.randint  # pylint: disable=protected-access (internal_operation_seed)
    drawn = [(seed, randint(0, _MAXINT32) % _MAXINT32) for _ in range(k)]
    if seed == 0:  # get_seed's (0, 0) -> (0, 2**31 - 1)
        drawn = [(0, s2 or _MAXINT32) for _, s2 in drawn]
    if not pairs.isdisjoint(drawn) or len(set(drawn)) < k:
        _Kernels.replay = drawn
        raise Collision(f"seed pair {sorted(pairs.intersection(drawn) or drawn)[0]} drawn "
                        "again: eager continues that random kernel's stream (run eagerly)")
    pairs.update(drawn)
    return np.array([(s, 0, s2) for s, s2 in drawn], np.uint64)


_install()  # at import: the pairs of eager's random kernels are noted from the start
