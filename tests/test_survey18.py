"""Findings of the corpus survey of public TF2 programs (session 18: /work/corpus, outside
the repository): each a program in their shape, compared with eager."""
import types
import warnings

import numpy as np
import pytest
import tensorflow as tf

import gpe
import keras

STEP = 0
STATE = tf.constant(1.0)
CFG = types.SimpleNamespace(scale=0)
N_TOWERS = 2

def bump():
    """A helper keeping a module's counter (`global step; step += 1`)."""
    global STEP
    STEP += 1


def double_state():
    global STATE
    STATE = STATE * 2.0


def bump_cfg():
    CFG.scale += 1


def counted_sum(x):
    s = tf.zeros(())
    for _ in range(2):
        bump()
        s = s + x * STEP
    return s


def doubled_sum(x):
    """The global a tensor the helper rebinds."""
    parts = []
    for _ in range(2):
        double_state()
        parts.append(x * STATE)
    return tf.add_n(parts)


def read_after_helper(x):
    bump()
    return x * STEP


def read_attribute_after_helper(x):
    bump_cfg()
    return x * CFG.scale


def attribute_in_a_loop(x):
    total = tf.zeros(())
    for _ in range(2):
        bump_cfg()
        total += x * CFG.scale
    return total


def _reset():
    global STEP, STATE
    STEP, STATE, CFG.scale = 0, tf.constant(1.0), 0


def _results(fn, wrap, calls=8):
    _reset()
    f = wrap(fn)
    return [f(tf.constant(1.0)).numpy().item() for _ in range(calls)], f


def _same_as_eager(fn):
    want, _ = _results(fn, lambda f: f)
    got, sliced = _results(fn, lambda f: gpe.function(f, adaptive=False))
    assert got == want
    return sliced.stats()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fn", [counted_sum, doubled_sum, read_after_helper])
def test_a_global_a_helper_rebinds_mid_call_is_read_after_the_helper(fn):
    """A helper rebinding a module's global (`global step; step += 1`) in a loop of the
    step, the TF part reading it after the call: the global was sent when the call started
    (activity saw no write in `bump()`), so each sliced call used the counter's value at
    entry for every pass (12.0 where eager returns 15.0): a wrong answer. A statement
    calling user code on the host now writes the globals the module's code rebinds
    (slicer/globalwrites.py): the value crosses after the call."""
    stats = _same_as_eager(fn)
    assert stats["graph_calls"] >= 4, stats


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fn", [read_attribute_after_helper, attribute_in_a_loop])
def test_an_attribute_a_helper_changes_mid_call_is_read_after_the_helper(fn):
    """A number on an object reached through the globals (`CFG.scale`) is folded into the
    TF part and guarded when the call starts; a helper the step calls on the host
    (`bump_cfg()`: `CFG.scale += 1`) changed it mid-call, and the sliced calls read the
    value from before (3.0 where eager gives 4.0): a wrong answer (`mutated_roots` only
    counted changes the function itself makes). The globals a called function of the
    module changes in place are mutated roots too: not folded."""
    stats = _same_as_eager(fn)
    assert stats["graph_calls"] >= 4, stats


def scores(x):
    return {'a': x * 2.0, 'b': x * 3.0}


def dict_step(image):
    """TF's style-transfer tutorial's shape: the model returns a dict of tensors."""
    with tf.GradientTape() as tape:
        out = scores(image)
        loss = tf.reduce_sum(out['a']) + tf.reduce_sum(out['b'])
    return tape.gradient(loss, image)


def towers_step(x):
    """A loop over a module constant inside a tape (the multi-GPU towers' shape)."""
    with tf.GradientTape() as g:
        g.watch(x)
        s = tf.zeros(())
        for i in range(N_TOWERS):
            s = s + tf.reduce_sum(x[i:i + 1])
    return g.gradient(s, x)


SCALE = 1.5


def scaled_towers(x):
    with tf.GradientTape() as g:
        g.watch(x)
        s = tf.zeros(())
        for i in range(N_TOWERS):
            s = s + tf.reduce_sum(x[i:i + 1]) * SCALE
    return g.gradient(s, x)


@pytest.mark.timeout(120)
def test_module_numbers_changed_between_calls_are_read_anew():
    """A module's numbers the TF part folds are guarded by value: `N_TOWERS` changed once
    (a new variant), `SCALE` changed before every call (sent once it keeps changing). (Set
    through globals(): a `global` statement here would make them numbers this module's
    code rebinds, which are sent, never folded.)"""
    x = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    space = globals()

    def run(fn):
        out = []
        for i in range(12):
            space.update(N_TOWERS=3 if i >= 6 else 2, SCALE=1.0 + i)
            out.append(fn(x).numpy().tolist())
        return out
    try:
        want = run(scaled_towers)
        sliced = gpe.function(scaled_towers, adaptive=False)
        assert run(sliced) == want
        assert sliced.stats()["graph_calls"] >= 6, sliced.stats()
    finally:
        space.update(N_TOWERS=2, SCALE=1.5)


ROWS = 4


def towers_on_devices(x):
    """The multi-GPU towers' shape closer still: a `with tf.device(...)` block in each
    tower, the tower's size a Python int of module numbers."""
    with tf.GradientTape() as g:
        g.watch(x)
        s = tf.zeros(())
        for i in range(N_TOWERS):
            size = int(ROWS / N_TOWERS)
            with tf.device('/cpu:0'):
                s = s + tf.reduce_sum(x[i * size:(i + 1) * size])
    return g.gradient(s, x)


@pytest.mark.timeout(120)
def test_a_device_block_in_a_loop_over_a_module_constant_runs_sliced():
    """A `with` of TF's own inside a loop the TF part unrolls (it stopped the unrolling),
    and `int(ROWS / N_TOWERS)` of module numbers computed on each side."""
    _sliced(towers_on_devices, tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]))


def _sliced(fn, arg, calls=6):
    want = fn(arg).numpy()
    f = gpe.function(fn, adaptive=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpe.GpeWarning)
        for _ in range(calls):
            assert np.array_equal(f(arg).numpy(), want)
    stats = f.stats()
    assert stats["graph_calls"] == calls - 3, stats["fallbacks"]


@pytest.mark.timeout(120)
def test_a_dict_of_tensors_inside_a_tape_runs_sliced():
    """A dict of tensors under string keys written out is a structure the TF part builds
    (it was host data: the callee returning it was host work, and the tape's step ran
    eagerly)."""
    _sliced(dict_step, tf.Variable([[0.5, 0.1]]))


def sum_items(x):
    d = {'a': x * 2.0, 'b': x + 1.0}
    s = 0.0
    for k, v in d.items():
        s = s + tf.reduce_sum(v)
    return s


def sum_keys_printing(x):
    d = scores(x)
    s = 0.0
    for k in d.keys():
        s = s + tf.reduce_sum(d[k])
        print(k, s.numpy())
    return s


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fn", [sum_items, sum_keys_printing])
def test_a_dict_of_tensors_is_iterated_as_eager_does(fn, capsys):
    """Its `.items()`/`.keys()` are a structure of TF values (a tensor has no such method);
    a key only the host knows (the loop printing it) indexes the dict on the host."""
    x = tf.constant([1.0, 2.0])
    want = [fn(x).numpy().item() for _ in range(8)]
    printed = capsys.readouterr().out
    sliced = gpe.function(fn, adaptive=False)
    assert [sliced(x).numpy().item() for _ in range(8)] == want
    assert capsys.readouterr().out == printed
    assert sliced.stats()["graph_calls"] >= 2, sliced.stats()


@pytest.mark.timeout(120)
def test_a_loop_over_a_module_constant_inside_a_tape_runs_sliced():
    _sliced(towers_step, tf.constant([[1.0, 2.0], [3.0, 4.0]]))


def scale_and_read(v, x):
    v.assign(v * x)
    return v * 1.5


@pytest.mark.timeout(120)
@pytest.mark.parametrize("make", [tf.Variable, keras.Variable])
def test_arithmetic_on_a_variable_argument_reads_it_after_the_write(make):
    """`v * 1.5` on a variable argument was 'plain Python, computed on each side'
    (placement: the argument is fixed for the call, as a folded number is), so the host
    computed it without waiting for the TF part's `v.assign`: the sliced calls, run ahead,
    all returned the value from the profile calls (12.0, 12.0, 12.0 where eager returns 24,
    48, 96). A variable is not a value fixed for the call."""
    x = tf.constant(2.0)
    eager_v, sliced_v = make([1.0]), make([1.0])
    want = [scale_and_read(eager_v, x).numpy().tolist() for _ in range(6)]
    sliced = gpe.function(scale_and_read, adaptive=False)
    assert [sliced(sliced_v, x).numpy().tolist() for _ in range(6)] == want
    assert np.array_equal(sliced_v.numpy(), eager_v.numpy())
    assert sliced.stats()["graph_calls"] == 3


def times(v, x):
    return v * x


def backprop(x, trainable_variables):
    """aymericdamien's multi-GPU example: the gradient for a list of variables passed in."""
    with tf.GradientTape() as g:
        loss = tf.reduce_sum(tf.matmul(x, trainable_variables[0]) + trainable_variables[1])
        gradients = g.gradient(loss, trainable_variables)
    return gradients


@pytest.mark.timeout(120)
def test_a_keras_variable_argument_is_told_apart_from_another():
    """A Keras 3 variable (what layers' `trainable_variables` hold) is not a tf.Variable:
    its key was its type alone, so a variant built on one variable read it for the next
    (`times(b, x)` returned a's values): a wrong answer. It is a variable to the key now,
    guarded by identity."""
    a, b, x = keras.Variable([1.0, 2.0]), keras.Variable([10.0, 20.0]), tf.constant(2.0)
    sliced = gpe.function(times, adaptive=False)
    for v in [a, b] * 4:
        assert sliced(v, x).numpy().tolist() == times(v, x).numpy().tolist()
    assert sliced.stats()["graph_calls"] == 2


@pytest.mark.timeout(120)
def test_a_list_of_keras_variables_argument_runs_sliced():
    """`backprop(batch_x, batch_y, conv_net.trainable_variables)`: a list of Keras variables
    was plain data ('cannot cross into the TF part') and the step ran eagerly; it is
    captured as a list of tf.Variables is, each guarded by identity."""
    layer = keras.layers.Dense(2)
    x = tf.constant([[1.0, 2.0, 3.0]])
    layer(x)
    want = [g.numpy() for g in backprop(x, layer.trainable_variables)]
    sliced = gpe.function(backprop, adaptive=False)
    for _ in range(6):
        got = [g.numpy() for g in sliced(x, layer.trainable_variables)]
    assert all(np.array_equal(a, b) for a, b in zip(want, got))
    assert sliced.stats()["graph_calls"] == 3, sliced.stats()["fallbacks"]


def make_counted_step():
    """The step and its counter in one closure: `nonlocal count` in the helper beside it."""
    count = 0

    def bump_count():
        nonlocal count
        count += 1

    def step(x):
        total, n = x * 0.0, 0
        while n < 2:
            bump_count()
            total += x * count
            n += 1
        return total
    return step


@pytest.mark.timeout(120)
def test_a_closure_variable_a_helper_rebinds_mid_call_is_read_after_the_helper():
    """As a global: the closure variable was sent when the call started, and every pass of
    a sliced call read it (12.0 where eager returns 15.0). A statement calling user code
    writes the closure variables a function in the step's closure rebinds."""
    x = tf.constant(1.0)
    eager_step = make_counted_step()
    want = [eager_step(x).numpy().item() for _ in range(8)]
    sliced = gpe.function(make_counted_step(), adaptive=False)
    assert [sliced(x).numpy().item() for _ in range(8)] == want
    assert sliced.stats()["graph_calls"] >= 4


class Schedule:
    def __init__(self, config):
        self.c = config

    def step(self):
        self.c.lr *= 0.5


LR = types.SimpleNamespace(lr=1.0)
SCHED = Schedule(LR)


def read_aliased_after_method(x):
    SCHED.step()
    return tf.square(x) * LR.lr


def decay():
    SCHED.step()


def read_aliased_after_helper(x):
    decay()
    return tf.square(x) * LR.lr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("step", [read_aliased_after_method, read_aliased_after_helper])
def test_an_attribute_changed_through_another_object_is_read_after_the_call(step):
    """`SCHED.step()` halves `LR.lr` through its own reference (`self.c.lr *= 0.5`), called
    in the step or in a helper of it: a number on an object a host call may reach through
    another object's attributes is read after the call, not folded (0.125 where eager
    gives 0.0625 before: the folded value, guarded only at entry)."""
    LR.lr = 1.0
    want = [step(tf.constant(1.0)).numpy().item() for _ in range(8)]
    LR.lr = 1.0
    sliced = gpe.function(step, adaptive=False)
    assert [sliced(tf.constant(1.0)).numpy().item() for _ in range(8)] == want
    assert sliced.stats()["graph_calls"] >= 4


def pick_by_rank(X, m):
    if len(X.shape) == 3:
        return tf.where(tf.expand_dims(m, axis=-1), X, 0.0)
    else:
        return tf.where(m, X, 0.0)


@pytest.mark.timeout(120)
def test_a_fixed_branch_that_returns_runs_sliced():
    """d2l's sequence_mask: `if len(X.shape) == 3: return ...` on a tensor argument, whose
    rank the call key holds: the test is folded (the branch taken replaces the `if`); a
    call of the other rank is another key, sliced with the other branch."""
    X = tf.constant(np.arange(20, dtype=np.float32).reshape(4, 5))
    Y = tf.reshape(X, (2, 2, 5))
    m = tf.constant([[True, False], [False, True]])
    sliced = gpe.function(pick_by_rank, adaptive=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpe.GpeWarning)
        for _ in range(6):
            assert np.array_equal(sliced(X, X > 7.0).numpy(), pick_by_rank(X, X > 7.0).numpy())
        assert sliced.stats()["graph_calls"] == 3, sliced.stats()["fallbacks"]
        for _ in range(6):
            assert np.array_equal(sliced(Y, m).numpy(), pick_by_rank(Y, m).numpy())
    assert sliced.stats()["graph_calls"] == 6, sliced.stats()


def masked_lstm(masking, lstm, x):
    h = masking(x)
    return lstm(h)


def counted_padding(h):
    """Host work reading a tensor's Keras mask (as a Keras recurrent layer did when it
    ran on the host)."""
    print("padded steps:", int(tf.reduce_sum(tf.cast(~h._keras_mask, tf.int32))))
    return tf.reduce_sum(h * tf.cast(h._keras_mask, h.dtype)[..., None])


def masked_then_host(masking, x):
    h = masking(x)
    return counted_padding(h)


def _padded():
    x = np.random.RandomState(0).rand(3, 6, 1).astype(np.float32)
    x[:, 3:] = -1.0
    return tf.constant(x)


@pytest.mark.timeout(120)
def test_a_tensor_with_a_keras_mask_does_not_cross(capsys):
    """A wrong answer since cc7dfa0 (a Keras recurrent layer ran on the host then): the
    masked tensor made in the TF part crossed to the host without its Keras mask, and the
    LSTM ran over the padding. A tensor with a Keras mask does not cross (either way): the
    function runs eagerly, saying why."""
    masking, x = keras.layers.Masking(mask_value=-1.0), _padded()
    want = masked_then_host(masking, x).numpy()
    printed = capsys.readouterr().out
    sliced = gpe.function(masked_then_host, adaptive=False)
    for _ in range(5):
        assert np.array_equal(sliced(masking, x).numpy(), want)
    assert capsys.readouterr().out == printed * 5
    reasons = " ".join(sliced.stats()["fallbacks"])
    assert "a tensor with its Keras mask" in reasons, reasons


@pytest.mark.timeout(120)
def test_a_keras_mask_reaches_a_recurrent_layer_in_the_graph():
    """The Masking layer and the LSTM both in the TF part (the LSTM traced unrolled):
    the mask goes with the tensor inside the trace, the padding is skipped as eagerly."""
    tf.keras.utils.set_random_seed(0)
    masking, lstm = keras.layers.Masking(mask_value=-1.0), keras.layers.LSTM(4)
    x = _padded()
    want = masked_lstm(masking, lstm, x).numpy()
    sliced = gpe.function(masked_lstm, adaptive=False)
    for _ in range(5):
        assert np.array_equal(sliced(masking, lstm, x).numpy(), want)
    assert sliced.stats()["graph_calls"] == 2, sliced.stats()
