"""The graph computes what eager computes, op for op, where library code chooses its ops
from the static shapes it is traced with.

Keras' convolution runs the op compiled with XLA where it does not know its input's
channels (keras/src/backend/tensorflow/nn.py: `_conv_xla`), and XLA's results differ from
those of the Conv2D kernels eager runs. A loop over a dataset whose plan cannot hand a
misfit back sent its values any size: d2l's LeNet trained under gpe ended an ulp or so off
eager's (first layer's kernel). The dimensions the dataset's element_spec gives stay known
(host/variants/steady.py)."""
import numpy as np
import pytest
import tensorflow as tf

from harness import check
from gpe.host.runtime.opcount import graph_ops
from gpe.tfprog.exact import exact_arithmetic
import programs

ITERATING = frozenset({"AnonymousIteratorV3", "MakeIterator", "IteratorGetNext"})


def _images(n=8, size=6, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randint(0, 256, (n, size, size)).astype(np.uint8)
    y = rng.randint(0, 3, (n,)).astype(np.int32)
    return tf.expand_dims(tf.constant(x), 3) / 255, tf.constant(y)  # float32, as d2l's


@pytest.mark.timeout(300)
def test_a_conv_layer_over_a_dataset_loop_keeps_eagers_kernels():
    """`for x, y in ds` with a host read in the tape (no hand-back): x was traced as
    (?, ?, ?, ?), its channels unknown, and Keras ran the convolution through XLA."""
    def make(log):
        tf.keras.utils.set_random_seed(0)
        conv = tf.keras.layers.Conv2D(3, 3, padding="same", activation="sigmoid")
        conv.build((None, 6, 6, 1))
        x, y = _images()
        ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4).map(
            lambda a, b: (tf.image.resize_with_pad(a, 6, 6), b))
        return programs.conv_epoch, {"kernel": conv.kernel, "bias": conv.bias}, \
            [(ds, conv, log, 0.5)] * 5
    run = check(make, None, host_ops_allowed=ITERATING)
    ops = graph_ops(next(iter(run.target.variants.values())).part)
    assert ops["Conv2D"] >= 1 and ops["Conv2DBackpropFilter"] >= 1, ops


def _loader(size, seed=0):
    x, y = _images(size=size, seed=seed)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(4).map(
        lambda a, b: (tf.image.resize_with_pad(a, size, size), b))


@pytest.mark.timeout(300)
def test_a_trainers_dataset_attribute_keeps_eagers_kernels_and_is_guarded():
    """d2l's `for batch in self.train_dataloader` (speculated to give tensors): the same,
    and a trainer holding another dataset, of larger images, is another call key (its
    elements would not fit the dimensions the first dataset gave)."""
    def make(log):
        tf.keras.utils.set_random_seed(0)
        conv = tf.keras.layers.Conv2D(3, 3, padding="same", activation="sigmoid")
        conv.build((None, 6, 6, 1))
        first = programs.ConvTrainer(conv, _loader(6), log)
        second = programs.ConvTrainer(conv, _loader(8, seed=1), log)
        return programs.ConvTrainer.fit_epoch, {"kernel": conv.kernel, "bias": conv.bias}, \
            [(first,)] * 5 + [(second,)] * 5
    run = check(make, None, graph_calls=7, host_ops_allowed=ITERATING)
    assert run.target.stats()["variants"] == 2, run.target.stats()


def _lenet_step(net, opt, lossf, x, y):
    with tf.GradientTape() as tape:
        loss = lossf(y, net(x))
    grads = tape.gradient(loss, net.trainable_variables)
    opt.apply_gradients(zip(grads, net.trainable_variables))
    return loss


def _lenet_run(traced: bool) -> list:
    tf.keras.utils.set_random_seed(0)
    layers = tf.keras.layers
    net = tf.keras.Sequential([
        layers.Conv2D(3, 3, activation="sigmoid", padding="same"), layers.AvgPool2D(2, 2),
        layers.Conv2D(4, 3, activation="sigmoid"), layers.AvgPool2D(2, 2), layers.Flatten(),
        layers.Dense(5, activation="sigmoid"), layers.Dense(3)])
    net.build((None, 8, 8, 1))
    opt = tf.keras.optimizers.SGD(0.1)
    lossf = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    step = tf.function(_lenet_step) if traced else _lenet_step
    x, y = _images(size=8)
    losses = []
    for _ in range(3):
        with exact_arithmetic():
            losses.append(step(net, opt, lossf, x, y).numpy())
    return losses + [v.numpy() for v in net.trainable_variables]


@pytest.mark.timeout(300)
def test_lenets_ops_traced_keep_eagers_arithmetic():
    """The ops of d2l's LeNet where a graph might pick another kernel or fusion than eager
    (Conv2D 'same' and its gradients, AvgPoolGrad, SigmoidGrad, BiasAddGrad,
    SparseSoftmaxCrossEntropyWithLogits), traced with gpe's exact arithmetic and their
    input shapes known, compute eager's bits."""
    eager, traced = _lenet_run(False), _lenet_run(True)
    for i, (a, b) in enumerate(zip(eager, traced)):
        assert np.array_equal(a, b), f"value {i}: eager {a!r}, traced {b!r}"


@pytest.mark.timeout(300)
def test_an_argument_relaxed_to_any_size_keeps_eagers_kernels():
    """d2l's ResNet under `gpe run`: Residual blocks of 3, 6, 64 and 128 channels share one
    `call`, so X was relaxed to (?, ?, ?, ?), and with X's channels unknown Keras ran the
    convolution through XLA; the validation loss came out an ulp off eager's in some
    epochs. A relaxation that changes what the TF part computes is not made: a variant
    per shape instead."""
    import gpe
    tf.keras.utils.set_random_seed(0)
    widths = (16, 32, 64)  # (XLA's sums differ from eager's in most outputs at these)
    blocks = [programs.ConvBlock(4) for _ in widths]
    xs = [tf.random.normal((4, 6, 6, c)) for c in widths]
    for block, x in zip(blocks, xs):
        block(x)  # built
    # a first sliced call (a function none of whose calls ran sliced has a build budget),
    # then the three widths in turn: X relaxed to (4, 6, 6, ?) at the third
    calls = [(blocks[0], xs[0])] * 2 + [(b, x) for b, x in zip(blocks, xs)] * 3
    eager = [programs.ConvBlock.call(b, x).numpy() for b, x in calls]
    sliced = gpe.function(programs.ConvBlock.call, profile_calls=1, adaptive=False)
    for i, ((b, x), expected) in enumerate(zip(calls, eager)):
        got = sliced(b, x).numpy()
        equal = np.array_equal(got, expected)
        assert equal, f"call {i} ({x.shape}): {int((got != expected).sum())} values differ"
    stats = sliced.stats()
    assert stats["graph_calls"] == 7, stats  # all but the profile call of each width
    assert not any("?" in v for v in stats["variants_built"]), stats
    assert len(sliced.variants) == 3
    for variant in sliced.variants.values():  # the convolution runs in the graph, as eager's
        assert graph_ops(variant.part)["Conv2D"] == 1 and not _xla(variant.part)


def _xla(part) -> bool:
    """Whether a TF part calls a function compiled with XLA (`jit_compile=True`)."""
    graph = part.function.graph.as_graph_def()
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    return any(n.attr["_XlaMustCompile"].b for n in nodes if "_XlaMustCompile" in n.attr)
