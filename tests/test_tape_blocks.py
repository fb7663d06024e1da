"""Host work inside a `with tf.GradientTape()` block: the block stays in the TF part, the
host values it needs cross in at a gate inside it, and the rest of the block runs under
the host's decision (a host exception there cancels it and everything after, as eagerly).
Host code in the block that makes tensors keeps the function eager: the TF part's tape
could not see how they were made."""
import numpy as np
import pytest
import tensorflow as tf

from harness import check

X = tf.constant(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3))
Y = tf.constant(np.array([[1.0], [0.0], [2.0], [1.0]], np.float32))


class Schedule:
    def __init__(self):
        self.step = 0

    def lr(self):
        return 0.1 * 0.5 ** (self.step // 2)


def test_host_schedule_and_log_inside_the_tape():
    def make(log):
        w = tf.Variable(tf.ones([3, 1]))
        schedule = Schedule()

        def step(x, y):
            with tf.GradientTape() as tape:
                lr = schedule.lr()          # a method of the user's: host work
                log.append(round(lr, 6))
                pred = tf.matmul(x, w)
                loss = tf.reduce_mean(tf.square(pred - y))
                if schedule.step % 2 == 0:
                    print("step", schedule.step, "lr", lr)
            w.assign_sub(lr * tape.gradient(loss, w))
            schedule.step += 1
            return loss
        return step, {"w": w}
    under = check(make, [(X, Y)] * 6)
    assert under.log == [0.1, 0.1, 0.05, 0.05, 0.025, 0.025]


def test_numpy_mid_tape_fed_back():
    def make(log):
        w = tf.Variable(tf.fill([3, 1], 0.5))

        def step(x, y):
            with tf.GradientTape() as tape:
                per_example = tf.square(tf.matmul(x, w) - y)[:, 0]
                ranks = np.argsort(np.argsort(per_example.numpy()))
                focus = (0.5 + ranks / (len(ranks) - 1)).astype(np.float32)
                loss = tf.reduce_sum(per_example * focus)
            w.assign_sub(0.05 * tape.gradient(loss, w))
            return loss
        return step, {"w": w}
    check(make, [(X, Y)] * 5)


def test_host_exception_inside_the_tape_cancels_the_rest():
    def make(log):
        w = tf.Variable(tf.ones([3, 1]))
        v = tf.Variable(0.0)
        budget = [3]

        def step(x, y):
            with tf.GradientTape() as tape:
                budget[0] -= 1
                if budget[0] < 0:
                    raise RuntimeError("out of budget")
                loss = tf.reduce_sum(tf.matmul(x, w) * y)
                v.assign_add(1.0)
            w.assign_sub(0.1 * tape.gradient(loss, w))
            return loss
        return step, {"w": w, "v": v}
    under = check(make, [(X, Y)] * 6, graph_calls=5)
    assert under.results[-1][0] == "raised"


@pytest.mark.filterwarnings("ignore::gpe.GpeWarning")
def test_a_tensor_made_by_host_code_inside_the_tape_keeps_it_eager():
    """The gradient must flow through `scale`, made by host code from a variable inside
    the block: eagerly the tape records it; gpe runs the function eagerly."""
    def make(log):
        w = tf.Variable(tf.ones([3, 1]))
        k = tf.Variable(2.0)

        class Scaler:
            def scale(self):
                log.append("scale")
                return k * 1.5

        scaler = Scaler()

        def step(x, y):
            with tf.GradientTape() as tape:
                scale = scaler.scale()
                loss = tf.reduce_sum(tf.matmul(x, w) * y) * scale
            gw, gk = tape.gradient(loss, [w, k])
            w.assign_sub(0.1 * gw)
            k.assign_sub(0.01 * gk)
            return loss
        return step, {"w": w, "k": k}
    under = check(make, [(X, Y)] * 4, graph_calls=0,
                  host_ops_allowed=frozenset({"ReadVariableOp", "Mul", "MatMul", "Sum", "OnesLike",
                                              "AssignSubVariableOp", "Identity", "AddN",
                                              "Tile", "Reshape", "BroadcastTo", "Shape",
                                              "BroadcastGradientArgs", "AddV2", "Const"}))
    assert any("cannot cross into it" in r for r in under.target.stats()["fallbacks"])


@pytest.mark.filterwarnings("ignore::gpe.GpeWarning")
def test_a_host_made_tensor_renamed_inside_the_tape_keeps_it_eager():
    """d2l's Trainer, its training_step written out: `l` made by a host call inside the
    block (a call with starred arguments), then `loss = l`, and the gradient taken of
    `loss` after the block. A rename inside the block was taken for a value made elsewhere
    (`h = self.state`), so `loss` crossed in after the block as a constant: the TF part's
    gradients were None (here tracing failed on them; in d2l's Trainer, which sends them
    to the host, the sliced call raised a GuardError)."""
    def make(log):
        w = tf.Variable(tf.ones([3, 1]))

        class Model:
            def loss(self, x, y):
                log.append("loss")
                return tf.reduce_mean(tf.square(tf.matmul(x, w) - y))

        model = Model()

        def step(x, y):
            batch = (x, y)
            with tf.GradientTape() as tape:
                l = model.loss(*batch)
                loss = l
            g = tape.gradient(loss, w)
            w.assign_sub(0.1 * g)
            return loss
        return step, {"w": w}
    under = check(make, [(X, Y)] * 4, graph_calls=0,
                  host_ops_allowed=frozenset({"ReadVariableOp", "Mul", "MatMul", "Sub", "Square",
                                              "Mean", "AssignSubVariableOp", "Identity", "Tile",
                                              "Reshape", "BroadcastTo", "Shape", "Const",
                                              "BroadcastGradientArgs", "AddV2", "RealDiv",
                                              "Fill", "Cast", "OnesLike", "Prod", "StridedSlice",
                                              "Maximum", "FloorDiv", "DivNoNan", "Neg",
                                              "SquaredDifference", "ZerosLike", "Size"}))
    assert any("cannot cross into it" in r for r in under.target.stats()["fallbacks"])


def teacher_forcing(tied: bool):
    """The seq2seq tutorials' step: `loss = 0`, a host value made inside the tape (the
    decoder's first input from `[start] * inp.shape[0]`), then `for t in range(1,
    targ.shape[1])` calling the decoder and adding to the loss. `tied`: the output
    projection is the embedding (read by tf.gather and densely)."""
    emb = tf.Variable(tf.zeros([5, 3]))
    w = tf.Variable(tf.zeros([6, 3]))
    out = tf.Variable(tf.zeros([3, 5]))
    variables = [emb, w] if tied else [emb, w, out]

    def untied(tok, state):
        state = tf.tanh(tf.matmul(tf.concat([tf.gather(emb, tok), state], -1), w))
        return tf.matmul(state, out), state

    def tied_decoder(tok, state):
        state = tf.tanh(tf.matmul(tf.concat([tf.gather(emb, tok), state], -1), w))
        return tf.matmul(state, emb, transpose_b=True), state
    decoder = tied_decoder if tied else untied

    def make(log):
        for i, v in enumerate([emb, w, out]):
            v.assign(tf.random.stateless_normal(v.shape, seed=[1, i]))

        def train_step(inp, targ):
            loss = 0
            with tf.GradientTape() as tape:
                state = tf.one_hot(inp[:, 0], 3)
                dec_input = tf.expand_dims([1] * inp.shape[0], 1)[:, 0]
                for t in range(1, targ.shape[1]):
                    logits, state = decoder(dec_input, state)
                    loss += tf.reduce_mean(
                        tf.nn.sparse_softmax_cross_entropy_with_logits(targ[:, t], logits))
                    dec_input = targ[:, t]
            batch_loss = loss / int(targ.shape[1])
            grads = tape.gradient(loss, variables)
            for v, g in zip(variables, grads):
                v.assign_sub(0.1 * tf.convert_to_tensor(g))
            log.append(float(batch_loss))
            return batch_loss
        return train_step, {f"v{i}": v for i, v in enumerate(variables)}
    return make


INP = tf.constant([[1, 2, 3], [4, 0, 1]])


def test_teacher_forcing_loop_over_the_targets_length_inside_the_tape():
    """Three defects kept the step eager: the loop's bound read an argument's shape (fixed
    by the call key) but the argument's name counted as not fixed; the segment after the
    gate (a function nested in the tape's `with`) rebinding `state` lacked its
    `nonlocal`; and its results held the loop's Python int `t`, which cannot come out of
    the gate's `tf.cond`."""
    under = check(teacher_forcing(tied=False), [(INP, tf.constant([[1, 3, 2], [1, 4, 4]]))] * 4)
    assert under.log[0] > under.log[-1]  # it learned


@pytest.mark.xfail(strict=True, reason="open: a variable read by tf.gather and densely, "
                   "several times in an unrolled loop in the tape: the sparse and dense "
                   "parts of its gradient are summed in another order than eager's (an ulp "
                   "after 4 steps; tf.function differs too; without the host gate as well)")
def test_teacher_forcing_with_a_tied_embedding_is_exact():
    check(teacher_forcing(tied=True), [(INP, tf.constant([[1, 3, 2, 0], [1, 4, 4, 2]]))] * 4)
