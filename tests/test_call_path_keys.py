"""The call key taken by position (callkey.CallKeys.of_call, every call's path): a call by
position alone is keyed without binding its arguments by name, and still guards what a
variant captured. Each test runs calls sliced (counted) and changes what a guard watches
between two calls: the next call must not take the old variant (a wrong answer)."""
from __future__ import annotations

import pytest
import tensorflow as tf

import call_path_programs as programs
import gpe


@pytest.fixture
def scale():
    before = programs.SCALE
    yield
    programs.SCALE = before


def _sliced(fn, *args):
    sliced = gpe.function(fn, adaptive=False, profile_calls=1)
    for _ in range(3):
        sliced(*args)
    assert sliced.stats()["graph_calls"] == 2, sliced.stats()
    return sliced


@pytest.mark.timeout(120)
def test_a_rebound_global_is_guarded_by_position(scale):
    x = tf.constant(3.0)
    sliced = _sliced(programs.scaled, x)
    assert sliced.keys.of_call((x,), {})[1] is None  # keyed by position: not bound by name
    programs.SCALE = tf.Variable(5.0)  # another variable under the same global name
    assert float(sliced(x)) == 15.0
    assert float(sliced(x)) == 15.0
    assert sliced.stats()["guard_failures"], sliced.stats()
    assert sliced.stats()["graph_calls"] == 3, sliced.stats()  # sliced again, on the new one


@pytest.mark.timeout(120)
def test_a_rebound_closure_variable_is_guarded_not_the_global_of_its_name():
    scaled, rebind = programs.closure_scaled()
    x = tf.constant(3.0)
    sliced = _sliced(scaled, x)
    assert float(sliced(x)) == 9.0
    rebind(tf.Variable(5.0))
    assert float(sliced(x)) == 15.0
    assert sliced.stats()["guard_failures"], sliced.stats()


@pytest.mark.timeout(120)
def test_an_attribute_of_a_positional_argument_is_guarded():
    holder, x = programs.Holder(tf.Variable(2.0)), tf.constant(3.0)
    sliced = _sliced(programs.through, holder, x)
    holder.value = tf.Variable(7.0)
    assert float(sliced(holder, x)) == 21.0
    assert float(sliced(programs.Holder(tf.Variable(4.0)), x)) == 12.0
    assert sliced.stats()["guard_failures"], sliced.stats()


@pytest.mark.timeout(120)
def test_keywords_take_the_variant_of_the_same_call_by_position():
    x = tf.constant(3.0)
    sliced = _sliced(programs.shifted, x, 1)
    assert float(sliced(x=x, n=1)) == 4.0
    assert float(sliced(x, n=1)) == 4.0
    stats = sliced.stats()
    assert stats["graph_calls"] == 4 and stats["variants"] == 1, stats


@pytest.mark.timeout(120)
def test_a_folded_number_by_position_is_in_the_key():
    x = tf.constant(3.0)
    sliced = _sliced(programs.shifted, x, 1)
    assert float(sliced(x, 2)) == 5.0  # not the variant with 1 folded in
    assert float(sliced(x, 1)) == 4.0
    assert sliced.stats()["graph_calls"] == 3, sliced.stats()  # (x, 2): profiled first


@pytest.mark.timeout(120)
def test_a_relaxed_shape_is_keyed_by_name_and_still_runs_sliced():
    sliced = _sliced(programs.scaled, tf.ones([2]))
    for n in (3, 4, 5, 6):
        assert sliced(tf.ones([n])).numpy().tolist() == [2.0] * n
    assert sliced.assumed.relaxed  # the batch dimension: the keys are bound by name now
    assert sliced.keys.of_call((tf.ones([7]),), {})[1] is not None
    assert sliced.stats()["graph_calls"] >= 4, sliced.stats()
