"""Differential tests: speculation. Each program changes something between calls that a
variant was specialised on; every call must still match eager (results, variables, side
effects), the change must show in fn.stats() as a guard failure, and the calls after it
must run sliced again. gpe's default of 3 profile calls is used throughout.
"""
import types

import numpy as np
import tensorflow as tf

import gpe
from harness import check
from gpe.host.runtime.opcount import eager_ops, user_ops

RNG = np.random.default_rng(11)


def batch(n, seed=0):
    rng = np.random.default_rng(seed)
    return (tf.constant(rng.normal(size=(n, 6)).astype(np.float32)),
            tf.constant(rng.normal(size=(n, 2)).astype(np.float32)))


def _linear():
    rng = np.random.default_rng(5)
    return (tf.Variable(rng.normal(size=(6, 2)).astype(np.float32)),
            tf.Variable(np.zeros(2, np.float32)))


def test_a_smaller_last_batch_then_a_third_size_relaxes_the_batch_dimension():
    def make(log):
        w, b = _linear()

        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
            gw, gb = tape.gradient(loss, [w, b])
            w.assign_sub(0.1 * gw)
            b.assign_sub(0.1 * gb)
            log.append(float(loss))
            return loss
        return train_step, {"w": w, "b": b}
    calls = [batch(8, i) for i in range(6)] + [batch(5, 6)] * 3 + [batch(8, i) for i in range(5)]
    calls += [batch(3, 9)] * 4
    # 3 profile calls at batch 8, 3 sliced; the batch of 5 needs one profile call for an
    # exact variant of the same plan (2 sliced); batch 8 again finds its variant; the third
    # size relaxes the batch dimension (one profile call, then 3 sliced)
    under = check(make, calls, graph_calls=3 + 2 + 5 + 3, profile_calls=3)
    stats = under.target.stats()
    assert stats["guard_failures"] == {
        "argument x: expected tensor float32(8, 6), got tensor float32(5, 6)": 1,
        "argument x: expected tensor float32(5, 6), got tensor float32(3, 6)": 1}, stats
    assert stats["variants_built"] == ["x: tensor float32(8, 6), y: tensor float32(8, 2)",
                                       "x: tensor float32(5, 6), y: tensor float32(5, 2)",
                                       "x: tensor float32(?, 6), y: tensor float32(?, 2)"]


class Model:
    def __init__(self):
        rng = np.random.default_rng(2)
        self.w = tf.Variable(rng.normal(size=(6, 2)).astype(np.float32))
        self.training = True
        self.rate = 0.1
        self.lr = 0.05
        self.act = tf.nn.relu

    def step(self, x, y, seed):
        h = tf.matmul(x, self.w)
        if self.training:
            h = tf.nn.experimental.stateless_dropout(h, rate=self.rate, seed=[1, seed])
        loss = tf.reduce_mean(tf.square(self.act(h) - y))
        if self.training:
            self.w.assign_sub(self.lr * tf.reduce_mean(h) * tf.ones_like(self.w))
        return loss


def _compare(changes, calls=16):
    """Run Model.step eagerly and under gpe side by side; `changes[i](model)` runs before
    call i on both models. Asserts every result and the final weights match; returns the
    sliced function and the TF ops its sliced calls ran on the host."""
    eager, under = Model(), Model()
    sliced = gpe.function(Model.step, adaptive=False)  # (the counts below are not timing)
    x, y = batch(4)
    host_ops = {}
    for i in range(calls):
        for model in (eager, under):
            changes.get(i, lambda m: None)(model)
        seed = tf.constant(i)
        expected = Model.step(eager, x, y, seed)
        before = sliced.stats()["graph_calls"]
        with eager_ops() as counts:
            got = sliced(under, x, y, seed)
        if sliced.stats()["graph_calls"] > before:
            for op, n in user_ops(counts).items():
                host_ops[op] = host_ops.get(op, 0) + n
        assert np.array_equal(expected.numpy(), np.asarray(got)), f"call {i}"
    assert np.array_equal(eager.w.numpy(), under.w.numpy())
    return sliced, host_ops


def test_a_training_flag_flipped_on_the_model_between_calls():
    def flip(value):
        def change(model):
            model.training = value
        return change
    sliced, host_ops = _compare({5: flip(False), 9: flip(True), 12: flip(False)})
    stats = sliced.stats()
    # a variant per flag value, each with only its branch: 3 profile calls for the first,
    # one for the second (the `if` on the flag is folded: a plan of its own, slicer/hoist.py),
    # and the flips back at calls 9 and 12 find theirs
    assert stats["graph_calls"] == 2 + 3 + 7 and not host_ops, (stats, host_ops)
    assert stats["profile_calls"] == 4, stats
    assert stats["guard_failures"] == {"self.training: expected True, got False": 1}, stats
    assert stats["variants"] == 2


def test_a_learning_rate_on_the_object_changed_every_few_steps():
    def decay(model):
        model.lr = model.lr * 0.5
    sliced, host_ops = _compare({4: decay, 8: decay, 12: decay})
    stats = sliced.stats()
    # folded at 0.05, then 0.025 (a new variant of the same plan: no profile call); at
    # its third value the rate is sent as a value instead (a new plan for the same
    # arguments: one profile call), so the change at call 12 needs no new variant
    assert stats["guard_failures"] == {"self.lr: expected 0.05, got 0.025": 1,
                                       "self.lr: expected 0.025, got 0.0125": 1}, stats
    assert stats["graph_calls"] == 1 + 4 + 7 and not host_ops, (stats, host_ops)


def test_a_dropout_rate_attribute_that_jumps():
    def jump(model):
        model.rate = 0.5
    sliced, host_ops = _compare({10: jump})
    stats = sliced.stats()
    # the variant for 0.5 is built from the first one's observations: no eager call
    assert stats["graph_calls"] == 7 + 6 and not host_ops, (stats, host_ops)
    assert stats["guard_failures"] == {"self.rate: expected 0.1, got 0.5": 1}, stats


def test_a_callee_replaced_by_monkey_patching():
    def patch(model):
        model.act = tf.tanh
    sliced, host_ops = _compare({8: patch})
    stats = sliced.stats()
    assert stats["graph_calls"] == 5 + 7 and not host_ops, (stats, host_ops)
    assert stats["guard_failures"] == {
        "self.act: expected the object seen when sliced, got another one": 1}, stats


def test_a_loop_whose_length_changes_once():
    def make(log):
        w = tf.Variable(tf.eye(3) * 0.5)

        def unroll(x, steps):
            h = x
            for _ in range(steps):
                h = tf.tanh(tf.matmul(h, w))
            log.append(steps)
            return h
        return unroll, {"w": w}
    x = tf.ones([2, 3])
    under = check(make, [(x, 4)] * 6 + [(x, 6)] * 6, graph_calls=3 + 5, profile_calls=3)
    assert under.target.stats()["guard_failures"] == {
        "argument steps: expected int 4, got int 6": 1}


def test_a_guard_that_fails_mid_call_after_variable_updates():
    """`scale` is computed on the host after the first update and sent to the TF part at a
    gate; when it turns from a float into a tensor the host cannot send it there: the TF
    part hands over its live values and the host finishes that call eagerly."""
    def make(log):
        v = tf.Variable(tf.ones([3]))
        config = types.SimpleNamespace(scale=0.5)

        def step(x, i):
            v.assign_add(tf.reduce_sum(x, axis=0))  # applied before the failing gate
            g = tf.reduce_mean(x) * v
            log.append(float(tf.reduce_sum(v)))     # host work: what follows waits for it
            if int(i) == 4:
                config.scale = tf.constant(0.25)   # no longer a Python float
            scale = config.scale
            v.assign(g * scale + 1.0)
            return v.read_value()
        return step, {"v": v}
    x = tf.reshape(tf.range(6, dtype=tf.float32), [2, 3]) / 10
    calls = [(x, float(i)) for i in range(10)]
    # 3 profile calls, call 3 sliced, call 4 sliced until the gate and then eager; that
    # variant is dropped: 3 profile calls see the tensor, and the new variant runs 8 and 9
    rest = {"Mul": 2, "AddV2": 1, "AssignVariableOp": 1, "ReadVariableOp": 1, "Identity": 1}
    under = check(make, calls, graph_calls=1 + 1 + 2, profile_calls=3,
                  host_ops_allowed=frozenset(rest))
    assert under.host_ops == rest  # only the rest of call 4 ran eagerly on the host
    failures = under.target.stats()["guard_failures"]
    assert list(failures.values()) == [1], failures
    reason = next(iter(failures))
    assert reason.startswith("mid-call: ") and "expected float float64(), got tensor" in reason


def test_a_loop_value_that_changes_type_mid_loop():
    """Each iteration's value crosses with its flag; when one no longer fits (a tensor
    where floats were seen) the TF part hands over the loop's state and the host finishes
    the loop and the call eagerly."""
    def make(log):
        v = tf.Variable(0.0)

        def run(x, n):
            schedule = [0.5, 0.25, 0.125]
            if int(n) == 4:
                schedule[1] = tf.constant(0.25)
            h = x
            for s in schedule:
                h = h * s + 1.0
                v.assign_add(tf.reduce_sum(h))
            log.append(len(schedule))
            return h
        return run, {"v": v}
    x = tf.ones([2, 3])
    rest = {"Mul": 2, "AddV2": 2, "Sum": 2, "AssignAddVariableOp": 2}
    # 3 profile calls, call 3 sliced, call 4 rescued; then 3 profile calls again
    under = check(make, [(x, float(i)) for i in range(8)], graph_calls=1 + 1,
                  profile_calls=3, host_ops_allowed=frozenset(rest))
    # the last two iterations of call 4 ran on the host (a Mul with the Pending `s` is
    # dispatched twice by TF's operator wrapper: counted 3 times)
    assert dict(under.host_ops, Mul=min(under.host_ops["Mul"], 2)) == rest, under.host_ops
    reason = next(iter(under.target.stats()["guard_failures"]))
    assert reason.startswith("mid-call: ") and "got tensor" in reason


def test_crossings_not_reached_by_the_first_calls_are_speculated_on():
    """Epsilon-greedy: the first calls return early on the host, before the TF work (it was
    refused for good, then profiled until a call reached it): built speculating that no
    call gets there, the call that does finishes eagerly and it is built again."""
    def make(log):
        w = tf.Variable(tf.reshape(tf.range(6, dtype=tf.float32), [3, 2]) / 10)
        explore = iter([True] * 4 + [False] * 20)

        def act(obs):
            if next(explore):
                return -1
            temperature = 1.0 + len(log) / 10  # host work the TF part needs
            log.append(temperature)
            return int(tf.argmax(tf.matmul(obs, w)[0] / temperature))
        return act, {"w": w}
    obs = tf.constant([[1.0, -2.0, 3.0]])
    # call 1 explores (the profile call), 2-4 too (sliced), call 5 reaches the TF work
    # (sliced until then, eagerly after), call 6 profiles it, 7-12 run sliced
    eager = frozenset({"ReadVariableOp", "MatMul", "StridedSlice", "RealDiv", "ArgMax"})
    under = check(make, [(obs,)] * 12, graph_calls=3 + 1 + 6, host_ops_allowed=eager)
    stats = under.target.stats()
    assert stats["fallbacks"] == {} and stats["profile_calls"] == 2, stats
    assert list(stats["guard_failures"]) == [
        "mid-call: line 242 (`temperature`): no profile call had reached it (built "
        "speculating that no call does)"], stats


def test_another_variable_in_a_list_argument_is_named_in_the_guard_message():
    """TF Core's optimizers take `vars` as a list argument; a new tf.Variable there is a new
    variant, and the message says which element and why (it used to read "expected list
    of 1 (a tf.Variable), got list of 1 (a tf.Variable)")."""
    def apply(grads, vars):
        for g, v in zip(grads, vars):
            v.assign_sub(0.5 * g)

    def program(fn):
        first, second = tf.Variable([1.0, 2.0]), tf.Variable([3.0, 4.0])
        for v in [first] * 5 + [second] * 2:
            fn([tf.constant([0.5, 0.25])], [v])
        return first.numpy().tolist(), second.numpy().tolist()
    sliced = gpe.function(apply, adaptive=False)
    assert program(sliced) == program(apply)
    stats = sliced.stats()
    # 3 profile calls and 2 sliced with the first; the second: 1 profile call, 1 sliced
    assert stats["graph_calls"] == 3 and stats["profile_calls"] == 4, stats
    assert stats["guard_failures"] == {
        "argument vars[0]: expected the tf.Variable seen when sliced, got another "
        "tf.Variable (a variable is part of the variant: each new one is sliced again)": 1}


def test_a_guard_failure_is_told_against_the_nearest_variant():
    """Variants for two batch sizes, then the model swapped (a checkpoint restored into a
    new model, as a tutorial does) at the first size: the failure names the model, the
    one thing that differs from the variant of that size, not the batch size in which the
    last variant built differs."""
    class Dense(tf.Module):
        def __init__(self, seed):
            self.w = tf.Variable(np.random.default_rng(seed).normal(size=(6, 2))
                                 .astype(np.float32))

        def __call__(self, x):
            return tf.matmul(x, self.w)
    models = {"now": Dense(1)}

    def predict(x):
        return tf.reduce_sum(model(x))
    fn = types.FunctionType(predict.__code__, {"tf": tf, "model": models["now"]})
    sliced = gpe.function(fn, profile_calls=1, adaptive=False)
    big, small = batch(8)[0], batch(3)[0]
    for x in [big] * 3 + [small] * 3:
        assert float(sliced(x)) == float(fn(x))
    fn.__globals__["model"] = Dense(2)  # the model swapped, at the first batch size
    assert float(sliced(big)) == float(fn(big))
    assert sliced.stats()["guard_failures"] == {  # (the first: the smaller batch's)
        "argument x: expected tensor float32(8, 6), got tensor float32(3, 6)": 1,
        "model: expected the object seen when sliced, got another one": 1}
    # each batch size: a profile call, then sliced calls (the swapped model's: profiled)
    assert sliced.stats()["graph_calls"] == 2 + 2, sliced.stats()
