"""Deterministic random programs for differential testing of gpe against eager.

`program(seed)` returns the source of a small module (no TensorFlow needed to generate it):

    import tensorflow as tf
    LOG = []                          # side-effect log, compared
    V_s = tf.Variable(...)            # 1-3 module-level variables, compared at the end
    def h0(a, k): ...                 # 0-2 helpers, called from main (and from each other)
    def main(x, n, flag, scale): ...  # the entry point: x a float32 vector, n an int,
                                      # flag a bool, scale a float

The statements mix host and TF work: control flow on host values and on tensor predicates
(`while` on a tensor with a bounded trip count), variable writes in branches and loops,
lists and dicts of tensors, Python counters, `.numpy()`/`float()` reads fed back into TF
work, prints of host values and of tensors, exceptions raised and caught, early returns,
helper calls, `for` over ranges, lists, dicts and tensor rows.

Three features, each drawn for a program from a stream of its own (a seed that draws none,
about half of them, gives the program it gave before they existed), found past bugs
(issue 29) and make programs of their class:

- containers: `class TL(list)` (as Keras' TrackedList) and `P = collections.namedtuple("P",
  "h c")` of scalar tensors built in the function (lists made as TL, `P(...)`, `_replace`,
  unpacking) and given to a helper `hc0(st)` that reads them (items, whole: tf.stack,
  tf.add_n, iteration, `type(st).__name__`), with values that change call to call;
- numbers: helpers `hn0(k)` of Python number work (`s = 0; while k > 0: s = s * 2 + k;
  k -= 1`, `if k > 1`, a host counter `while c < k`, ...) given a Python int or an int or
  float tensor, zero on some calls; what they return is logged, printed or returned (a
  Python int must stay one; `isinstance`, not `type()`: a Pending is a known difference);
- layers: a tree (depth 1-3) of user `tf.keras.layers.Layer` classes (a leaf a Dense with a
  stateless random kernel and a relu, a node adding its two children) as NET, called in a
  GradientTape on this call's values and stepped with OPT (SGD).

main calls each new helper and uses each feature at least once (at a random point, or at its
end).

Every program terminates eagerly and is deterministic: loops are bounded by construction
(a range of at most a few items, a list or dict not grown in its own loop, a tensor
counter or a variable of the loop's own moved by at least 1.0 per iteration towards a
bound, a host counter towards a bound; no statement of a loop's body rebinds or writes its
counter or its bound), and the only random ops are stateless. Names are typed while
generating; a name first bound inside a block is not used after it, so every read is of a
bound name of the expected kind.
"""
from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass, field

VEC, SC, INT, FLT, BOOL, LST, DCT = "vec", "sc", "int", "flt", "bool", "lst", "dct"
NT = "nt"      # a namedtuple P(h, c) of two scalar tensors
NUM = "num"    # a number helper's result: a Python int or float, or a tensor
KARG = "karg"  # a number helper's argument: a small Python int, or an int or float tensor
KEYS = ("a", "b", "c")


def atom(expr: str) -> str:
    """`expr` parenthesised unless it is already an atom (`(a + b).numpy()`, not `a + b.numpy()`)."""
    node = ast.parse(expr, mode="eval").body
    if isinstance(node, (ast.Name, ast.Call, ast.Attribute, ast.Subscript)):
        return expr
    return f"({expr})"


# Statement templates: Python lines with placeholders, filled left to right (each draws from
# the generator's random stream in that order):
#   $vec $sc $int $flt     an expression of that kind ($sc1 ...: one level down)
#   $bool $pred            a host condition, a tensor predicate
#   $VEC $SC $LST $LST_DCT a bound name of that kind (of either kind); a template that
#                          names a kind the scope lacks is not used
#   $new_s $new_i ...      a fresh name (s7, i8), $name the last one made
#   $[1.0|2.5]             one of the choices;  $fn  the function's name;  $tag  the print's
# and, in the body of a `try`, lines of their own: $block (one statement), $blocks (one or
# two), $call (a call of a helper).
PLACEHOLDER = re.compile(r"\$\[([^\]]*)\]|\$(\w+)")

TRIES = (  # each: the lines of the `try` body, then its handler
    (("if $bool:", '    raise ValueError(f"v{$int}")', "$blocks"),
     ("except ValueError as exc:", "    LOG.append(str(exc))")),
    (("$block", "$new_s = $LST[$int]", "LOG.append(float($name))"),
     ("except IndexError:", '    LOG.append("index")')),
    (("tf.debugging.assert_less($sc, $[1.0|2.5])", "$blocks"),
     ("except tf.errors.InvalidArgumentError:", '    LOG.append("assert")')),
    (("$new_i = $int // ($int - 1)", "LOG.append($name)", "$block"),
     ("except ZeroDivisionError:", '    LOG.append("zero")')),
    (("$new_s = tf.gather($vec, $int)", 'print("g", $name)', "$block"),  # also the fallback
     ("except tf.errors.InvalidArgumentError:", '    LOG.append("gather")')),
    (("$call", "$block"),
     ("except (RuntimeError, AssertionError, ValueError) as exc:",
      '    LOG.append(("caught", type(exc).__name__, str(exc)))')),
    (("$new_s = $VEC[$int]", "LOG.append($name)", "$block"),
     ("except (tf.errors.InvalidArgumentError, IndexError):", '    LOG.append("oob")')),
)

PRINTS = (
    'print("$tag", $int)',
    'print("$tag", $flt)',
    'print("$tag", $SC)',
    'print("$tag", $VEC)',
    'print(f"$tag {$int} {$flt:.3f}")',  # also the fallback
    'print("$tag", $LST_DCT)',
    'print("$tag", $VEC.numpy())',
    'print(f"$tag {$SC}")',
)

LOGS = ("LOG.append($int)", "LOG.append($flt)", "LOG.append($sc)", 'LOG.append(("$fn", $int))')

EFFECTS = {  # every template of the variable is filled, then one is picked
    "V_s": ("V_s.assign_add($sc)", "V_s.assign($sc * 0.5)",
            "V_s.assign_sub(tf.reduce_mean($vec))"),
    "V_v": ("V_v.assign(V_v * 0.5 + $sc)", "V_v.assign_add(tf.fill([3], $sc))"),
    "V_i": ("V_i.assign_add($int)", "V_i.assign_add(1)"),
}

GLOBALS = ("COUNT += 1", "COUNT = (COUNT + $int) % 11", 'STATE["n"] += 1',
           'STATE["last"] = $flt')


@dataclass
class Scope:
    names: dict = field(default_factory=dict)   # name -> kind
    frozen: frozenset = frozenset()             # names a loop depends on: not rebound
    in_loop: bool = False
    in_fn: str = "main"

    def child(self, frozen=(), in_loop=None) -> "Scope":
        return Scope(dict(self.names), self.frozen | frozenset(frozen),
                     self.in_loop if in_loop is None else in_loop, self.in_fn)

    def of(self, kind: str) -> list[str]:
        return [n for n, k in self.names.items() if k == kind]

    def writable(self, kind: str) -> list[str]:
        return [n for n in self.of(kind) if n not in self.frozen]


class Gen:
    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.out: list[str] = []
        self.counter = 0
        self.budget = 0
        self.helpers: list[tuple[str, list[str], str]] = []  # name, param kinds, result kind
        self.vars: dict[str, str] = {}                         # variable name -> kind
        self.prints = 0
        self.globals_used = False
        self.pure = False  # a helper of TF work only (no host conversions)
        self.current_result = None
        self.loop_vars: list[str] = []  # the variables of `s_var_while` loops, one a loop
        # the features drawn from a stream of their own (see `program`); all off, the
        # program is the one the generator made before they existed
        self.containers = False  # class TL(list) and namedtuple P: built, read, passed
        self.layers = False      # a tree of user Keras layers NET, trained with OPT
        self.pending: list[str] = []  # what main must do once (a statement kind, or a
                                      # helper to call): at a random point, or at its end

    # -- helpers -------------------------------------------------------------------------
    def chance(self, p: float) -> bool:
        return self.r.random() < p

    def pick(self, seq):
        return self.r.choice(list(seq))

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def emit(self, depth: int, line: str) -> None:
        self.out.append("    " * depth + line)
        self.budget -= 1

    def const(self) -> str:
        return self.pick(["0.5", "1.5", "-0.25", "2.0", "0.75", "-1.0", "0.1"])

    # -- templates (see PLACEHOLDER) -------------------------------------------------------
    def fits(self, s: Scope, template: str) -> bool:
        """The scope has a name of every kind `template` names."""
        return all(self.names_of(s, word) for _, word in PLACEHOLDER.findall(template)
                   if word.isupper())

    def names_of(self, s: Scope, word: str) -> list[str]:
        return [n for kind in word.lower().split("_") for n in s.of(kind)]

    def fill(self, s: Scope, template: str, tag: str = "") -> str:
        def one(match: re.Match) -> str:
            choices, word = match.groups()
            if choices is not None:
                return self.pick(choices.split("|"))
            if word.isupper():
                return self.pick(self.names_of(s, word))
            if word.startswith("new_"):
                self.made = self.fresh(word[4:])
                return self.made
            if word == "name":
                return self.made
            if word in ("tag", "fn"):
                return tag if word == "tag" else s.in_fn
            if word in ("bool", "pred"):
                return self.hostbool(s) if word == "bool" else self.tensorpred(s)
            kind, depth = word.rstrip("1"), int(word.endswith("1"))
            return {VEC: self.vec, SC: self.sc, INT: self.int_, FLT: self.flt}[kind](s, depth)
        return PLACEHOLDER.sub(one, template)

    def chosen(self, s: Scope, table: tuple, fallback: int) -> str:
        """A template of `table` at random, or `fallback`'s when the scope does not fit it."""
        template = table[self.r.randrange(len(table))]
        return template if self.fits(s, template) else table[fallback]

    # -- expressions ---------------------------------------------------------------------
    def vec(self, s: Scope, d: int = 0) -> str:
        names = s.of(VEC)
        if d >= 2 or (names and self.chance(0.35)):
            return self.pick(names)
        c = self.r.randrange(10 if self.pure else 11 if d else 12)
        v = lambda: self.vec(s, d + 1)  # noqa: E731
        if c == 0:
            return f"tf.tanh({v()})"
        if c == 1:
            return f"{v()} * {self.pick([self.const(), self.flt(s, d + 1)])}"
        if c == 2:
            return f"{v()} + {self.sc(s, d + 1)}"
        if c == 3:
            return f"tf.abs({v()}) + 0.5"
        if c == 4:
            return f"tf.maximum({v()}, {v()})"
        if c == 5:
            return f"tf.reverse({v()}, [0])"
        if c == 6:
            return f"tf.cumsum({v()})"
        if c == 7:
            a, b = self.r.randrange(100), self.r.randrange(100)
            return f"{v()} * tf.random.stateless_uniform(tf.shape({self.pick(names)}), seed=[{a}, {b}])"
        if c == 8:
            return f"tf.clip_by_value({v()}, -2.0, 2.0)"
        if c == 9:
            w = self.pick(names)
            return f"tf.where({w} > 0, {w}, -{w})"
        if c == 10:
            w = self.pick(names)
            return self.pick([f"{w} - tf.reduce_mean({w})", f"tf.constant({w}.numpy() * 2.0)",
                              f"{w} + {w}.numpy()", f"tf.concat([{w}[1:], {w}[:1]], 0)"])
        return f"tf.sin({v()}) * 2.0"

    def sc(self, s: Scope, d: int = 0) -> str:
        names = s.of(SC)
        if d >= 2 and names:
            return self.pick(names)
        if d >= 2:
            return f"tf.reduce_sum({self.pick(s.of(VEC))})"
        if names and self.chance(0.3):
            return self.pick(names)
        opts = ["red", "red", "const", "cast", "arith", "square", "index"]
        if "V_s" in self.vars:
            opts += ["vs", "vs"]
        if "V_v" in self.vars:
            opts += ["vv"]
        if "V_i" in self.vars:
            opts += ["vi"]
        if s.of(LST):
            opts += ["lst", "lst"]
        if s.of(DCT):
            opts += ["dct"]
        if s.of(FLT):
            opts += ["fltmul"]
        if s.of(NT):
            opts += ["nt", "nt"]
        if s.of(NUM):
            opts += ["num"]
        if d < 2 and self.chance(0.08):
            opts = ["ifexp"]  # `a if test else b` (a folded flag's test: the TF part's)
        c = self.pick(opts)
        if c == "ifexp":
            return f"({self.sc(s, d + 1)} if {self.hostbool(s)} else {self.sc(s, d + 1)})"
        if c == "red":
            fn = self.pick(["reduce_sum", "reduce_mean", "reduce_max", "reduce_min"])
            return f"tf.{fn}({self.vec(s, d + 1)})"
        if c == "const":
            return f"tf.constant({self.const()})"
        if c == "index":
            return f"{self.pick(s.of(VEC))}[{self.pick(['0', '-1', '1'])}]"
        if c == "cast":
            return f"tf.cast({self.int_(s, d + 1)}, tf.float32)"
        if c == "arith":
            return f"{self.sc(s, d + 1)} * 0.5 + {self.sc(s, d + 1)}"
        if c == "square":
            return f"tf.{self.pick(['square', 'sin', 'tanh'])}({self.sc(s, d + 1)})"
        if c == "vs":
            return self.pick(["V_s * 0.5", "V_s.read_value()", "V_s + 1.0"])
        if c == "vv":
            return "tf.reduce_sum(V_v)"
        if c == "vi":
            return "tf.cast(V_i, tf.float32)"
        if c == "lst":
            l = self.pick(s.of(LST))
            return self.pick([f"{l}[-1]", f"{l}[0]", f"tf.add_n({l})",
                              f"tf.reduce_sum(tf.stack({l}))"])
        if c == "dct":
            dn = self.pick(s.of(DCT))
            return self.pick([f"{dn}['a']", f"{dn}.get('b', {self.sc(s, d + 1)})"])
        if c == "nt":
            p = self.pick(s.of(NT))
            return self.pick([f"{p}.h", f"{p}[1]", f"{p}.c * 0.5 + {p}.h", f"{p}[-1]"])
        if c == "num":  # a Python number or a tensor, of either dtype
            return f"tf.cast({self.pick(s.of(NUM))}, tf.float32)"
        return f"{self.sc(s, d + 1)} * {self.pick(s.of(FLT))}"

    def int_(self, s: Scope, d: int = 0) -> str:
        names = s.of(INT)
        if self.pure:
            return self.pick(names) if names and self.chance(0.5) else str(self.r.randrange(4))
        if names and (d >= 2 or self.chance(0.4)):
            return self.pick(names)
        if d >= 2:
            return str(self.r.randrange(4))
        opts = ["lit", "arith", "count", "tensor", "shape"]
        if self.globals_used:
            opts.append("global")
        if s.of(LST):
            opts.append("len")
        if s.of(DCT):
            opts.append("lend")
        if "V_i" in self.vars:
            opts.append("vi")
        c = self.pick(opts)
        if c == "lit":
            return str(self.r.randrange(5))
        if c == "arith":
            return self.pick([f"({self.int_(s, d + 1)} + 1)", f"({self.int_(s, d + 1)} * 3) % 7",
                              f"max({self.int_(s, d + 1)} - 1, 0)"])
        if c == "count":
            return f"int(tf.reduce_sum(tf.cast({self.vec(s, d + 1)} > 0, tf.int32)))"
        if c == "tensor":
            return f"int({atom(self.sc(s, d + 1))}.numpy() > 0)"
        if c == "shape":
            t = self.pick(s.of(VEC))
            return self.pick([f"len({t})", f"{t}.shape[0]", f"int(tf.argmax({t}))",
                              f"int(tf.size({t}))"])
        if c == "global":
            return self.pick(["COUNT", "STATE['n']"])
        if c == "len":
            return f"len({self.pick(s.of(LST))})"
        if c == "lend":
            return f"len({self.pick(s.of(DCT))})"
        return self.pick(["int(V_i.numpy()) % 5", "int(V_i) % 4"])

    def flt(self, s: Scope, d: int = 0) -> str:
        names = s.of(FLT)
        if self.pure:
            return self.pick(names) if names and self.chance(0.5) else self.const()
        if names and (d >= 2 or self.chance(0.4)):
            return self.pick(names)
        if d >= 2:
            return self.const()
        c = self.r.randrange(6)
        if c == 5 and "V_s" in self.vars:
            return self.pick(["float(V_s)", "V_s.numpy()", "float(V_s.read_value()) + 1.0"])
        if c == 0:
            return f"float({self.sc(s, d + 1)})"
        if c == 1:
            return f"float({atom(self.sc(s, d + 1))}.numpy())"
        if c == 2:
            return f"round(float({self.sc(s, d + 1)}), 3)"
        if c == 3 and names:
            return f"{self.pick(names)} * 0.5 + 1.0"
        return f"{atom(self.sc(s, d + 1))}.numpy() * 2.0"

    def hostbool(self, s: Scope) -> str:
        c = self.r.randrange(6)
        if c == 0 and "flag" in s.names:
            return self.pick(["flag", "not flag"])
        if c == 1:
            return f"{self.int_(s, 1)} > {self.r.randrange(3)}"
        if c == 2:
            return f"{self.flt(s, 1)} > {self.pick(['0.0', '0.5', '-0.5'])}"
        if c == 3:
            return f"bool({self.sc(s, 1)} > 0)"
        if c == 4 and s.of(LST):
            return f"len({self.pick(s.of(LST))}) > 2"
        return f"{self.int_(s, 1)} % 2 == 0"

    def tensorpred(self, s: Scope) -> str:
        if self.chance(0.15):
            return f"{self._tensorpred(s)} {self.pick(['and', 'or'])} {self.hostbool(s)}"
        if self.chance(0.1):
            return f"{self.hostbool(s)} and {self._tensorpred(s)}"
        return self._tensorpred(s)

    def _tensorpred(self, s: Scope) -> str:
        c = self.r.randrange(5)
        if c == 0:
            return f"tf.reduce_sum({self.vec(s, 1)}) > 0"
        if c == 1:
            return f"{self.sc(s, 1)} > {self.pick(['0.0', '0.5', '1.0'])}"
        if c == 2:
            return f"tf.reduce_any({self.vec(s, 1)} > 1.0)"
        if c == 3 and "V_s" in self.vars:
            return f"{self.sc(s, 1)} < V_s"
        return f"tf.reduce_mean({self.vec(s, 1)}) < {self.sc(s, 1)}"

    def value(self, s: Scope, kind: str) -> str:
        if kind in (LST, NT):
            return self.container_arg(s, kind)
        if kind == KARG:
            return self.number_arg(s)
        return {VEC: self.vec, SC: self.sc, INT: self.int_, FLT: self.flt}[kind](s)

    def container_arg(self, s: Scope, kind: str) -> str:
        """A list of scalar tensors (of any list type, or a tuple) or a P, for a helper."""
        names = s.of(kind)
        if names and self.chance(0.5):
            return self.pick(names)
        a, b = self.sc(s, 1), self.sc(s, 1)
        if kind == NT:
            return self.pick([f"P({a}, {b})", f"P(h={a}, c={b})", f"P._make([{a}, {b}])"])
        return self.pick([f"TL([{a}, {b}])", f"TL([{a}, {b}])", f"[{a}, {b}]", f"({a}, {b})"])

    def number_arg(self, s: Scope) -> str:
        """A number helper's argument, at most 4: a Python int, or an int32 or float32
        tensor (zero on some calls: its loop then runs no iteration)."""
        small = f"min({self.int_(s, 1)}, 4)"
        if self.chance(0.4):
            return small
        v = self.pick(s.of(VEC))
        options = [f"tf.constant({small})", f"tf.reduce_sum(tf.cast({v} > 0, tf.int32))",
                   f"tf.reduce_sum(tf.cast({v} > 0.5, tf.float32))"]
        if "V_i" in self.vars:
            options.append("tf.minimum(V_i, 4)")
        return self.pick(options)

    def returned(self, s: Scope) -> str:
        items = []
        for _ in range(self.r.randint(1, 3)):
            kind = self.pick([SC, SC, INT, FLT, VEC, BOOL] + ([LST] if s.of(LST) else [])
                             + ([DCT] if s.of(DCT) else []) + ([NT] if s.of(NT) else [])
                             + ([NUM, NUM] if s.of(NUM) else []))
            if kind == BOOL:
                items.append(self.hostbool(s))
            elif kind in (LST, DCT, NT, NUM):
                items.append(self.pick(s.of(kind)))
            elif kind == INT and s.of(INT):
                items.append(self.pick(s.of(INT)))
            else:
                items.append(self.value(s, kind))
        if len(items) == 1 and self.chance(0.5):
            return items[0]
        return ", ".join(items) if self.chance(0.6) else "[" + ", ".join(items) + "]"

    # -- statements ----------------------------------------------------------------------
    def block(self, s: Scope, depth: int, n: int) -> None:
        start = len(self.out)
        for _ in range(n):
            if self.budget <= 0:
                break
            self.stmt(s, depth)
        if len(self.out) == start:
            self.emit(depth, "pass")

    def stmt(self, s: Scope, depth: int) -> None:
        if self.pending and s.in_fn == "main" and self.chance(0.25):
            return self.pending_one(s, depth)
        compound = depth < 3 and self.budget > 4
        kinds = ["assign"] * 4 + ["update"] * 3 + ["effect"] * 3 + ["print"] * 2 + ["log"] * 2
        kinds += ["container"] * 2 + ["aug", "poly", "comp", "lambda"]
        if self.globals_used:
            kinds += ["global"] * 2
        if compound:
            kinds += ["if_host", "if_tensor", "if_tensor", "for_range", "for_range", "for_list",
                      "for_rows", "while_tensor", "while_host", "try", "try"]
            kinds += ["call"] * 3 if self.helpers else []
            kinds += ["tape"] if "V_s" in self.vars or "V_v" in self.vars else []
            kinds += ["var_while"] if "V_s" in self.vars else []
            kinds += ["keras"] * 2 if self.layers else []
        if self.containers:
            kinds += ["named", "named"]
        if depth > 1 or s.in_loop:
            kinds += ["return"]
        if s.in_loop:
            kinds += ["break"]
        kinds += ["raise"] if depth > 1 else []
        kinds += ["raise", "assert", "tf_error"] if self.chance(0.15) else []
        getattr(self, "s_" + self.pick(kinds))(s, depth)

    def pending_one(self, s: Scope, depth: int) -> None:
        what = self.pending.pop(self.r.randrange(len(self.pending)))
        if what in ("keras", "named"):
            getattr(self, "s_" + what)(s, depth)
        else:
            self.s_call(s, depth, what)

    def s_assign(self, s: Scope, depth: int) -> None:
        kind = self.pick([VEC, SC, SC, INT, FLT])
        name = self.fresh({VEC: "t", SC: "s", INT: "i", FLT: "f"}[kind])
        self.emit(depth, f"{name} = {self.value(s, kind)}")
        s.names[name] = kind

    def s_update(self, s: Scope, depth: int) -> None:
        kind = self.pick([VEC, SC, INT, FLT])
        names = s.writable(kind)
        if not names:
            return self.s_assign(s, depth)
        n = self.pick(names)
        if kind == VEC:
            self.emit(depth, f"{n} = {self.pick([f'{n} * 0.5 + ' + self.sc(s, 1), self.vec(s)])}")
        elif kind == SC:
            self.emit(depth, f"{n} = {n} {self.pick(['+', '-', '*'])} {self.sc(s, 1)}")
        elif kind == INT:
            self.emit(depth, self.pick([f"{n} += 1", f"{n} = ({n} + {self.int_(s, 1)}) % 9"]))
        else:
            self.emit(depth, f"{n} = {n} * 0.5 + {self.flt(s, 1)}")

    def s_effect(self, s: Scope, depth: int) -> None:
        templates = EFFECTS[self.pick(self.vars)]
        self.emit(depth, self.pick([self.fill(s, t) for t in templates]))

    def s_print(self, s: Scope, depth: int) -> None:
        self.prints += 1
        self.emit(depth, self.fill(s, self.chosen(s, PRINTS, 4), tag=f"p{self.prints}"))

    def s_log(self, s: Scope, depth: int) -> None:
        self.emit(depth, self.fill(s, self.pick(LOGS)))

    def s_container(self, s: Scope, depth: int) -> None:
        lists, dicts = s.writable(LST), s.writable(DCT)
        c = self.r.randrange(4)
        if c == 0 or (c == 1 and not lists):
            name = self.fresh("l")
            if self.containers and self.chance(0.5):
                self.emit(depth, f"{name} = TL([{self.sc(s)}])")
            else:
                self.emit(depth, f"{name} = [{self.sc(s)}]")
            s.names[name] = LST
        elif c == 1:
            self.emit(depth, f"{self.pick(lists)}.append({self.sc(s)})")
        elif c == 2 or not dicts:
            name = self.fresh("d")
            self.emit(depth, f'{name} = {{"a": {self.sc(s)}}}')
            s.names[name] = DCT
        else:
            self.emit(depth, f'{self.pick(dicts)}["{self.pick(KEYS)}"] = {self.sc(s)}')

    def s_if_host(self, s: Scope, depth: int) -> None:
        self._if(s, depth, self.hostbool(s))

    def s_if_tensor(self, s: Scope, depth: int) -> None:
        self._if(s, depth, self.tensorpred(s))

    def _if(self, s: Scope, depth: int, test: str) -> None:
        self.emit(depth, f"if {test}:")
        self.block(s.child(), depth + 1, self.r.randint(1, 3))
        if self.chance(0.5):
            self.emit(depth, "else:")
            self.block(s.child(), depth + 1, self.r.randint(1, 2))

    def s_for_range(self, s: Scope, depth: int) -> None:
        i = self.fresh("k")
        bound = self.pick(["n", "3", "2", f"min({self.int_(s)}, 3)"]) if "n" in s.names else "2"
        self.emit(depth, f"for {i} in range({bound}):")
        body = s.child(frozen=[i], in_loop=True)
        body.names[i] = INT
        self.block(body, depth + 1, self.r.randint(1, 3))

    def s_for_list(self, s: Scope, depth: int) -> None:
        lists, dicts = s.of(LST), s.of(DCT)
        if not lists and not dicts:
            return self.s_for_range(s, depth)
        e = self.fresh("e")
        if lists and (not dicts or self.chance(0.6)):
            l = self.pick(lists)
            if self.chance(0.3):
                j = self.fresh("j")
                self.emit(depth, f"for {j}, {e} in enumerate({l}):")
                body = s.child(frozen=[l, j, e], in_loop=True)
                body.names[j] = INT
            else:
                self.emit(depth, f"for {e} in {l}:")
                body = s.child(frozen=[l, e], in_loop=True)
        else:
            dn = self.pick(dicts)
            key = self.fresh("key")
            self.emit(depth, f"for {key}, {e} in {dn}.items():")
            body = s.child(frozen=[dn, e], in_loop=True)
        body.names[e] = SC
        self.block(body, depth + 1, self.r.randint(1, 3))

    def s_for_rows(self, s: Scope, depth: int) -> None:
        e = self.fresh("r")
        src = self.pick(s.of(VEC))
        if self.chance(0.3):
            m = self.fresh("m")
            self.emit(depth, f"{m} = tf.reshape(tf.tile({src}, [2]), [2, -1])")
            self.emit(depth, f"for {e} in {m}:")
            kind = VEC
        else:
            self.emit(depth, f"for {e} in {src}:")
            kind = SC
        body = s.child(frozen=[e], in_loop=True)
        body.names[e] = kind
        self.block(body, depth + 1, self.r.randint(1, 3))

    def s_while_tensor(self, s: Scope, depth: int) -> None:
        c = self.fresh("w")
        if self.chance(0.5):
            # a scalar counter moved by at least 1.0 per iteration towards its bound
            self.emit(depth, f"{c} = tf.clip_by_value({self.sc(s)}, -3.0, 3.0)")
            bound = self.pick(["3.0", "4.5", "2.0"])
            self.emit(depth, f"while {c} < {bound}:")
            self.emit(depth + 1, f"{c} = {c} + 1.0 + tf.abs({self.sc(s, 1)})")
            kind = SC
        else:
            self.emit(depth, f"{c} = tf.clip_by_value({self.vec(s)}, -1.0, 1.0)")
            self.emit(depth, f"while tf.reduce_sum({c}) < {self.pick(['2.0', '4.0'])}:")
            self.emit(depth + 1, f"{c} = {c} + 1.0")
            kind = VEC
        s.names[c] = kind
        body = s.child(frozen=[c], in_loop=True)
        self.block(body, depth + 1, self.r.randint(0, 2))

    def s_while_host(self, s: Scope, depth: int) -> None:
        c = self.fresh("c")
        self.emit(depth, f"{c} = 0")
        bound = self.pick(["n", "3", "limit"]) if "n" in s.names else self.pick(["2", "limit"])
        if bound == "limit":  # a name of its own: the body may rebind the names it reads
            bound = self.fresh("lim")
            self.emit(depth, f"{bound} = {self.int_(s)} + 1")
        self.emit(depth, f"while {c} < {bound}:")
        self.emit(depth + 1, f"{c} += 1")
        s.names[c] = INT
        body = s.child(frozen=[c, bound], in_loop=True)  # the body moves neither
        self.block(body, depth + 1, self.r.randint(1, 2))

    def s_try(self, s: Scope, depth: int) -> None:
        body, handler = TRIES[self.r.randrange(len(TRIES))]
        if not (self.fits(s, " ".join(body)) and (self.helpers or "$call" not in body)):
            body, handler = TRIES[4]
        self.emit(depth, "try:")
        inner = s.child()
        for line in body:
            if line == "$call":
                self.s_call(inner, depth + 1)
            elif line.startswith("$block"):
                self.block(inner, depth + 1, self.r.randint(1, 2) if line == "$blocks" else 1)
            else:
                self.emit(depth + 1, self.fill(s, line))
        for line in handler:
            self.emit(depth + line.count("    "), self.fill(s, line.strip()))
        if self.chance(0.3):
            self.emit(depth, "finally:")
            self.emit(depth + 1, 'LOG.append("fin")')

    def s_global(self, s: Scope, depth: int) -> None:
        self.emit(depth, self.pick([self.fill(s, t) for t in GLOBALS]))

    def s_aug(self, s: Scope, depth: int) -> None:
        kind = self.pick([VEC, SC, INT, FLT])
        names = s.writable(kind)
        if len(names) >= 2 and self.chance(0.3):
            a, b = self.r.sample(names, 2)
            self.emit(depth, f"{a}, {b} = {b}, {a}")
        elif names and kind in (VEC, SC):
            self.emit(depth, f"{self.pick(names)} {self.pick(['+=', '-=', '*='])} {self.sc(s, 1)}")
        elif names:
            self.emit(depth, f"{self.pick(names)} += {self.value(s, kind)}")
        else:
            self.s_assign(s, depth)

    def s_poly(self, s: Scope, depth: int) -> None:
        """A name that is a Python number on one path and a tensor on the other."""
        z = self.fresh("z")
        self.emit(depth, f"{z} = {self.pick(['0.0', '1', self.flt(s)])}")
        self.emit(depth, f"if {self.pick([self.hostbool(s), self.tensorpred(s)])}:")
        self.emit(depth + 1, f"{z} = {self.sc(s)}")
        use = self.r.randrange(4)
        if use == 0:
            self.emit(depth, f"LOG.append(float({z}))")
        elif use == 1:
            t = self.fresh("t")
            self.emit(depth, f"{t} = {self.pick(s.of(VEC))} * {z}")
            s.names[t] = VEC
        elif use == 2:
            self.emit(depth, f'print("z", {z})')
        else:
            n = self.fresh("s")
            self.emit(depth, f"{n} = tf.constant(1.0) + {z}")
            s.names[n] = SC

    def s_comp(self, s: Scope, depth: int) -> None:
        c = self.r.randrange(4)
        if c == 0 or not (s.of(LST) or s.of(DCT)):
            name = self.fresh("l")
            items = (f"{self.sc(s, 1)} * {self.pick(['0.5', '1.5'])} + tf.cast(q, tf.float32) "
                     f"for q in range({self.pick(['3', '2', 'n' if 'n' in s.names else '1'])})")
            if self.containers and self.chance(0.4):
                self.emit(depth, f"{name} = TL({items})")
            else:
                self.emit(depth, f"{name} = [{items}]")
            # an empty list (range(0)) must not be read: only n may be 0, guard the reads
            if "n" in self.out[-1].split("range(")[-1]:
                self.emit(depth, f"{name}.append({self.sc(s, 1)})")
            s.names[name] = LST
        elif c == 1 and s.of(LST):
            name = self.fresh("l")
            self.emit(depth, f"{name} = [e * 2.0 + {self.sc(s, 1)} for e in {self.pick(s.of(LST))}]")
            s.names[name] = LST
        elif c == 2 and s.of(LST):
            name = self.fresh("f")
            self.emit(depth, f"{name} = sum(float(e) for e in {self.pick(s.of(LST))})")
            s.names[name] = FLT
        elif s.of(DCT):
            name = self.fresh("d")
            self.emit(depth, f"{name} = {{k: v * 0.5 for k, v in {self.pick(s.of(DCT))}.items()}}")
            s.names[name] = DCT
        else:
            self.s_container(s, depth)

    def s_lambda(self, s: Scope, depth: int) -> None:
        g, name = self.fresh("g"), self.fresh("s")
        self.emit(depth, f"{g} = lambda u: u * {self.pick([self.const(), self.flt(s, 1)])} + 1.0")
        self.emit(depth, f"{name} = {g}({self.sc(s, 1)})")
        s.names[name] = SC

    def s_tape(self, s: Scope, depth: int) -> None:
        tape, loss, g = self.fresh("tape"), self.fresh("loss"), self.fresh("s")
        var = self.pick([v for v in ("V_s", "V_v") if v in self.vars])
        self.emit(depth, f"with tf.GradientTape() as {tape}:")
        via = self.tape_helper(s, depth + 1) if var == "V_s" else None
        if via is not None:  # the loss computed by a helper called inside the tape
            self.emit(depth + 1, f"{loss} = tf.square({via} - 1.0)")
        elif var == "V_s":
            self.emit(depth + 1, f"{loss} = tf.square(V_s * {self.sc(s, 1)} - 1.0)")
        else:
            self.emit(depth + 1, f"{loss} = tf.reduce_sum(tf.square(V_v - {self.sc(s, 1)}))")
        self.emit(depth, f"{g} = {tape}.gradient({loss}, {var})")
        self.emit(depth, f"{var}.assign_sub(0.1 * {g})")
        s.names[loss] = SC
        if var == "V_s":
            s.names[g] = SC

    def tape_helper(self, s: Scope, depth: int) -> str | None:
        """`s = h0(V_s * x, k)` inside a tape, mostly, where a helper takes and gives a
        scalar: gpe splices such a call (its host work, prints and conversions, stays on
        the host; its TF work joins the tape's). The name it binds, or None."""
        helpers = [h for h in self.helpers if h[2] == SC and h[1] and h[1][0][1] in (SC, VEC)]
        if not helpers or not self.chance(0.8):
            return None
        name, params, _ = self.pick(helpers)
        args = [f"V_s * {self.value(s, params[0][1])}"]
        for _, kind, _ in params[1:]:
            value = self.value(s, kind)
            args.append(f"min({value}, 3)" if name.startswith("hr") and kind == INT else value)
        via = self.fresh("s")
        self.emit(depth, f"{via} = {name}({', '.join(args)})")
        return via

    def s_var_while(self, s: Scope, depth: int) -> None:
        """A while on a variable of its own, moved by at least 1.0 an iteration towards its
        bound: no other statement writes it (not even this loop's body), so the body
        cannot undo the loop's progress."""
        w = self.fresh("V_w")
        self.loop_vars.append(w)
        self.emit(depth, f"{w}.assign(tf.clip_by_value({self.sc(s)}, -3.0, 3.0))")
        self.emit(depth, f"while {w} < {self.pick(['3.0', '4.0'])}:")
        self.emit(depth + 1, f"{w}.assign_add(1.0 + tf.abs({self.sc(s, 1)}))")
        self.block(s.child(in_loop=True), depth + 1, self.r.randint(0, 2))

    def s_named(self, s: Scope, depth: int) -> None:
        """A namedtuple of scalar tensors: built (or rebuilt with _replace), or read."""
        names = s.writable(NT)
        c = self.r.randrange(4)
        if names and c == 0:
            p = self.pick(names)
            self.emit(depth, f"{p} = {p}._replace({self.pick(['h', 'c'])}={self.sc(s, 1)})")
        elif names and c == 1:
            a, b = self.fresh("s"), self.fresh("s")
            self.emit(depth, f"{a}, {b} = {self.pick(names)}")
            s.names[a] = s.names[b] = SC
        else:
            p = self.fresh("p")
            self.emit(depth, f"{p} = {self.container_arg(s.child(), NT)}")
            s.names[p] = NT

    def s_keras(self, s: Scope, depth: int) -> None:
        """A step of the user layers NET: its call inside a tape on a [1, 3] input made of
        this call's values, the gradient, and OPT's update (sometimes only the call)."""
        tape, out, loss = self.fresh("tape"), self.fresh("o"), self.fresh("loss")
        inp = f"tf.reshape(tf.stack([{self.sc(s, 1)}, {self.sc(s, 1)}, {self.sc(s, 1)}]), [1, 3])"
        if self.chance(0.2):
            self.emit(depth, f"{loss} = tf.reduce_sum(NET({inp}))")
            s.names[loss] = SC
            return
        target = self.sc(s, 1)
        if self.chance(0.7):  # made before the tape (host work inside it stops slicing)
            a, b = self.fresh("inp"), self.fresh("s")
            self.emit(depth, f"{a} = {inp}")
            self.emit(depth, f"{b} = {target}")
            inp, target = a, b
            s.names[b] = SC
        self.emit(depth, f"with tf.GradientTape() as {tape}:")
        self.emit(depth + 1, f"{out} = NET({inp})")
        self.emit(depth + 1, f"{loss} = tf.reduce_mean(tf.square({out} - {target}))")
        g = self.fresh("grads")
        self.emit(depth, f"{g} = {tape}.gradient({loss}, NET.trainable_variables)")
        self.emit(depth, f"OPT.apply_gradients(zip({g}, NET.trainable_variables))")
        s.names[loss] = SC
        if self.chance(0.3):
            self.emit(depth, f"LOG.append(float({loss}))")

    def s_assert(self, s: Scope, depth: int) -> None:
        self.emit(depth, f'assert {self.flt(s)} < {self.pick(["1.0", "2.0", "3.0"])}, "too big"')

    def s_tf_error(self, s: Scope, depth: int) -> None:
        """A TF op that may fail on its data, not caught."""
        c = self.r.randrange(3)
        if c == 0:
            self.emit(depth, f'tf.debugging.assert_less({self.sc(s)}, {self.pick(["1.0", "2.5"])}, '
                             f'message="big")')
        elif c == 1:
            name = self.fresh("s")
            self.emit(depth, f"{name} = tf.gather({self.pick(s.of(VEC))}, {self.int_(s)})")
            s.names[name] = SC
        else:
            name = self.fresh("s")
            self.emit(depth, f"{name} = {self.pick(s.of(VEC))}[{self.int_(s)}]")
            s.names[name] = SC

    def s_call(self, s: Scope, depth: int, helper: str | None = None) -> None:
        if helper is None:
            name, params, result = self.pick(self.helpers)
        else:
            name, params, result = next(h for h in self.helpers if h[0] == helper)
        args, keywords = [], False
        for i, (p, kind, default) in enumerate(params):
            value = self.value(s, kind)
            if name.startswith("hr") and kind == INT:
                value = f"min({value}, 3)"
            if default is not None and self.chance(0.3):
                continue  # the default
            keywords = keywords or (i > 0 and (default is not None or self.chance(0.2)))
            args.append(f"{p}={value}" if keywords else value)
        call = f"{name}({', '.join(args)})"
        if result == NUM:
            a = self.fresh("u")
            self.emit(depth, f"{a} = {call}")
            s.names[a] = NUM
            # what eager returned is seen: a Python int stays one (not `type(u)`: a TF value
            # a sliced call returns is a Pending, a known difference, host/runtime/pending.py)
            use = self.r.randrange(4)
            if use == 0:
                self.emit(depth, f"LOG.append({a})")
            elif use == 1:
                self.prints += 1
                self.emit(depth, f'print("p{self.prints}", {a})')
            elif use == 2:
                self.emit(depth, f'LOG.append(("{name}", isinstance({a}, int), '
                                 f'isinstance({a}, float)))')
        elif result == "pair":
            a, b = self.fresh("s"), self.fresh("i")
            self.emit(depth, f"{a}, {b} = {call}")
            s.names[a], s.names[b] = SC, INT
        else:
            a = self.fresh("t" if result == VEC else "s")
            self.emit(depth, f"{a} = {call}")
            s.names[a] = result

    def s_return(self, s: Scope, depth: int) -> None:
        self.emit(depth, f"if {self.pick([self.hostbool(s), self.tensorpred(s)])}:")
        self.emit(depth + 1, f"return {self.ret(s)}")

    def s_break(self, s: Scope, depth: int) -> None:
        self.emit(depth, f"if {self.pick([self.hostbool(s), self.tensorpred(s)])}:")
        self.emit(depth + 1, self.pick(["break", "continue"]))

    def s_raise(self, s: Scope, depth: int) -> None:
        self.emit(depth, f"if {self.flt(s)} > {self.pick(['1.5', '2.5', '4.0'])}:")
        self.emit(depth + 1, f'raise RuntimeError(f"r{{{self.int_(s)}}}")')

    def ret(self, s: Scope) -> str:
        result = self.current_result
        if result is None:
            return self.returned(s)
        if result == "pair":
            return f"{self.sc(s)}, {self.int_(s)}"
        return self.value(s, result)

    # -- functions -----------------------------------------------------------------------
    def header(self, name: str, params: list[tuple[str, str, str | None]]) -> None:
        text = ", ".join(p if d is None else f"{p}={d}" for p, _, d in params)
        self.out.append(f"def {name}({text}):")
        if self.globals_used and not self.pure:
            self.out.append("    global COUNT")

    def function(self, name: str, params: list[tuple[str, str, str | None]],
                 result: str | None, statements: int) -> None:
        s = Scope(in_fn=name)
        for p, kind, _ in params:
            s.names[p] = kind
        self.header(name, params)
        for p, kind, _ in params:
            if kind in (LST, NT):
                self.reads(s, p, kind)
        if not s.of(VEC):
            t = self.fresh("t")
            s.names[t] = VEC
            src = self.pick(s.of(SC)) if s.of(SC) else "1.0"
            self.out.append(f"    {t} = tf.fill([3], {src}) * tf.constant([0.5, -1.0, 2.0])")
        self.current_result = result
        self.budget = statements
        if self.pure:
            for _ in range(statements):
                self.pick([self.s_assign, self.s_update])(s, 1)
        else:
            self.block(s, 1, statements)
        while self.pending and name == "main":
            self.pending_one(s, 1)
        self.emit(1, f"return {self.ret(s)}")
        self.out.append("")

    def reads(self, s: Scope, p: str, kind: str) -> None:
        """The first lines of a container helper: read its argument `p` (a list of any type
        or a tuple, of scalar tensors; or a P), which it never changes."""
        s.frozen = s.frozen | {p}
        a = self.fresh("s")
        if kind == NT:
            line = self.pick([f"{a} = {p}.h * 1.0 + {p}.c * 0.5", f"{a} = {p}[0] - {p}.c",
                              f"{a}, _ = {p}", f"{a} = tf.add_n(list({p}))"])
        else:
            line = self.pick([f"{a} = {p}[0] * 1.0 + {p}[-1] * 0.5", f"{a} = tf.add_n(list({p}))",
                              f"{a} = {p}[len({p}) - 1]", f"{a} = tf.reduce_sum(tf.stack({p}))",
                              f"{a} = tf.constant(0.0)\n    for e in {p}:\n        {a} = {a} + e * 0.5"])
        self.out += ["    " + part for part in line.split("\n    ")]
        s.names[a] = SC
        if self.chance(0.3):
            self.out.append(f"    LOG.append(type({p}).__name__)")

    def number_helper(self, name: str) -> None:
        """A helper of Python number work on its argument `k` (a Python int, or an int or
        float tensor): what it returns is a Python number whenever eager's is, e.g. `s = 0`
        left as it was when `while k > 0` runs no iteration."""
        body = self.pick([
            ("s = 0", "while k > 0:", "    s = s * 2 + k", "    k -= 1"),
            ("s = 0", "if k > 1:", "    s = k + 1"),
            ("s = 1.5", "while k > 0:", "    s = k * 2", "    k -= 1", "    s = 7.5"),
            ("s = 0.0", "while k > 0:", "    s += 0.5", "    k -= 1"),
            ("s = 0", "c = 0", "while c < k:", "    c += 1", "    s += c"),
            ("s = 0", "t = 0.25", "while k > 0:", "    s += 1", "    t = t * 2.0",
             "    k = k - 1", "s = s + t"),
        ])
        self.out.append(f"def {name}(k):")
        self.out += ["    " + line for line in body]
        self.out += ["    return s", ""]

    def layer_classes(self, depth: int) -> str:
        """User Keras layers, a tree of `depth` levels at most: a leaf is a Dense (its
        kernel a stateless random of its own seed) and a relu; a node adds its two
        children's outputs. The classes are emitted children first; returns the root's."""
        name = f"L{self.counter}"
        self.counter += 1
        if depth <= 1 or self.chance(0.25):
            a, b = self.r.randrange(100), self.r.randrange(100)
            init = (f"lambda shape, dtype=None: tf.random.stateless_uniform(shape, seed=[{a}, {b}], "
                    "minval=-0.6, maxval=0.6)")
            layer = self.pick([f"tf.keras.layers.Dense(3, kernel_initializer={init})",
                               f"tf.keras.layers.Dense(3, kernel_initializer={init}, "
                               "bias_initializer=\"ones\")"])
            init_lines = [f"        self.d = {layer}"]
            call = "return tf.nn.relu(self.d(x))"
        else:
            left, right = self.layer_classes(depth - 1), self.layer_classes(depth - 1)
            init_lines = [f"        self.a = {left}()", f"        self.b = {right}()"]
            call = self.pick(["return self.a(x) + self.b(x)", "return self.a(x) + self.b(x) * 0.5"])
        self.out += [f"class {name}(tf.keras.layers.Layer):", "    def __init__(self):",
                     "        super().__init__()"] + init_lines + [
                     "", "    def call(self, x):", f"        {call}", "", ""]
        return name

    def recursive(self, name: str) -> None:
        """A helper that calls itself, k times (k is at most 3 at its calls)."""
        self.out.append(f"def {name}(a, k):")
        if self.globals_used:
            self.out.append("    global COUNT")
        self.out.append("    if k <= 0:")
        self.out.append(f"        return a {self.pick(['+ 0.0', '* 2.0', '- V_s' if 'V_s' in self.vars else '+ 1.0'])}")
        s = Scope(in_fn=name, frozen=frozenset({"k"}))  # k only decreases: the recursion ends
        s.names.update(a=SC, k=INT)
        t = self.fresh("t")
        self.out.append(f"    {t} = tf.fill([3], a) * tf.constant([0.5, -1.0, 2.0])")
        s.names[t] = VEC
        self.current_result = SC
        self.budget = self.r.randint(1, 3)
        self.block(s, 1, self.budget)
        self.out.append(f"    return {name}(a * 0.5 + {self.sc(s, 1)}, k - 1) * 0.5")
        self.out.append("")


def program(seed: int) -> str:
    """The source of one deterministic, terminating program; entry point `main(x, n, flag,
    scale)`."""
    g = Gen(seed)
    r = g.r
    # the features added for issue 29, drawn from a stream of their own: a seed that draws
    # none gives the program it gave before they existed
    features = random.Random(f"features-{seed}")
    g.containers = features.random() < 0.25
    numbers = features.random() < 0.2
    g.layers = features.random() < 0.15
    g.out += ["import collections"] if g.containers else []
    g.out += ["import tensorflow as tf", "", "LOG = []"]
    g.globals_used = r.random() < 0.25
    if g.globals_used:
        g.out += ["COUNT = 0", 'STATE = {"n": 0, "last": 0.0}']
    for var in r.sample(["V_s", "V_v", "V_i"], r.randint(1, 3)):
        init = {"V_s": f"tf.Variable({g.const()})", "V_v": "tf.Variable(tf.zeros([3]))",
                "V_i": "tf.Variable(0)"}[var]
        g.out.append(f"{var} = {init}")
        g.vars[var] = {"V_s": SC, "V_v": VEC, "V_i": INT}[var]
    declared = len(g.out)
    g.out.append("")
    g.out.append("")
    if g.containers:
        g.out += ["class TL(list):  # as Keras' TrackedList"]
        g.out += g.pick([["    pass"], ["    def append(self, value):",
                                         "        super().append(value)"]])
        g.out += ["", "", 'P = collections.namedtuple("P", "h c")', "", ""]
    if g.layers:
        root = g.layer_classes(r.randint(1, 3))
        g.out += [f"NET = {root}()", f"OPT = tf.keras.optimizers.SGD({g.pick(['0.1', '0.05'])})",
                  "", ""]
    for h in range(features.choice([1, 1, 1, 2]) if numbers else 0):
        name = f"hn{h}"
        g.number_helper(name)
        g.helpers.append((name, [("k", KARG, None)], NUM))
        g.out.append("")
    for h in range(r.choice([0, 1, 1, 2])):
        style = r.choice(["mixed", "mixed", "pure", "recursive"])
        if style == "recursive":
            name = f"hr{h}"
            g.recursive(name)
            g.helpers.append((name, [("a", SC, None), ("k", INT, None)], SC))
            g.out.append("")
            continue
        name = f"h{h}"
        params = r.choice([[("a", VEC, None), ("k", INT, None)], [("a", SC, None), ("k", INT, "2")],
                           [("a", VEC, None), ("b", SC, None)], [("a", VEC, None)],
                           [("a", SC, None), ("q", FLT, "0.5")]])
        if style == "pure":
            params = [(p, k, d) for p, k, d in params if k in (VEC, SC)]
        result = r.choice([SC, SC, VEC] + (["pair"] if style == "mixed" else []))
        g.pure = style == "pure"
        g.function(name, params, result, r.randint(2, 6))
        g.pure = False
        g.helpers.append((name, params, result))
        g.out.append("")
    if g.containers and features.random() < 0.7:
        name, kind = "hc0", features.choice([LST, LST, NT])
        params = [("st", kind, None)] + ([("k", INT, "1")] if features.random() < 0.3 else [])
        result = features.choice([SC, SC, VEC, "pair"])
        g.function(name, params, result, r.randint(1, 4))
        g.helpers.append((name, params, result))
        g.out.append("")
    g.pending = [h[0] for h in g.helpers if h[0].startswith(("hn", "hc"))]
    g.pending += (["keras"] if g.layers else []) + (["named"] if g.containers else [])
    g.function("main", [("x", VEC, None), ("n", INT, None), ("flag", BOOL, None),
                        ("scale", FLT, None)], None, r.randint(5, 14))
    g.out[declared:declared] = [f"{w} = tf.Variable(0.0)" for w in g.loop_vars]
    return "\n".join(g.out).rstrip() + "\n"


if __name__ == "__main__":
    import sys
    for arg in sys.argv[1:] or ["0"]:
        print(f"# seed {arg}")
        print(program(int(arg)))
