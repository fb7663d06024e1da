"""Regression tests for what the differential fuzzer (tests/fuzz) found: each test is the
minimised program of a seed (and a few programs of the same class), run eagerly and under
gpe, everything observable compared, with the calls that must have run sliced.
"""
import collections
import time

import numpy as np
import pytest
import tensorflow as tf

from harness import Var, check, differential

X = tf.constant([0.04, 0.43, -0.72])


# seed 37: comprehension variables ------------------------------------------------------
# A comprehension has its own scope, but activity analysis counted its variable as a name
# the statement binds and reads. In a tensor `while` after a host statement the TF
# statement then "needed" `q` from the host (sent with the gate before the loop body ran
# it: NameError in the profile program, a gpe-only error), and a segment returned it.
def test_seed37_comprehension_variable_in_a_tensor_while_inside_a_for():
    def make(log):
        def main(x, n):
            for k1 in range(2):
                w2 = tf.clip_by_value(tf.reduce_sum(x), -3.0, 3.0)
                while w2 < 4.5:
                    w2 = w2 + 1.0 + tf.abs(x[1])
                    f3 = tf.reduce_sum(x).numpy() * 2.0
                    l4 = [w2 * 0.5 + tf.cast(q, tf.float32) for q in range(3)]
                n = (n + int(tf.reduce_sum(tf.cast(x > 0, tf.int32)))) % 9
            log.append(f3)
            return n, l4
        return main, {}
    check(make, [(X, 0), (X, 0), (X * 2.0, 0), (-X, 0)])


def test_comprehension_variables_of_every_kind_are_not_the_functions():
    """A set, dict and generator comprehension, nested generators, and a comprehension
    variable with the name of a function local (the local keeps its value) and of a
    module variable, in loops the TF part follows."""
    def make(log):
        v = tf.Variable(1.0)

        def f(x, steps):
            q = tf.reduce_sum(x)
            i = 10
            for _ in range(steps):
                y = x * 2.0
                log.append(len({int(i) for i in range(3)}))
                d = {k: y[k] + q for k in range(2)}
                s = sum(tf.reduce_sum(y * float(j)) for j in range(2))
                pairs = [a * b for a in range(2) for b in range(a, 3) if a + b > 0]
                v.assign_add(s + d[1] + float(pairs[-1]))
                log.append(float(tf.reduce_sum(y)))
            return q, i, v.read_value()
        return f, {"v": v}
    # the set, dict and generator comprehensions run on the host (only a list comprehension
    # over a fixed range goes to the TF part): their ops run eagerly
    check(make, [(X, 2), (X, 2), (X * 3.0, 2), (-X, 2)],
          host_ops_allowed=frozenset({"StridedSlice", "AddV2", "Mul", "Sum"}))


def test_walrus_in_a_comprehension_binds_the_functions_name():
    def make(log):
        def f(x):
            last = 0.0
            ys = [(last := float(t)) * 2.0 for t in tf.unstack(x)]
            z = tf.reduce_sum(x) * last
            log.append(ys)
            return z, last
        return f, {}
    # the comprehension runs on the host (float of each row): its Unpack runs eagerly
    check(make, [(X,), (X,), (X * 2.0,)], host_ops_allowed=frozenset({"Unpack"}))


def test_comprehension_over_a_variable_named_like_its_target():
    def make(log):
        def f(x, v):
            total = x
            for _ in tf.range(2):
                total = total + tf.add_n([v * 1.0 for v in [total, x]])
            v.assign(tf.reduce_sum(total))
            return total
        return f, {"v": tf.Variable(0.0)}
    # the host iterates over the tensor `tf.range(2)`: a StridedSlice each iteration
    check(make, [(X, Var("v"))] * 3, host_ops_allowed=frozenset({"StridedSlice"}))


# seeds 106, 137, 168, 291: a host value rebound by TF work in one branch of a tensor `if` --
# The TF part carried the host's Python float through the branch (sent with the gate,
# merged, sent back): when the other branch was taken the host got a float32 tensor
# instead of its own float (printed as `tf.Tensor(...)`, and rounded to float32).
def test_seed106_host_float_rebound_in_one_branch_of_a_tensor_if_stays_a_float():
    def make(log):
        def main(x):
            z = float(tf.reduce_mean(x))
            n = 3
            if tf.reduce_sum(x) > 0:
                z = x[-1]
                n = tf.reduce_sum(x)
            print("z", z, n)
            return z, n
        return main, {}
    check(make, [(X,), (X,), (-X,), (X * 2.0,), (-X * 3.0,)])


# seed 274: a Python value computed by the TF part (a folded branch not taken) ----------------
# `z = 1; if n > 1: z = tf...` with n folded: the TF part sent the Python int 1 to the host
# as an int32 tensor.
def test_seed274_python_value_sent_by_the_tf_part_stays_python():
    def make(log):
        def main(x, n):
            z = 1
            b = True
            f = 0.1
            if n > 1:
                z = tf.reduce_max(x)
                b = x[0] > 0
                f = tf.reduce_sum(x)
            print("z", z, b, f)
            return z, b, f, x * 2.0
        return main, {}
    check(make, [(X, 0)] * 3)
    check(make, [(X, 2)] * 3)


# seed 264: a folded argument rebound on the host, then copied ---------------------------------
# `n += 1; i = n` with n folded: `i = n` was computed on both sides, and the TF part's n
# was still the folded value from before `n += 1`.
def test_seed264_folded_argument_rebound_before_a_copy():
    def make(log):
        def main(x, n, scale):
            n += 1
            i = n
            s = tf.reduce_min(x * 1.5)
            log.append(float(s))
            return tf.cast(i, tf.float32) * scale + s
        return main, {}
    check(make, [(X, 0, 0.5), (X, 0, 0.5), (X * 2.0, 0, 0.5)])


# seed 443: a failing tf.debugging.assert_* raises eager's message -----------------------------
# The graph's Assert kernel prints its data its own way ("assertion failed: [big]
# [Condition x < y did not hold element-wise:] [x (gpe59_L16/mul_1:0) = ] [3.12] ...");
# eager formats the values in Python. tfprog/asserts.py hands the checked values over.
def test_seed443_failing_asserts_raise_eagers_exception():
    def make(log):
        v = tf.Variable(0.0)

        def main(x, limit):
            y = x * 2.0
            log.append("before")
            tf.debugging.assert_less(tf.reduce_max(y), limit, message="big")
            tf.debugging.Assert(tf.reduce_all(y > -5.0), ["low", y], summarize=2)
            tf.debugging.assert_positive(y + 3.0, message="positive")
            tf.debugging.assert_near(y, y + 1e-9, message="near")
            v.assign_add(tf.reduce_sum(y))
            log.append("after")
            return y
        return main, {"v": v}
    big = tf.constant([0.04, 4.43, -0.72])
    low = tf.constant([-1.0, -1.2, 0.2, 0.1])
    neg = tf.constant([-3.0, -2.0, -1.9])
    # a failed call's assert runs again eagerly on the host, with the values it checked
    again = frozenset({"Less", "Range", "All", "NotEqual"})
    check(make, [(X, 2.5), (X, 2.5), (big, 2.5), (X, 2.5), (neg, 2.5)], host_ops_allowed=again)
    check(make, [(low, 9.0), (low, 9.0), (low * 3.0, 9.0), (low, 9.0)], host_ops_allowed=again)


# seed 1244: a host `if` that rebinds a name the TF part computed, on some paths only ------
# `z = scale` (a tensor: TF work), then `if <host test>: z = <host value>`, then TF work
# reading z. Crossings took the host `if` for a binding of z on every path: the TF value
# never came to the host, and the host sent its own z to the TF part when the branch was
# not taken (UnboundLocalError, a gpe-only error).
def test_seed1244_host_if_rebinding_a_tf_value_on_some_paths():
    def make(log):
        v = tf.Variable(-0.25)

        def main(x, n, scale):
            g = lambda u: u * -1.0 + 1.0  # noqa: E731  a host call: s is the host's
            s = g(v.read_value())
            z = scale
            if n % 2 == 0 and v.read_value() > 0.5:
                z = s
            t = x * z
            log.append(s)
            v.assign_add(0.5)
            return t
        return main, {"v": v}
    # the host reads the variable (ReadVariableOp, Identity) for its test (Greater) and the
    # lambda (Mul, AddV2)
    ops = frozenset({"ReadVariableOp", "Identity", "Greater", "Mul", "AddV2"})
    check(make, [(X, 0, tf.constant(0.5))] * 2 + [(X, 0, tf.constant(-1.5))] * 3,
          host_ops_allowed=ops)


def test_host_try_and_for_rebinding_a_tf_value_on_some_paths():
    """The same for a host `for` that may run no iteration and a host `try` whose body may
    stop before its binding."""
    def make(log):
        def main(x, n):
            a = tf.reduce_sum(x)
            b = tf.reduce_max(x)
            for k in range(n):
                a = float(k)
            try:
                if n > 1:
                    raise ValueError("n")
                b = 2.0
            except ValueError:
                log.append("caught")
            return x * a + b
        return main, {}
    check(make, [(X, 0), (X, 0), (X * 2.0, 0), (X, 2), (X, 2), (X * 3.0, 2)], graph_calls=4)


# seeds 1243, 1856: a loop the TF part runs whole that binds a name before reading it --------
# `for k in range(n): t = x; v.assign(t[1])` inside a loop the host decides: activity
# counted `t` as read by the inner loop (a value from before it), so the host sent its `t`
# with each iteration's flag before anything had bound it (UnboundLocalError).
def test_seed1856_name_bound_before_its_read_in_an_unrolled_loop_inside_a_host_loop():
    def make(log):
        v = tf.Variable(0.0)

        def main(x, n):
            for k6 in range(n):
                for k7 in range(n):
                    t8 = x
                    v.assign(tf.square(t8[1]) * 0.5)
                print("p1", float(tf.constant(-0.25)))
            return n
        return main, {"v": v}
    check(make, [(X, 3), (X, 3), (X * 2.0, 3)])


def test_seed1243_name_rebound_from_itself_in_an_unrolled_loop_inside_a_tensor_while():
    def make(log):
        def main(x, n):
            w = tf.clip_by_value(tf.concat([x[1:], x[:1]], 0), -1.0, 1.0)
            while tf.reduce_sum(w) < 2.0:
                w = w + 1.0
                for k in range(n):
                    s = tf.square(tf.sin(tf.reduce_sum(w)))
                    s = s * tf.reduce_max(w)
            return w
        return main, {}
    check(make, [(X, 2), (X, 2), (X * 2.0, 2), (-X, 2)])


# seeds 1100, 1390, 1749: TF work after a nested sliced call ran before the host was back ----
# `h(...)` where h is a function gpe slices too, then TF work reading what h wrote: when the
# host runs h eagerly (its variant is not built yet, or another variant, or its entry does
# not fit), the TF part went on at once after the barrier that lets h start, and read the
# variable before h's eager write (`p2 1` printed twice; a Python bool and int off by one).
# The TF work after a nested call now waits for the host to be back from it (a gate).
V_NESTED = tf.Variable(0)


def _bump(a, j=0, k=2):  # (`k=` past `j`: a call gpe runs nested, not a callee's in the TF part)
    V_NESTED.assign_add(1)


def test_seed1390_tf_read_after_a_nested_call_run_eagerly_sees_its_write():
    def make(log):
        V_NESTED.assign(0)

        def main(x, n):
            s = _bump(n, k=int(tf.reduce_sum(x).numpy() > 0))
            print("p2", V_NESTED.numpy())
            i = V_NESTED
            return s, i, i > 2, x * 2.0
        return main, {"v": V_NESTED}
    # h runs eagerly here (its own variant is not built): its write runs on the host
    check(make, [(X, 1)] * 5, host_ops_allowed=frozenset({"AssignAddVariableOp"}))



def test_tf_read_after_a_nested_call_sees_the_host_write_at_its_end():
    """The same when the callee's TF part runs inside the caller's (nested): the callee's
    TF part is done before its host part's last statement writes the variable."""
    def program(wrap, log):
        v = tf.Variable(0.0)

        def tail(x):
            y = tf.reduce_sum(x) * 2.0
            time.sleep(0.02)
            try:  # runs on the host (its TF op eagerly), after the callee's TF part is done
                v.assign_add(y)
            except ValueError:
                pass
            return y
        tail = wrap(tail)

        def main(x):
            y = tail(x)
            return v.read_value() * 1.0, y
        main = wrap(main)
        return [main(X * float(i)) for i in range(5)], {"v": v}
    tail, main = differential(program)
    assert main.stats()["graph_calls"] == 4, main.stats()  # all but the profile call
    assert tail.stats()["graph_calls"] >= 3, tail.stats()  # nested in main's sliced calls



# seed 1618: an eager read of a variable by an op given the variable itself -----------------
# A call run eagerly right after a sliced one (here: another value of n, a profile call)
# read `tf.reduce_sum(v)` before the graph had finished the sliced call's write: the fence
# wrapped TF's Python variable ops, but TF's C++ fast path reads a variable passed to an op
# itself (`tf.reduce_sum(v)`, `tf.square(v)`, `tf.stack([v])`...), taking only its
# `_dtype` and `_handle`: `_handle` is a fenced property (host/runtime/fence.py). Graph work of
# tens of milliseconds makes the race certain.
BIG = tf.ones([192, 192])


def _queued_write(v, x):
    y = x
    for _ in range(10):
        y = tf.matmul(y, x) / 192.0
    v.assign(v * 0.5 + tf.reduce_sum(y[0]))


def test_seed1618_eager_call_after_a_sliced_call_sees_its_write():
    def make(log):
        v = tf.Variable(tf.zeros([3]))

        def main(x):
            first = [tf.reduce_sum(v)]
            _queued_write(v, x)
            return [float(e) for e in first]
        return main, {"v": v}
    # call 2 (another shape) is a profile call, run eagerly: it reads v first
    check(make, [(BIG,), (BIG,), (BIG[:160, :160],), (BIG,)], graph_calls=2)


def test_plain_ops_given_a_variable_after_sliced_calls_see_their_writes():
    reads = [lambda v: tf.reduce_sum(v), lambda v: tf.square(v)[0, :2],
             lambda v: tf.stack([v])[0, 0, :2], lambda v: tf.concat([v, v], 0)[0, :2],
             lambda v: tf.linalg.matvec(v, tf.ones([192]))[:2], lambda v: tf.reduce_max(v),
             lambda v: tf.gather(v, [1])[0, :2], lambda v: tf.identity(v)[0, :2]]

    def program(wrap, log):
        out = []
        for read in reads:
            v = tf.Variable(tf.zeros([192, 192]))
            def step(x, v=v):
                _queued_write(v, x)
            step = wrap(step)
            for _ in range(3):
                step(BIG)
                out.append(read(v))
        return out, {}
    made = differential(program)
    assert [f.stats()["graph_calls"] for f in made] == [2] * len(reads)


# seed 3247: `s += t` inside a statement the host runs whole --------------------------------
# Activity analysis counted the target of an augmented assignment as read only for a
# statement of its own: inside a `try` (an `if` or `with` the host runs) `s7 += ...` did not
# read s7, so the TF part computed s7 and never sent it: UnboundLocalError on the host.
def test_seed3247_augmented_assignment_inside_a_host_try_reads_its_target():
    def make(log):
        def main(x, n):
            s7 = tf.reduce_min(x) * 0.5
            n = (n + n) % 9
            try:
                s8 = tf.gather(x, n)
                s7 += tf.reduce_min(x) + s8
            except tf.errors.InvalidArgumentError:
                log.append("gather")
            return [n, x[-1]], s7
        return main, {}
    # the `try` runs on the host: its ops run eagerly there; n = 2 gathers out of range
    # (caught), and its first call is a profile call
    check(make, [(X, 1), (X, 1), (X * 2.0, 1), (X, 2), (-X, 2)], graph_calls=3,
          host_ops_allowed=frozenset({"GatherV2", "Min", "AddV2"}))


# seed 10432: an index out of range, from a value the host computed mid-call ----------------
# `s7 = x[int(V_i) % 4]` (s7 never used): a StridedSlice whose index reaches the graph at run
# time can fail on its value, but the part did not count it among the ops that can fail, so
# nothing waited for it: the graph pruned the unused slice (eager raises InvalidArgumentError,
# gpe returned a value), and a used one could fail after a later variable write had run.
def test_seed10432_unused_slice_with_an_index_from_the_host_still_raises():
    def make(log):
        v = tf.Variable(0)

        def main(x, n):
            s = tf.reduce_sum(x) * float(n)
            unused = x[int(v) % 4]  # noqa: F841
            v.assign_add(int(v) % 4 + 1)
            return s
        return main, {"v": v}
    # `int(v)` reads the variable on the host
    check(make, [(X, 1)] * 6, graph_calls=5, host_ops_allowed=frozenset({"ReadVariableOp"}))


def test_a_failing_slice_stops_the_variable_write_after_it():
    def make(log):
        v = tf.Variable(0)
        w = tf.Variable(1.0)

        def main(x, n):
            i = int(v) + n
            v.assign_add(1)
            y = x[i] * 2.0
            w.assign_add(1.0)
            log.append(n)
            return y + w
        return main, {"v": v, "w": w}
    check(make, [(X, 0)] * 5, graph_calls=4, host_ops_allowed=frozenset({"ReadVariableOp"}))


# A loop the host decides (`for i in tf.range(n)`) whose body can fail (`x[i]`): the While
# was never noted as failing (the ops after it are traced inside the next gate's cond), and
# a gate dropped the failing ops before it from the ones the host must wait for: the
# host's `log.append(n)` after the loop ran before the loop's error reached it.
def test_a_failing_slice_in_a_tensor_loop_stops_the_write_after_the_loop():
    def make(log):
        w = tf.Variable(1.0)

        def main(x, n):
            total = tf.constant(0.0)
            for i in tf.range(n):
                total += x[i]
            w.assign_add(total)
            log.append(n)
            return total
        return main, {"w": w}
    # the host iterates over the tensor `tf.range(n)`: a StridedSlice each iteration
    check(make, [(X, tf.constant(2)), (X, tf.constant(3)), (X, tf.constant(4)),
                 (X, tf.constant(1)), (X, tf.constant(5))], graph_calls=4,
          host_ops_allowed=frozenset({"StridedSlice"}))


# seed 10317: a caller's eager read of a variable its sliced helper wrote -------------------
# Mode "all": `h0` (sliced) writes V_v; `main`, in a call it runs eagerly, then checks
# `assert float(tf.reduce_sum(V_v).numpy()) < 3.0`. The read is TF's C++ fast path (the
# variable given to an op): before the `_handle` fence (host/runtime/fence.py) it could run before
# the graph had finished h0's write (a gpe-only AssertionError, once in 2,390 programs).
# Graph work of tens of milliseconds in h0: without the fence this test fails in most runs.
def test_seed10317_caller_run_eagerly_reads_what_its_sliced_helper_wrote():
    def program(wrap, log):
        v = tf.Variable(tf.zeros([3]))

        def h0(x):
            first = tf.reduce_sum(v)
            _queued_write(v, x)
            return first

        def main(x, y):
            s = h0(x) + tf.reduce_sum(y)
            total = float(tf.reduce_sum(v).numpy())
            if total >= 1e9:  # the seed's `assert` (pytest would rewrite an assert here)
                raise AssertionError("too big")
            log.append(round(total, 3))
            return s * 2.0
        h0, main = wrap(h0), wrap(main)
        # main's calls with a new shape are profile calls, run eagerly; h0's are sliced
        shapes = [3, 3, 2, 1, 0, 3]
        return [main(BIG * 0.5, X[:n]) for n in shapes], {"v": v}
    h0, main = differential(program)
    # main: calls 1, 3 and 4 are profile calls (y's shape relaxes after call 4); h0 is
    # sliced in calls 3 and 4 and nested in main's sliced calls (not counted as its own)
    assert main.stats()["graph_calls"] == 3, main.stats()
    assert h0.stats()["graph_calls"] == 2, h0.stats()


# seeds 12432, 12439, 12494, 12520, 12586, 12918: a TF `if` on a folded flag keeps a host value
# `z = scale` (host), then `if flag: z = tf.reduce_mean(x)` (a TF statement: `flag` is folded
# into the variant) and `x * z`: the TF part took `z` as always bound by the `if`, so the
# variant for `flag` False failed to trace (UnboundLocalError: a fallback, the call eager).
# A name a TF statement binds on some paths only keeps its value from before: sent to it.
def test_seed12432_tf_if_on_a_folded_flag_keeps_the_hosts_value_of_a_name():
    def make(log):
        v = tf.Variable(0.0)

        def main(x, flag, scale):
            z = scale
            if flag:
                z = tf.reduce_mean(x)
            t = x * z
            v.assign_add(tf.reduce_sum(t))
            log.append(round(float(z), 4))
            return t
        return main, {"v": v}
    # calls 1 and 3 are profile calls (flag False is a new variant); the flag-False variant
    # gets the host's Python float `z` sent and given back as that float (a NumPy value
    # would come back a tensor: that variant runs eagerly, seed 14522)
    check(make, [(X, True, 0.5), (X, True, 1.5), (X, False, 2.5), (X, False, 3.5),
                 (X * 2.0, True, 0.25), (X, False, -1.0)], graph_calls=4)


def test_tf_statements_binding_a_name_on_some_paths_keep_its_value_from_before():
    """The same for a TF `for` over a folded range that may not run and a TF `while`."""
    def make(log):
        def main(x, n):
            y = float(n) * 0.5
            for _ in range(n):
                y = tf.reduce_sum(x) + 1.0
            w = n + 1
            if n > 1:
                w = tf.reduce_max(x) * 2.0
            return x * y + w
        return main, {}
    # `y` a Python float the loop may leave (seed 14522) keeps its value from before on every
    # path: n = 0 and n = 2 each slice after a profile call, then n = 1 and n = 0 again run
    # the variant for any int (calls 2, 4, 6 and 7)
    check(make, [(X, 0), (X, 0), (X, 2), (X, 2), (X, 1), (X, 1), (X * 3.0, 0)], graph_calls=4)


# seed 12935: a value crossing mid-call that changes type from one loop iteration to the next
# `scale += round(float(t), 3)` (a Python float) then `scale += (loss * scale).numpy() * 2.0`
# (a NumPy float32 from then on) in a loop, `loss * scale` in the TF part after a tape: the
# gate's channel was built from the last value the profile call sent (float32), so every
# sliced call's first iteration failed its guard where the host cannot take over (the TF
# part holds the tape): a gpe-only GuardError, and the host marked the gate as passed, so
# cancelling the call waited at the crossing after it: the next call hung. Now a crossing
# whose values change type has the TF work reading it on the host, and a guard that fails
# where the host cannot take over cancels the call at that crossing.
def test_seed12935_a_value_changing_type_in_a_loop_crosses_at_a_gate():
    def make(log):
        v = tf.Variable(0.75)

        def main(x, n, scale):
            for _ in range(min(n + 1, 3)):
                scale += round(float(tf.constant(-0.25)), 3)
                with tf.GradientTape() as tape:
                    loss = tf.square(v * tf.reduce_min(x) - 1.0)
                g = tape.gradient(loss, v)
                v.assign_sub(0.1 * g)
                scale += (loss * scale).numpy() * 2.0
            return scale, tf.constant(-0.25) * 0.5 + v.read_value()
        return main, {"v": v}
    # `loss * scale` runs on the host; call 2 is a second profile call (sliced again then)
    check(make, [(X, 3, -0.5)] * 5, graph_calls=3, host_ops_allowed=frozenset({"Mul"}))


# seed 14522 (minimised): a NumPy value a TF `if` (never taken on these calls) may rebind
# came back from the TF part a tensor: eager printed `z 3.0`, gpe `z tf.Tensor(3.0, ...)`.
# A name kept from before a TF statement is taken into the TF part only when it holds a TF
# value; else the variant cannot be sliced (it runs eagerly), as before.
def test_seed14522_a_numpy_value_a_tf_if_may_rebind_stays_numpy():
    def make(log):
        def main(x, n):
            rows = [x[0] for _ in range(n)]
            z = tf.cast(n, tf.float32).numpy()
            if n == 0:
                z = rows[1]
            log.append((type(z).__name__, float(z)))
            print("z", z)
        return main, {}
    # it printed a tensor; then it ran eagerly; now `if n == 0:` on the folded n takes its
    # branch when sliced (none here), so z stays the NumPy value, as eagerly
    check(make, [(X, 3)] * 4, graph_calls=3)


# seed 17021 (and 17945): assumptions changed while a call was profiled ---------------
# A recursive function's profile call runs its own recursive calls, which made its int
# argument `k` sent (a new value at each of its first three calls) before the variant of
# the outer call was built: that variant folded k (its plan was sliced with k = 2) but was
# stored under the key the new assumptions give, "k: any int", and later calls with
# k = 1 and k = 3 ran it with k = 2 (eager 1 and 6, gpe 2 and 4).
def test_seed17021_a_variant_is_not_stored_under_assumptions_made_while_it_was_profiled():
    def program(wrap, log):
        def hr0(a, k):
            if k <= 0:
                return a
            t1 = a
            a = k
            return hr0w(a + tf.reduce_max(t1), k - 1)
        hr0w = wrap(hr0)
        return [hr0w(0, k=n) for n in (2, 2, 2, 0, 1, 1, 3, 2)], {}
    made = differential(program)
    stats = made[0].stats()
    # the innermost call returns before the recursive call's crossing: built speculating
    # no call reaches it (tests/test_unreached.py); the first that does finishes eagerly,
    # the variant is built again, and the caller again to run it nested (2 sliced a call)
    assert stats["graph_calls"] == 9, stats
    assert stats["variants_built"] == ["a: tensor int32(), k: a int", "a: int 0, k: a int",
                                       "a: tensor int32(), k: a int",
                                       "a: tensor int32(), k: a int", "a: int 0, k: a int"]


# seed 28793: `s += t` in a host loop reads s --------------------------------------------
# Activity analysis keeps a compound statement's reads to those exposed to values from
# before it (slicer/bindings.py); an augmented assignment's target is a Store there, so
# `s3 += V_s` in a host loop did not read s3: the TF statement before it that computed s3
# never sent it, and the first call that ran the loop body raised UnboundLocalError.
def test_seed28793_an_augmented_assignment_in_a_host_loop_reads_its_target():
    def make(log):
        v = tf.Variable(0.25)

        def main(x):
            s3 = v + 1.0
            for _ in range(3):
                if tf.reduce_sum(x) > 0:
                    break
                s3 += v  # s3 is not read after the loop
            return x
        return main, {"v": v}
    # the loop runs on the host (its test reads a tensor), with its TF ops
    check(make, [(X,), (X,), (-X,), (X,)], host_ops_allowed=frozenset(
        {"Sum", "Greater", "ReadVariableOp", "AddV2"}))


# seed 29733: an op that can fail, whose value nothing reads, in a loop body ---------------
# `s4 = x[i]` (never used) inside a loop the host drives: the TF part's loop body is a
# function of its own, and TF prunes from it what no output needs, so the out-of-range
# index never raised (eager: InvalidArgumentError). A block's result now waits for the
# ops of the block that can fail.
def test_seed29733_a_failing_op_nothing_reads_in_a_loop_body_still_raises():
    def make(log):
        def main(x, scale):
            for r3 in x:
                s4 = x[int(tf.reduce_sum(tf.cast(x * scale > 0, tf.int32)))]
            return tf.tanh(x)
        return main, {}
    p = tf.constant([0.4, 1.13, 0.47])  # scale 2.0: index 3, out of range
    # the loop over x runs on the host (so does the index's computation)
    check(make, [(p, -0.5), (p, -0.5), (p, 2.0), (p, -0.5)], graph_calls=3,
          host_ops_allowed=frozenset({"Mul", "Greater", "Cast", "Sum", "StridedSlice"}))


# seed 28520: a host loop whose test reads a variable its TF work changes ------------------
# `while v < 4.0: v.assign_add(...); print(...)`: the host runs the loop (the print) and
# tests `v < 4.0` again after each iteration, with nothing making that read wait for the
# iteration's assign_add in the TF part: now and then (3 runs in 40) it read the value from
# before and ran one more iteration (an extra line printed). Such a loop runs eagerly.
def test_seed28520_a_host_loop_testing_a_variable_its_tf_work_changes_runs_eagerly():
    def make(log):
        v = tf.Variable(0.0)

        def main(x, flag):
            v.assign(tf.clip_by_value(tf.constant(1.5), -3.0, 3.0))
            while v < 4.0:  # (a `continue` keeps the test from moving into the TF part)
                v.assign_add(1.0 + tf.abs(tf.reduce_mean(x)))
                print("p1", x.numpy())
                if flag:
                    continue
            return tf.constant(0.5)
        return main, {"v": v}
    check(make, [(X, True), (X, True), (-X, True), (X * 2.0, True)], graph_calls=0,
          host_ops_allowed=frozenset(
        {"AssignVariableOp", "ClipByValue", "Less", "ReadVariableOp", "Mean", "Abs",
         "AddV2", "AssignAddVariableOp"}))


# seeds 34854 and 34421: a number the host rebinds in a branch, sent to the TF part there --
# `if ...: n = n + n; s3 = tf.cast(n, tf.float32)` then `tf.cast(n, ...)` after the `if`:
# the host sent the new n at the gate of the branch's TF segment, and counted the TF part
# as having it after the `if`; but that copy was the segment's own (a parameter): after
# the `if` the TF part read n from before the branch (eager 6.0, gpe 3.0). From the
# 10,000-program run on c7cf304.
def test_seed34854_a_number_rebound_in_a_branch_is_sent_again_after_it():
    def make(log):
        def main(x, n):
            if 0 == 0:
                n = n + n
                s3 = tf.cast(n, tf.float32)
            else:
                raise ValueError(f"r{n}")
            return (tf.cast(n, tf.float32), n, x)
        return main, {}
    check(make, [(X, 3), (X, 3), (X * 2.0, 3), (X, 2), (X, 2)], graph_calls=3)


def test_seed34421_a_number_rebound_in_a_tensor_decided_branch():
    def make(log):
        def main(x, n, scale):
            if x[1] > 0.5:
                n = 1
                tf.cast(n, tf.float32)
            else:
                x
            t6 = x
            x -= n
            return [t6 > 0, scale, x]
        return main, {}
    up = tf.constant([0.19, 0.57, 1.25])
    down = tf.constant([0.95, -1.33, -0.74])
    check(make, [(up, 3, 0.5), (up, 3, 0.5), (up, 3, -0.5), (down, 3, -0.5), (up, 2, 0.5),
                 (down, 3, -0.5)], graph_calls=4)


# seeds 41876 and 49904 (the 10,000-program run on 824beeb: 2 in 10,000) --------------------
# 41876: `COUNT += 1` (a global) inside a tensor `while` in a branch, read by the host after
# the `if`: the loop was taken as a definer of COUNT (the host's own), so the TF part sent
# its trace-time COUNT back after the loop and the host's count was overwritten (eager 2,
# gpe 0). 49904: `n` (the host's new value) sent at a gate inside a tape's `with` block, read
# by TF work after the block: the TF part read the folded argument n there (eager 2.0,
# gpe 1.0): a value sent inside the block is the gate's segment's own.
COUNT_41876 = 0
V_S_49904 = tf.Variable(0.25)
V_W_49904 = tf.Variable(0.0)


def test_seed41876_a_host_counter_in_a_tensor_while_is_the_hosts_after_it():
    def make(log):
        global COUNT_41876
        COUNT_41876 = 0

        def main(x, n):
            global COUNT_41876
            if x[1] > 0:
                "p1"
            else:
                w1 = x[0]
                while w1 < 2.0:
                    w1 = w1 + 1.0
                    COUNT_41876 += 1
            COUNT_41876 = COUNT_41876
            log.append(COUNT_41876)
            return n
        return main, {}
    down = tf.constant([0.1, -0.5, 0.3])
    check(make, [(down, 1), (down, 1), (down * 2.0, 1), (-down, 1), (down, 1)])


def test_seed49904_a_value_sent_inside_a_tape_block_is_sent_again_after_it():
    def make(log):
        V_S_49904.assign(0.25)
        V_W_49904.assign(0.0)

        def main(x, n):
            g1 = lambda u: u + 1.0  # noqa: E731
            s2 = g1(V_S_49904)
            n = n + (s2.numpy() > 0)
            while V_W_49904 < 3.0:
                V_W_49904.assign_add(1.0)
            with tf.GradientTape():
                loss5 = X - s2
            return tf.cast(n, tf.float32), n, loss5
        return main, {"s": V_S_49904, "w": V_W_49904}
    check(make, [(X, 1), (X, 1), (-X, 1), (X, 1)],  # (the lambda's add runs on the host)
          host_ops_allowed=frozenset({"ReadVariableOp", "AddV2"}))


# found beside seeds 60325 and others (a name a TF `if` on a folded flag may leave): a Python
# string the `if` (not taken) left came back from the TF part a string tensor: eager printed
# `w s`, gpe `w tf.Tensor(b's', ...)`. The TF part gives back no Python string or NumPy
# value (tfprog/part.py): that variant runs eagerly.
def test_a_string_a_tf_if_may_leave_stays_a_string():
    def make(log):
        def main(x, flag):
            w = "s"
            if flag:
                w = tf.reduce_sum(x)
            print("w", w)
            return x * 2.0
        return main, {}
    # calls 1 and 3 are profile calls; the flag is folded (each variant takes its branch,
    # the host keeps its own string where the flag is False), so both variants run sliced
    check(make, [(X, True), (X, True), (X, False), (X, False), (X * 2.0, True)], graph_calls=3)


# found beside the test above: NumPy 2 names np.bool_'s type "bool", as Python's bool, and the
# channels labelled a NumPy value with its type's name, so a NumPy bool the host sent passed
# for a Python bool: the TF part gave it back (a NumPy float it refuses to) and the host
# turned it into a Python bool (eager returned np.True_, gpe True). A NumPy value now carries
# a label no Python type has (tfprog/channels.py): that variant runs eagerly.
def test_a_numpy_bool_a_tf_if_may_leave_stays_a_numpy_bool():
    def make(log):
        def main(x, flag, b):
            s = b
            if flag:
                s = x > 0.0
            return x * 2.0, s
        return main, {}
    for b in (np.bool_(True), True):
        # calls 1 and 3 are profile calls; the flag is folded: where it is False the host
        # keeps its own `b` (nothing crosses back), so both variants run sliced
        check(make, [(X, True, b), (X, True, b), (X, False, b), (X, False, b),
                     (X * 2.0, True, b)], graph_calls=3)


# seeds 63156 and 66449 (the 10,000-program run on 9250045): numbers the host rebinds ------
# A number the host rebinds (`n += 1` in a loop the TF part unrolls, a `while` counter)
# read by a conditional expression whose sides are TF work: the TF part took the test as
# fixed for the call, at the value it had when the call began, and computed the other
# side (V_v 4x eager's; a list holding `x` where eager's held `n`). Fixed by 6f9de44 (the
# expression's host temporary stays on the host) and e2b81e8 (a rebound number is not
# fixed for the call); both programs differ on 9250045.
def test_seed63156_a_number_rebound_in_an_unrolled_loop_decides_a_tf_expression():
    def make(log):
        v = tf.Variable(tf.zeros([3]))

        def main(x, n, scale):
            for k7 in range(x.shape[0]):
                v.assign_add(tf.fill([3], (tf.reduce_sum(x) if k7 % 2 == 0 else x[0])
                                     if n % 2 == 0 else tf.reduce_sum(x) * scale))
                n += 1
            return n
        return main, {"v": v}
    # (the expression's sum and product run on the host, eagerly, as the test needs)
    check(make, [(X, 0, 0.5), (X, 0, 0.5), (X * 2.0, 0, 0.5), (-X, 0, 0.5)],
          host_ops_allowed=frozenset({"Sum", "Mul"}))


def test_seed66449_a_while_counter_decides_a_conditional_expression_after_it():
    def make(log):
        def main(x, n, flag):
            c7 = 0
            lim8 = 1 + 1
            while c7 < lim8:
                c7 += 1
            l11 = [n if c7 % 2 == 0 else x]
            return [flag, l11]
        return main, {}
    # (no TF work: it runs eagerly, as a variant doing only host work would cost more)
    check(make, [(X, 3.0, True), (X, 3.0, True), (X * 2.0, 3.0, True), (-X, 3.0, True)],
          graph_calls=0)


# seed 80328: the host's eager code after a rescue read a variable before the TF part's
# write of it in the same call ------------------------------------------------------------
# A gate whose value no longer fits its channel (the branch's value was first seen this
# call) rescues the call: the TF part stops and the host finishes the call eagerly. The
# host's eager reads run on the call's own thread, which takes no fence, so `V.assign(...)`
# the TF part ran before the gate could still be pending: `tf.reduce_sum(V)` after it read
# the value before the write (call 2: 5.625 where eager has 2.8125; 4 runs in 12 under
# load). Here the TF part does slow work before its write, so the race is lost every time.
def test_seed80328_eager_code_after_a_rescue_sees_the_tf_parts_earlier_writes():
    big = tf.ones([400, 400]) * 1e-3

    def make(log):
        v = tf.Variable(tf.zeros([3]))

        def main(x, n):
            slow = tf.reduce_sum(tf.linalg.matmul(tf.linalg.matmul(big, big), big))
            v.assign(v * 0.5 + tf.cast(n, tf.float32) + slow * 0.0)
            z = 0.0
            noise = tf.random.stateless_uniform(tf.shape(x), seed=[94, 58])
            if n % 2 == 0 and tf.reduce_sum(x * noise) > 0:  # decided on the host
                z = (tf.reduce_sum(x) if int(tf.reduce_sum(x).numpy() > 0) % 2 == 0
                     else tf.reduce_sum(x)) * 0.5 + tf.square(tf.reduce_sum(x))
            t = x * z
            seen = [tf.reduce_sum(v)]
            v.assign(v * 0.5 + tf.constant(1.5))
            return seen, t
        return main, {"v": v}
    # the third call takes the branch first: its gate's value does not fit (rescued)
    # (the host's own ops: the branch's value, and the rescued call's rest, eagerly)
    check(make, [(-X, 0), (-X, 0), (X, 0), (-X, 0), (-X, 0)], graph_calls=3,
          host_ops_allowed=frozenset({"Sum", "Mul", "AddV2", "Greater", "ReadVariableOp",
                                      "AssignVariableOp"}))


# seed 343 (the generator's list subclasses, issue 29's fuzzer item): a helper given a list
# subclass or a namedtuple of tensors built in a sliced caller -------------------------------
# With the helper wrapped by gpe.function (as `gpe run` and mode "all" do) and called by its
# global name from a sliced main, the helper's result was frozen at the profile call's
# value from the third call on, when the helper converts the whole container (tf.stack,
# tf.add_n); reading it item by item (st[0]) gives eager's values, and so does a plain list
# or tuple. Minimised from seed 343 (its program: `hc0(TL([tf.reduce_sum(V_v),
# tf.reduce_sum(x)]))`, hc0 returning tf.reduce_sum(tf.stack(st)): STATE["last"] 0.76
# where eager has -0.47 at the third call).
class _TL(list):
    """A list subclass, as Keras' TrackedList."""


_P = collections.namedtuple("_P", "h c")
_CONTAINERS = {"subclass": _TL, "namedtuple": lambda items: _P(*items), "list": list,
               "tuple": tuple}
_SEED343 = {"container": list}  # the container the test builds


def stack_343(st):
    return tf.stack(st)


def add_n_343(st):
    return tf.add_n(st)


def index_343(st):
    return st[0] * 1.0 + st[1] * 0.5


def main_stack_343(x):
    return stack_343(_SEED343["container"]([x[0], tf.reduce_sum(x)]))


def main_add_n_343(x):
    return add_n_343(_SEED343["container"]([x[0], tf.reduce_sum(x)]))


def main_index_343(x):
    return index_343(_SEED343["container"]([x[0], tf.reduce_sum(x)]))


@pytest.mark.parametrize("container, read", [
    ("subclass", "stack"), ("namedtuple", "stack"), ("subclass", "add_n"),
    ("namedtuple", "add_n"), ("subclass", "index"), ("namedtuple", "index"),
    ("list", "stack"), ("tuple", "add_n")])
def test_seed343_a_container_subclass_given_to_a_wrapped_helper_is_not_frozen(container, read):
    _SEED343["container"] = _CONTAINERS[container]
    name = f"{read}_343"

    def program(wrap, log):
        plain = globals()[name]
        globals()[name] = wrap(plain)  # main reads it by its global name, as gpe run wraps it
        try:
            main = wrap(globals()[f"main_{name}"])
            return [main(x) for x in (X, X, X * 2.0, -X, X * 3.0)], {}
        finally:
            globals()[name] = plain
    made = differential(program)
    assert made[1].stats()["graph_calls"] == 4, made[1].stats()  # main: all but the profile call


# seed 786 (the generator's list subclasses): a helper gpe slices by itself, given a list
# subclass by a caller that runs eagerly --------------------------------------------------
# main raises at its end (every call, so it is profiled and run eagerly throughout); the
# helper it calls by its global name converts a list subclass of this call's tensors whole
# (tf.stack): the helper's value was the third call's from then on (eager logs each call's).
# Minimised from seed 786 (hc0 called three times a call with `TL([...])` and `[...]`, and
# a NameError at main's end). Fixed with seed 343 by a6af123 (fails on 9cd85b8).
LOG_786 = []


def stack_786(st):
    LOG_786.append(tf.stack(st))


def main_786(x, n):
    stack_786(_TL([x[0], tf.reduce_sum(x)]))
    raise ValueError("after")


def main_list_786(x, n):
    stack_786([x[0], tf.reduce_sum(x)])
    raise ValueError("after")


@pytest.mark.parametrize("fn", [main_786, main_list_786])
def test_seed786_a_list_subclass_given_to_a_helper_of_an_eager_caller_is_not_frozen(fn):
    def make(log):
        global LOG_786
        LOG_786 = log
        return fn, {}
    check(make, [(X, 1), (X, 1), (X * 2.0, 1), (-X, 1), (X * 3.0, 1)], graph_calls=0)


# seed 1299 (the generator's list subclasses): a list subclass as the argument of a
# gpe.function ------------------------------------------------------------------------------
# The simplest of the three (343, 786, 1299; one cause): a function wrapped by
# gpe.function given a list subclass of tensors returned one earlier call's value for every
# later call (a plain list first, then list subclasses: the first subclass call's value).
# Minimised from seed 1299: hc0 (wrapped, as in mode all) given `[V_s.read_value(), n]` and
# then `TL([tf.cast(V_i, tf.float32), s6])`, asserting on tf.reduce_sum of it: eager's
# AssertionError at the first call of main was not raised under gpe. Fixed with seed 343
# by a6af123 (fails on 9cd85b8).
def sum_1299(st):
    return tf.reduce_sum(st)


@pytest.mark.parametrize("first, later", [(_TL, _TL), (list, _TL), (list, list), (tuple, tuple)])
def test_seed1299_a_list_subclass_argument_is_not_taken_as_a_constant(first, later):
    def program(wrap, log):
        f = wrap(sum_1299)
        calls = [first([tf.constant(0.25), 3.0])] + [
            later([tf.constant(v), tf.constant(v)]) for v in (1.0, 2.0, 3.0, 4.0)]
        return [f(st) for st in calls], {}
    (f,) = differential(program)
    assert f.stats()["graph_calls"] >= 3, f.stats()


# seed 1641: a nested call ran the callee variant its caller's TF part runs, for another key
# A sliced caller's TF part runs the callee's variant of its slot; a nested call takes it
# only when the call's own key gives that variant. Where the call's key had no variant yet
# (k = 3 after the variant built for k = 0), the slot's variant ran anyway: its host program
# (`if k <= 0:` folded, the branch for k = 0) returned early, and the LOG entries of the
# recursion were lost (eager 14, gpe 6).
def test_seed1641_a_nested_call_runs_only_the_variant_of_its_own_key():
    def program(wrap, log):
        v = tf.Variable(0)

        def hr(a, k):
            if k <= 0:
                return a + 1.0
            log.append(k)
            return hrw(a * 0.5, k - 1) * 0.5

        def main(x):
            s = hrw(tf.reduce_max(x), min(int(v.numpy()) % 5, 3))
            v.assign_add(3)
            return s
        hrw, mainw = wrap(hr), wrap(main)
        return [mainw(X) for _ in range(6)], {"v": v}
    differential(program)


# seed 7339: a rescue at a gate in front of an augmented assignment lost its target --------
# The live values a rescue hands back were the names read later, and `t1 *= k` reads t1
# through a Store Name only: a call that reached the gate no profile call had reached (k
# sent to the TF part, the recursion's base case folded away) finished eagerly without
# t1, an UnboundLocalError under gpe only. scope.reads counts an augmented assignment's
# target as read (bindings had the same fix for seed 28793, now shared).
def test_seed7339_a_rescue_before_an_augmented_assignment_hands_back_its_target():
    def program(wrap, log):
        def hr(a, k):
            if k <= 0:
                return a * 2.0
            log.append(k)
            t1 = a
            t1 *= k  # (t1 read here only)
            return hrw(a * 0.5, k - 1)

        def main(x, n):
            return hrw(x, k=n - 1)
        hrw, mainw = wrap(hr), wrap(main)
        return [mainw(x, 3) for x in (-X, -X, X, X * 2.0, X)], {}
    made = differential(program)
    stats = made[0].stats()
    assert stats["graph_calls"] >= 3, stats  # the helper's own and nested sliced calls
    assert any("no profile call had reached it" in g for g in stats["guard_failures"]), stats


# seed 45534: a helper's tape block was judged by its `with` alone -------------------------
# A callee is judged all TF work (traced into its caller's TF part) when every statement is
# TF work; a `with tf.GradientTape()` is placed TF, and the statements inside it were not
# looked at. A helper whose tape block called a host helper (`log.append(tf.cast(k, ...))`)
# was traced: the append ran once, at tracing, leaving a graph tensor in the program's list,
# and never again (eager 6 entries, gpe 3 and a SymbolicTensor).
def test_seed45534_a_host_statement_in_a_helpers_tape_keeps_it_on_the_host():
    def make(log):
        def h0(a, k):
            log.append(tf.cast(k, tf.float32))

        def h1(a, b):
            with tf.GradientTape() as tape3:
                s6 = h0(0.1, 1)

        def main(x, n, flag, scale):
            t7 = h1(x, b=x)
            return x * scale
        return main, {}
    # h1 runs on the host (its cast eagerly), main's multiplication in the graph
    check(make, [(X, 3, False, 1.5)] * 6, host_ops_allowed=frozenset({"Cast"}))


def test_a_print_in_a_helpers_tape_runs_at_every_call():
    def make(log):
        def grad_of_square(a):
            with tf.GradientTape() as tape:
                tape.watch(a)
                y = tf.reduce_sum(a * a)
                print("in the tape")
            return tape.gradient(y, a)

        def main(x):
            g = grad_of_square(x)  # (sliced too: the print on its host, the rest in the graph)
            return g
        return main, {}
    check(make, [(X,), (X * 2.0,), (-X,), (X,), (X * 2.0,), (-X,)], graph_calls=3,
          profile_calls=3)
