"""Differential tests: control flow and other compound statements run on the host.

The host runs a compound statement whole (any TF op inside it runs eagerly there, in
program order); the TF work around it stays in the graph, and TF work after a statement
that may return, or that touches TF state, waits for the host to get there.
"""
import numpy as np
import pytest
import tensorflow as tf

from harness import check

X = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3) / 10)


def test_if_on_a_host_value_around_tf_work():
    def make(log):
        v = tf.Variable(tf.ones([3]))

        def step(x, step_no):
            loss = tf.reduce_sum(tf.matmul(x, tf.reshape(v, [3, 1])))
            if step_no % 2 == 0:
                log.append(("even", float(loss)))
            else:
                log.append("odd")
            v.assign_sub(0.1 * tf.reduce_mean(x, axis=0))
            return loss
        return step, {"v": v}
    check(make, [(X, 0.0), (X, 1.0), (X, 2.0), (X, 3.0), (X, 4.0)])


def test_raise_on_a_tf_value_stops_later_updates():
    def make(log):
        v = tf.Variable(1.0)

        def guarded(x):
            loss = tf.reduce_sum(x) * v
            if loss.numpy() > 2.0:
                raise FloatingPointError(f"loss {float(loss):.3f} too large")
            v.assign(v * 1.5)
            log.append(float(v.numpy()))
            return loss
        return guarded, {"v": v}
    under = check(make, [(X,)] * 6)
    assert sum(isinstance(r, tuple) and r[0] == "raised" for r in under.results) >= 2


def test_early_return_cancels_the_rest():
    def make(log):
        v = tf.Variable(0.0)

        def maybe(x, skip):
            total = tf.reduce_sum(x)
            if skip:
                return total
            v.assign_add(total)
            log.append("updated")
            return v.read_value()
        return maybe, {"v": v}
    check(make, [(X, False), (X, True), (X, False), (X, True), (X, True), (X, False)],
          graph_calls=4)  # skip=True and skip=False are two signatures (bools fold)


def test_for_and_while_loops_on_host_values():
    def make(log):
        w = tf.Variable(tf.ones([3, 1]))

        def train(x, n):
            y = tf.matmul(x, w)
            total = 0.0
            for i in range(int(n)):
                total += i * 0.5
            k = 0
            while k < 3:
                k += 1
                if k == 2:
                    continue
                log.append(k)
            w.assign_add(tf.ones([3, 1]) * total)
            return y
        return train, {"w": w}
    check(make, [(X, 3.0), (X, 4.0), (X, 2.0), (X, 5.0)])


def test_loop_with_tf_work_inside_runs_on_host_and_matches():
    def make(log):
        def unrolled(x, steps):
            h = tf.zeros([2, 3])
            for t in range(steps):
                h = tf.tanh(h + x * float(t))
            out = tf.reduce_sum(h * h)
            return out
        return unrolled, {}
    # the loop's TF ops run eagerly on the host; the reduction after it is in the graph
    under = check(make, [(X, 3), (X, 3), (X, 3)],
                  host_ops_allowed=frozenset({"AddV2", "Mul", "Tanh", "Cast", "Fill",
                                              "Const"}))
    assert "Sum" not in under.host_ops


def test_try_except_finally_on_the_host():
    def make(log):
        v = tf.Variable(2.0)

        def careful(x, d):
            s = tf.reduce_sum(x)
            try:
                r = float(s) / d
            except ZeroDivisionError as exc:
                log.append(type(exc).__name__)
                r = -1.0
            finally:
                log.append("finally")
            v.assign(v + r)
            return v.read_value()
        return careful, {"v": v}
    check(make, [(X, 2.0), (X, 0.0), (X, 4.0), (X, 0.0)])


COUNTER = 0


def test_global_and_nested_function():
    def make(log):
        global COUNTER
        COUNTER = 0

        def step(x):
            global COUNTER
            COUNTER += 1
            y = tf.reduce_sum(x) * 2.0

            def describe(v):
                return f"{COUNTER}:{float(v):.2f}"
            log.append(describe(y))
            return y + COUNTER
        return step, {}
    check(make, [(X,)] * 4)


def test_host_with_statement_and_assert():
    from programs import host_with_and_assert
    under = check(host_with_and_assert, [(X,), (X * 100,), (X,)])
    assert under.results[1] == ("raised", "AssertionError", "too big")


def test_generator_function_runs_eagerly():
    import gpe

    def gen(x):
        yield x * 2.0

    sliced = gpe.function(gen)
    with pytest.warns(gpe.GpeWarning, match="generators"):
        out = list(sliced(X))
    assert np.array_equal(out[0].numpy(), (X * 2.0).numpy())


def test_loop_fixed_for_the_call_is_unrolled_in_the_graph():
    def make(log):
        w = tf.Variable(tf.eye(3) * 0.5)

        def rnn(x, steps, training):
            h = tf.zeros([2, 3])
            for t in range(steps):
                h = tf.tanh(tf.matmul(h, w) + x * float(t + 1))
            if training:
                h = h * 0.5
            else:
                h = h * 2.0
            out = tf.reduce_sum(h * h)
            log.append(float(out))
            return out
        return rnn, {"w": w}
    under = check(make, [(X, 3, True)] * 3 + [(X, 3, False)] * 3 + [(X, 5, True)] * 2,
                  graph_calls=5)  # three signatures: (3, True), (3, False), (5, True)
    assert under.target.stats()["variants"] == 3
    assert "Tanh" not in under.host_ops


def test_loop_counter_read_on_the_host_after_an_unrolled_loop_runs_eagerly():
    import gpe

    def last_index(x):
        y = x
        for t in range(3):
            y = y * 2.0
        return t, y
    sliced = gpe.function(last_index)
    with pytest.warns(gpe.GpeWarning, match="unrolls"):
        for _ in range(3):
            t, y = sliced(X)
            assert t == 2 and isinstance(t, int)
            assert np.array_equal(y.numpy(), (X * 8.0).numpy())


def test_star_args_kwargs_and_lists_of_tensors():
    def make(log):
        v = tf.Variable(1.0)

        def combine(*tensors, scale=1.0, **extra):
            total = tf.add_n(list(tensors)) * scale
            for name in sorted(extra):
                log.append((name, float(tf.reduce_sum(extra[name]))))
            v.assign_add(tf.reduce_sum(total))
            return total
        return combine, {"v": v}
    a, b = X, X * 2
    check(make, [(a, b), (a, b, {"__kwargs__": True, "scale": 0.5, "bias": a}),
                 (a, b), (a, b, {"__kwargs__": True, "scale": 0.5, "bias": a}), (a, b)],
          graph_calls=3, host_ops_allowed=frozenset({"Sum", "Const"}))
    # `extra[name]` with `name` a key only the host knows is indexed on the host (the dict
    # of tensors crosses): the calls with `extra` are another key, profiled once (so 3
    # of the 5 calls run sliced; before, the loop was followed by the TF part until a
    # profile call saw `name` cannot cross, and sliced and profiled again: 2 of 5)


def test_a_tuple_of_tensors_argument_crosses_as_a_structure():
    def make(log):
        def stack_all(pair, weights):
            a, b = pair
            return tf.add_n([a * weights["a"], b * weights["b"]])
        return stack_all, {}
    calls = [((X, X + 1), {"a": X, "b": X * 3})] * 4
    under = check(make, calls)
    plan = under.target.last_plan
    assert [c.names for c in plan.channels if c.kind.name == "ENTRY"] == [("pair", "weights")]


def test_conditional_expressions_on_a_folded_flag_run_in_the_graph_and_others_on_the_host():
    """`0.5 if training else 1.0` and `tf.reduce_sum(x * rate) if training else ...` inside a
    tape: the flag is folded (the call key guards it), so the TF part evaluates the
    expression when traced; on a tensor's value it stays host work, eagerly."""
    def make(log):
        def step(x, training):
            rate = 0.5 if training else 1.0
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = tf.reduce_sum(x * rate) if training else tf.reduce_sum(x)
            z = x * 2.0 if float(tf.reduce_sum(x)) > 0.0 else -x
            return y, tape.gradient(y, x), rate, z
        return step, {}
    x = tf.constant([0.5, -0.25, 1.0])
    check(make, [(x, True), (x, True), (-x * 4.0, True), (x, False), (x, False)],
          graph_calls=3, host_ops_allowed=frozenset({"Sum", "Mul", "Neg"}))


def test_a_conditional_expression_on_a_tensors_value_inside_tf_work_is_host_work():
    """Found by the fuzzer once it wrote conditional expressions: `v.assign_add(tf.fill(
    [3], a if int(t) > 1 else b))` and `[(a if int(t) % 2 == 0 else b) * 1.5 for q in
    range(n)]` were TF statements with the `int(t)` inside (every call eager: "tracing the
    TF part failed"). The expression is computed on the host and sent; the comprehension
    is a host list."""
    def make(log):
        v = tf.Variable(tf.zeros([3]))

        def main(x, n):
            v.assign_add(tf.fill([3], tf.reduce_sum(x) if int(
                tf.reduce_sum(tf.cast(x > 0, tf.int32))) > 1 else tf.reduce_sum(v)))
            parts = [(x[0] if int(tf.argmax(x)) % 2 == 0 else x[1]) * 1.5 +
                     tf.cast(q, tf.float32) for q in range(n)]
            return parts, v * 2.0
        return main, {"v": v}
    x = tf.constant([0.5, 1.0, -1.0])
    check(make, [(x, 2), (x, 2), (-x, 2), (x * 3.0, 2)],
          host_ops_allowed=frozenset({"Sum", "Cast", "Greater", "ArgMax", "StridedSlice",
                                      "Mul", "AddV2", "ReadVariableOp"}))


def test_an_empty_list_the_tf_part_returns_crosses():
    """A list comprehension over a range this call's argument makes empty (`range(n)`, n
    fixed for the call at 0) returns []: it crosses as one None the host does not read (a
    queue needs a component). Before, tracing failed (QueueEnqueueV2 with no components)
    and the function ran eagerly; the calls with n = 2 slice as before."""
    def make(log):
        def outputs(x, n):
            outs = [x * float(q) for q in range(n)]
            return outs, tf.reduce_sum(x)
        return outputs, {}
    check(make, [(X, 0)] * 4)
    check(make, [(X, 2)] * 4)
