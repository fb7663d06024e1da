"""The options gpe's graphs are instantiated with (tfprog/exact.py): on a machine without
a GPU, Grappler's layout and memory optimizers are off (they only analyse the graph
there: a fifth of a new sink's instantiation), and the rewrites that change float
results stay off."""
from __future__ import annotations

import pytest
import tensorflow as tf
from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2

from gpe.tfprog import exact
from harness import check

OFF = rewriter_config_pb2.RewriterConfig.OFF


def _rewrites():
    config = config_pb2.ConfigProto()
    config.ParseFromString(exact._options().config_proto_serialized)
    return config.graph_options.rewrite_options


@pytest.mark.timeout(60)
def test_without_a_gpu_the_layout_and_memory_optimizers_are_off():
    assert not tf.config.list_physical_devices("GPU")  # (this machine: CPU only)
    rewrites = _rewrites()
    assert rewrites.layout_optimizer == OFF
    assert rewrites.memory_optimization == rewriter_config_pb2.RewriterConfig.NO_MEM_OPT
    for name in exact._VALUE_CHANGING + exact._ORDER_BREAKING:
        assert getattr(rewrites, name) == OFF, name


def conv_step(log):
    kernel = tf.Variable(tf.random.stateless_normal([3, 3, 2, 4], seed=[3, 4]))

    def step(images):
        with tf.GradientTape() as tape:
            out = tf.nn.conv2d(images, kernel, 1, "SAME")
            loss = tf.reduce_mean(tf.nn.relu(out) ** 2)
        kernel.assign_sub(0.1 * tape.gradient(loss, kernel))
        return loss
    images = tf.random.stateless_normal([2, 6, 6, 2], seed=[1, 2])
    return step, {"kernel": kernel}, [(images,)] * 4


@pytest.mark.timeout(120)
def test_a_conv_step_under_those_options_is_eagers_bit_for_bit():
    check(conv_step, None, host_ops_allowed=frozenset())  # 3 of 4 calls sliced
