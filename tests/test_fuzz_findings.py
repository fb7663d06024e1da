"""Regression tests for what the differential fuzzer (tests/fuzz) found: each test is the
minimised program of a seed (and a few programs of the same class), run eagerly and under
gpe, everything observable compared, with the calls that must have run sliced.
"""
import tensorflow as tf

from harness import Var, check

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
