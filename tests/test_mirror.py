"""Differential tests: loops and branches the host decides, with TF work inside.

The host runs the `for`/`while`/`if` and tells the TF part each iteration or the branch
taken; the TF work inside, a tensor test included, runs in the graph (the harness fails a
test if any TF op of the sliced calls runs on the host, beyond a test's allowed set).
"""
import io

import numpy as np
import tensorflow as tf

import gpe
from harness import check

RNG = np.random.default_rng(7)
XS = [tf.constant(RNG.normal(size=(2, 3)).astype(np.float32)) for _ in range(4)]
H0 = tf.zeros([2, 4])


def _weights():
    rng = np.random.default_rng(3)  # the same weights for the eager run and gpe's
    return (tf.Variable(rng.normal(size=(3, 4)).astype(np.float32)),
            tf.Variable(rng.normal(size=(4, 4)).astype(np.float32) * 0.5))


def test_for_over_a_list_of_tensors_carries_the_state_in_the_graph():
    def make(log):
        w, u = _weights()

        def rnn(xs, h):
            for x in iter(xs):  # any host iterable: the TF part is told each iteration
                h = tf.tanh(tf.matmul(x, w) + tf.matmul(h, u))
            return h
        return rnn, {"w": w, "u": u}
    under = check(make, [(XS, H0)] * 4 + [(XS[:3], H0)] * 3, graph_calls=5)
    text = gpe.explain(under.target, file=io.StringIO())
    assert "the host tells the TF part each iteration" in text, text


def test_for_over_a_list_argument_is_unrolled():
    def make(log):
        w, u = _weights()

        def rnn(xs, h):
            for i, x in enumerate(xs):  # the call key fixes len(xs)
                h = tf.tanh(tf.matmul(x, w) + tf.matmul(h, u)) * (1.0 + i)
            return h
        return rnn, {"w": w, "u": u}
    under = check(make, [(XS, H0)] * 4 + [(XS[:3], H0)] * 3, graph_calls=5)
    text = gpe.explain(under.target, file=io.StringIO())
    assert "loop fixed for the call, unrolled" in text, text


def test_for_over_enumerate_and_zip_with_updates_each_iteration():
    def make(log):
        v = tf.Variable(tf.ones([3]))

        def fit(xs, ys, lr):
            total = tf.zeros([])
            for i, (x, y) in enumerate(zip(xs, ys)):
                err = tf.reduce_sum((x * v - y) ** 2)
                v.assign_sub(lr * (i + 1) * tf.reduce_mean(x, axis=0))
                total = total + err
                log.append(i)
            return total
        return fit, {"v": v}
    ys = [x * 2.0 for x in XS]
    check(make, [(XS, ys, 0.01), (XS, ys, 0.02), (XS, ys, 0.03), (XS[:2], ys[:2], 0.01)] * 2,
          graph_calls=6)


def test_while_on_a_host_value():
    def make(log):
        v = tf.Variable(tf.fill([3], 10.0))

        def decay(lr):
            n = 0
            while lr > 0.01:
                v.assign_sub(lr * v)
                lr = lr / 2
                n += 1
            log.append(n)
            return v.read_value()
        return decay, {"v": v}
    check(make, [(0.5,), (0.3,), (0.05,), (0.2,), (0.005,), (0.4,)])


def test_while_on_a_tensor_test_runs_its_body_in_the_graph():
    def make(log):
        def shrink(x):
            steps = 0
            while tf.reduce_sum(x) > 1.0:
                x = x * 0.5 + 0.01
                steps += 1
            log.append(steps)
            return x
        return shrink, {}
    xs = [(X,) for X in (XS[0] ** 2 * 4, XS[1] ** 2, XS[2] ** 2 * 9, XS[3] ** 2 * 2)]
    check(make, xs * 2)


def test_if_on_a_tensor_selects_tf_work_in_either_branch():
    def make(log):
        v = tf.Variable(tf.zeros([3]))

        def step(x):
            s = tf.reduce_sum(x)
            y = tf.zeros([2, 3])
            if s > 0:
                y = x * 2.0
                v.assign_add(tf.reduce_mean(x, axis=0))
            elif s > -1:
                log.append("small")
                y = x - 1.0
            else:
                z = tf.abs(x)
                log.append(("negative", float(tf.reduce_max(z))))
            return y + 1.0
        return step, {"v": v}
    calls = [(XS[i] + d,) for i in range(4) for d in (-1.0, 0.0, 1.0)]
    check(make, calls)


def test_if_on_a_host_value_around_an_update():
    def make(log):
        v = tf.Variable(tf.ones([3]))

        def step(x, step_no):
            g = tf.reduce_mean(x, axis=0)
            if step_no % 3 == 0:
                v.assign(v * 0.5)
                log.append("decay")
            v.assign_sub(0.1 * g)
            return tf.reduce_sum(v)
        return step, {"v": v}
    check(make, [(XS[i % 4], float(i)) for i in range(9)])


def test_break_at_the_end_of_the_body_and_a_value_bound_in_the_loop():
    def make(log):
        v = tf.Variable(tf.ones([3]))

        def train(xs, threshold):
            for x in xs:
                loss = tf.reduce_sum(x * v) ** 2
                v.assign_sub(0.05 * tf.reduce_mean(x, axis=0))
                if float(loss) < threshold:
                    break
            return loss
        return train, {"v": v}
    check(make, [(XS, 0.5), (XS, 2.0), (XS, 0.1), (XS, 5.0), (XS, 1.0)])


def test_return_and_raise_inside_the_loop_cancel_the_rest_of_the_call():
    def make(log):
        v = tf.Variable(tf.zeros([3]))

        def run(xs, stop_at, fail_at):
            for i, x in enumerate(xs):
                v.assign_add(tf.reduce_sum(x, axis=0))
                if i == stop_at:
                    return v.read_value()
                if i == fail_at:
                    raise ValueError(f"failed at {i}")
                log.append(i)
            v.assign(v * 2.0)
            return v.read_value()
        return run, {"v": v}
    calls = [(XS, a, b) for a, b in [(9.0, 9.0), (1.0, 9.0), (9.0, 2.0), (0.0, 9.0),
                                     (9.0, 9.0), (9.0, 0.0), (3.0, 9.0), (9.0, 9.0)]]
    # the early `return v.read_value()` is host work (a `return`): it reads v eagerly
    check(make, calls, host_ops_allowed=frozenset({"ReadVariableOp", "Identity"}))


def test_nested_loops_and_printing_inside():
    def make(log):
        w, _ = _weights()

        def nested(batches):
            total = tf.zeros([])
            for xs in batches:
                for x in xs:
                    total = total + tf.reduce_sum(tf.matmul(x, w))
                print("batch", round(float(total), 4))
            return total
        return nested, {"w": w}
    batches = [XS[:2], XS[2:], XS[1:3]]
    check(make, [(batches,), (batches[:2],), (batches,), (batches[1:],)] * 2, graph_calls=6)


def test_for_over_a_dict_a_tensor_and_a_generator():
    def make(log):
        v = tf.Variable(tf.zeros([3]))

        def mix(weights, t):
            for name, scale in weights.items():     # a dict of Python numbers
                v.assign_add(tf.reduce_sum(t, axis=0) * scale)
                log.append(name)
            for row in t:                            # rows of a tensor
                v.assign_sub(row * 0.1)
            total = tf.zeros([])
            for k in (i * i for i in range(3)):      # a generator
                total = total + tf.reduce_sum(v) * k
            return total
        return mix, {"v": v}
    weights = {"a": 0.5, "b": 2.0}
    # the tensor argument's rows: unrolled in the graph (the call key fixes its length)
    under = check(make, [(weights, XS[i % 4]) for i in range(6)])
    text = gpe.explain(under.target, file=io.StringIO())
    assert any("for row in t:" in line and "unrolled" in line for line in text.splitlines())


def test_continue_last_in_the_body_and_an_if_inside_a_loop():
    def make(log):
        v = tf.Variable(tf.zeros([2, 3]))

        def walk(xs, limit):
            for i, x in enumerate(xs):
                y = x * 2.0
                if float(tf.reduce_sum(y)) > limit:
                    v.assign_add(y)
                else:
                    v.assign_sub(x)
                    log.append(("small", i))
                if i % 2 == 0:
                    continue
            return tf.reduce_sum(v)
        return walk, {"v": v}
    check(make, [(XS, 0.0), (XS, 1.0), (XS, -1.0), (XS, 0.5), (XS, 0.0)])


def test_loop_else_and_try_inside_run_on_the_host():
    def make(log):
        v = tf.Variable(0.0)

        def search(xs, target):
            for x in xs:
                s = tf.reduce_sum(x)
                if float(s) > target:
                    break
            else:
                log.append("not found")
            try:
                v.assign_add(s)
            except ValueError:
                log.append("failed")
            return s
        return search, {"v": v}
    # every statement runs on the host: no variant is built (it would only add crossings)
    under = check(make, [(XS, 0.0), (XS, 100.0), (XS, -100.0)] * 2, graph_calls=0)
    assert any("no TF work" in r for r in under.target.stats()["fallbacks"])


def test_an_exception_inside_a_branch_the_tf_part_follows():
    def make(log):
        v = tf.Variable(tf.ones([3]))

        def guarded(x, strict):
            g = tf.reduce_mean(x, axis=0)
            if strict > 0:
                v.assign_sub(g * 0.2)
                if float(tf.reduce_min(v)) < 0.5:
                    raise ValueError("v too small")
                log.append("strict")
            v.assign(v * 0.9)
            return v.read_value()
        return guarded, {"v": v}
    under = check(make, [(XS[0] + 1.0, 1.0)] * 6 + [(XS[1], 0.0)] * 2)
    assert sum(r[0] == "raised" for r in under.results if isinstance(r, tuple)) >= 2
