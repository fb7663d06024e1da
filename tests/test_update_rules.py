"""Hand-written update rules as textbooks write them (d2l's chapter 11): a loop over
`zip(params, grads)` or `zip(params, states, grads)` of variables, reading hyper-parameters
from a dict argument (`hyperparams['lr']`). The loop is unrolled in the TF part; the dict's
numbers are read there from the call's entry value, where the function has not changed
the dict yet."""
import pytest
import tensorflow as tf

from harness import check

G = [tf.constant([[0.5], [-1.0], [2.0]]), tf.constant([0.25])]


def _variables():
    return {"w": tf.Variable(tf.ones([3, 1])), "b": tf.Variable(tf.zeros([1]))}


@pytest.mark.timeout(300)
def test_sgd_over_a_dict_of_hyperparameters_runs_in_the_graph():
    """d2l's `sgd(params, grads, states, hyperparams)`: the whole loop ran on the host
    (`hyperparams['lr']` was host work inside it, so each iteration's variable had to be
    sent), as a sliced variant that did all its TF work eagerly."""
    def make(log):
        v = _variables()
        hp = {"lr": 0.1}

        def sgd(params, grads, states, hyperparams):
            for param, grad in zip(params, grads):
                param.assign_sub(hyperparams["lr"] * grad)
        return sgd, v, [([v["w"], v["b"]], G, None, hp)] * 4
    check(make, None)


@pytest.mark.timeout(300)
def test_states_as_pairs_of_variables_run_in_the_graph():
    """d2l's Adam keeps `states` as ((v_w, s_w), (v_b, s_b)): pairs of variables, unpacked
    in the loop's target, were host values."""
    def make(log):
        v = _variables()
        states = ((tf.Variable(tf.zeros([3, 1])), tf.Variable(tf.zeros([3, 1]))),
                  (tf.Variable(tf.zeros([1])), tf.Variable(tf.zeros([1]))))
        v.update({f"s{i}{j}": s for i, pair in enumerate(states) for j, s in enumerate(pair)})
        hp = {"lr": 0.1, "beta": 0.9}

        def rule(params, grads, states, hyperparams):
            for p, (m, s), g in zip(params, states, grads):
                m.assign(hyperparams["beta"] * m + (1 - hyperparams["beta"]) * g)
                s[:].assign(s + tf.math.square(g))
                p.assign_sub(hyperparams["lr"] * m / tf.math.sqrt(s + 1e-6))
        return rule, v, [([v["w"], v["b"]], G, states, hp)] * 4
    check(make, None)


@pytest.mark.timeout(300)
def test_a_dict_the_function_changes_is_read_at_entry_only_before_the_change():
    """`hyperparams['t'] += 1` at the end (d2l's Adam): the reads before it are the entry
    values, read in the TF part; a read after it is the changed value, read on the host
    (the second loop runs eagerly, with the number the host computed)."""
    def make(log):
        v = _variables()
        hp = {"lr": 0.1, "t": 1}

        def rule(params, grads, hyperparams):
            for p, g in zip(params, grads):
                p.assign_sub(hyperparams["lr"] * g)
            hyperparams["t"] += 1
            hyperparams["lr"] = hyperparams["lr"] * 0.5
            for q, h in zip(params, grads):
                q.assign_sub(hyperparams["lr"] * h)
            log.append(dict(hyperparams))
            return hyperparams["t"]
        return rule, v, [([v["w"], v["b"]], G, hp)] * 8
    # t is new at each call: folded for the first variant, then (a step counter, as an
    # int argument is) sent: calls 4 and 5 profile and build again, 6-8 and one before ran
    # sliced
    run = check(make, None, graph_calls=5,
                host_ops_allowed=frozenset({"Mul", "AssignSubVariableOp"}))
    # the first loop ran in the graph: each sliced call ran only the second loop's ops
    assert run.host_ops == {"Mul": 10, "AssignSubVariableOp": 10}, run.host_ops
    assert "t: a int" in run.target.stats()["variants_built"][-1]


def _adam_states():
    return ((tf.Variable(tf.zeros([3, 1])), tf.Variable(tf.zeros([3, 1]))),
            (tf.Variable(tf.zeros([1])), tf.Variable(tf.zeros([1]))))


def _adam(params, grads, states, hyperparams):
    """d2l's `adam` (chapter 11), as the book writes it."""
    beta1, beta2, eps = 0.9, 0.999, 1e-6
    for p, (v, s), grad in zip(params, states, grads):
        v[:].assign(beta1 * v + (1 - beta1) * grad)
        s[:].assign(beta2 * s + (1 - beta2) * tf.math.square(grad))
        v_bias_corr = v / (1 - beta1 ** hyperparams['t'])
        s_bias_corr = s / (1 - beta2 ** hyperparams['t'])
        p[:].assign(p - hyperparams['lr'] * v_bias_corr
                    / tf.math.sqrt(s_bias_corr) + eps)
    hyperparams['t'] += 1


@pytest.mark.timeout(300)
def test_adam_bias_correction_by_a_power_runs_in_the_graph():
    """`1 - beta1 ** hyperparams['t']`: a power may raise (an overflow), so it was host work
    inside the loop, which then ran on the host, its variable updates eagerly (d2l's Adam
    and Yogi: every call eager). It is computed before the loop now, and the loop is
    unrolled in the TF part."""
    def make(log):
        v = _variables()
        states = _adam_states()
        v.update({f"s{i}{j}": s for i, pair in enumerate(states) for j, s in enumerate(pair)})
        hp = {"lr": 0.01, "t": 1}
        return _adam, v, [([v["w"], v["b"]], G, states, hp)] * 6
    # t is new at each call: folded for the first variant, then sent (see above)
    run = check(make, None, graph_calls=3)
    assert not run.host_ops  # (check: no TF op of a sliced call ran eagerly)


@pytest.mark.timeout(300)
def test_a_power_that_overflows_raises_where_eager_raises():
    """The power computed before the loop raises in a sliced call (0.9 ** -8000): the
    call is handed back to the host at the loop, whose copy computes the power where eager
    does, after the first pair's updates: the same OverflowError, the same variables."""
    def make(log):
        v = _variables()
        states = _adam_states()
        v.update({f"s{i}{j}": s for i, pair in enumerate(states) for j, s in enumerate(pair)})
        params = [v["w"], v["b"]]
        calls = [(params, G, states, {"lr": 0.01, "t": t})
                 for t in (1, 2, 3, 4, 5, -8000, 6, 7)]
        return _adam, v, calls
    run = check(make, None, graph_calls=4, host_ops_allowed=frozenset({
        "Mul", "AddV2", "Sub", "Square", "StridedSlice", "ResourceStridedSliceAssign",
        "ReadVariableOp"}))  # (the rescued call's first pair, run eagerly by the host)
    assert "OverflowError" in repr(run.results[5]), run.results
    assert any("computing it raised OverflowError" in reason
               for reason in run.target.stats()["guard_failures"]), run.target.stats()


@pytest.mark.timeout(300)
def test_a_power_beside_a_call_is_computed_where_python_computes_it():
    """`print(log.append(t), v / (1 - b ** t))`: Python appends before the power raises;
    the power may move before its statement only where the statement calls nothing."""
    def make(log):
        v = tf.Variable([1.0, 2.0])

        def step(b, t):
            print(log.append(t), v / (1 - b ** t))
        return step, {"v": v}, [(0.9, t) for t in (1, 2, 3, -8000, 4)]
    run = check(make, None, graph_calls=0)  # (the statement stays whole: no TF work left)
    assert "OverflowError" in repr(run.results[3])
