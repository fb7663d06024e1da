"""Programs the differential fuzzer (tests/fuzz/) found correct but running eagerly: gpe
fell back with a slicer or tracing error as its reason (issue 13). Each is minimised from
its seed; each test compares everything observable with eager (tests/harness.py) and
asserts how many calls ran sliced, so a fallback fails it.
"""
import importlib.util
import sys

import tensorflow as tf

from harness import check, differential

X = tf.constant([0.5, -1.0, 2.0])


def make_rebound_count(log):
    """Fuzz seed 12609: `n += 1` on an int argument (fixed for the call) ran on the host
    only, so the TF part got `n` sent, a value `range(n)` and `max(n - 1, 0)` cannot use
    while the part is traced ("'HostValue' object cannot be interpreted as an integer")."""
    v = tf.Variable(tf.zeros([3]))

    def main(x, n):
        n += 1
        v.assign_add(x * 0.5)
        parts = [tf.constant(0.1) * 1.5 + tf.cast(q, tf.float32) for q in range(n)]
        m = max(n - 1, 0)
        log.append(n)
        return tf.add_n(parts) + x, tf.cast(m, tf.float32), tf.cast(min(n, 3), tf.float32)
    return main, {"v": v}


def test_rebound_int_argument_counts_a_range_in_the_tf_part():
    check(make_rebound_count, [(X, 2), (X, 2), (X * 2.0, 2), (X, 2)])


def make_host_driven_counter(log):
    """Fuzz seed 12770: `for k in range(3)` with host work in its body (a print) is driven
    by the host, which sends `k` each iteration; kinds had taken `k` as fixed for the call
    (as in a loop the TF part unrolls), so `max(k - 1, 0)` stayed in the TF part ("'>' not
    supported between instances of 'int' and 'HostValue'"). Such work runs on the host.
    (A list the host builds per iteration, `[... for q in range(k)]`, crosses with another
    length each iteration: the call is then finished eagerly mid-call; not covered here.)"""
    v = tf.Variable(0.0)

    def main(x):
        for k in range(3):
            print("k", k)
            x = x + tf.cast(max(k - 1, 0), tf.float32) * 0.5
            v.assign_add(tf.reduce_sum(x) + tf.cast(len(range(k)), tf.float32))
        return x
    return main, {"v": v}


def test_counter_of_a_host_driven_loop_in_python_work():
    check(make_host_driven_counter, [(X,), (X,), (X * 2.0,), (X,)])


def make_rebound_in_unrolled_loop(log):
    """`n += 1` inside a loop the TF part unrolls stays host work there (the host would
    not see the TF part's count): the loop is driven by the host, as before."""
    def main(x, n):
        for k in range(3):
            n += 1
            x = x + 1.0
        m = n * 2
        print("n", n, m)
        return x * n, m
    return main, {}


def test_rebound_int_argument_in_an_unrolled_loop():
    check(make_rebound_in_unrolled_loop, [(X, 1), (X, 1), (X * 2.0, 1)])


def make_branch_rebinds(log):
    """Fuzz seed 12740: an `if` the host decides (its test reads `x.numpy()`) whose else
    branch rebinds `x` (TF work) after host work there. The TF part's branches were
    functions rebinding `x` as a nonlocal: the switch traced the else branch first, and the
    then branch read its tensor ("... in branch 1 is accessed from branch 2")."""
    state = {}
    v = tf.Variable(0.0)

    def main(x, scale):
        if tf.reduce_any(tf.constant(x.numpy() * 2.0) > 1.0):
            t = x * 1.5 * 0.5
            v.assign_add(tf.reduce_sum(t))
        else:
            state["last"] = scale
            log.append(scale)
            x = x * 0.5 + tf.reduce_min(x)
            v.assign_add(tf.reduce_sum(x))
        return x * 2.0, v.read_value()
    return main, {"v": v}


def test_branch_rebinding_a_name_the_other_branch_reads():
    low = tf.constant([0.1, -1.0, 0.2])
    # the `if` test is host work by the program's own `.numpy()`: its two ops run eagerly
    check(make_branch_rebinds, [(X, 0.5), (low, 0.5), (X, 1.5), (low, 2.5), (low * 2.0, 0.5)],
          host_ops_allowed=frozenset({"Greater", "Any"}))



def make_kept_python_number(log):
    """Fuzz seeds 60325, 60626, 60918, 61105, 61324, 61620, 61913, 62104: `z = scale` (a
    Python float on the host), then `if n % 2 == 0: z = tf.reduce_min(x)`, a TF `if` on a
    folded int. Where the branch is not taken `z` keeps the host's float; the TF part was
    given only TF values kept so, and the variant for odd `n` failed to trace
    ("UnboundLocalError: cannot access local variable 'z'"). The float is sent and comes
    back a Python float (printed as eager prints it); so are an int and a bool."""
    v = tf.Variable(0.0)

    def main(x, n, scale):
        z, k, on = scale, n * 3, n > 2
        if n % 2 == 0:
            z = tf.reduce_min(x)
            k = tf.reduce_sum(x) + 1.0
            on = tf.reduce_any(x > 0.0)
        v.assign_add(tf.reduce_sum(x * z))
        print("z", z, "k", k, "on", on)
        return x * z, k, on
    return main, {"v": v}


def test_name_a_tf_if_may_leave_keeps_the_hosts_python_number():
    # calls 1, 3 and 5 are profile calls: n 1 and n 2 each a variant with n folded, then
    # n 3 one for any int (its `if` decided on the host), which the last call runs
    under = check(make_kept_python_number, [(X, 1, 0.5), (X, 1, 1.5), (X, 2, 2.5),
                                            (X * 2.0, 2, 0.5), (X, 3, -1.0), (X, 3, 0.25),
                                            (X, 1, -2.0)], graph_calls=4)
    assert under.target.stats()["fallbacks"] == {}


def make_inner_conditional_on_a_sent_number(log):
    """Fuzz seeds 60333, 61115, 61745: `a if x.shape[0] % 2 else (b if scale > 0.0 else
    c)`, the outer test fixed for the call, the inner one on a number the host sends.
    Hoisting moved the whole expression into a host temporary (the host decides the inner
    `if`), but that assignment holds a tensor, so placement put it in the TF part, which
    compared the number it gets ("'>' not supported between instances of 'HostValue' and
    'float'"). It runs on the host; the TF work after it stays in the TF part."""
    v = tf.Variable(0.0)

    def main(x, scale):
        s = tf.reduce_sum(x) if x.shape[0] % 2 == 0 else (
            tf.reduce_max(x) if scale > 0.0 else tf.reduce_min(x))
        v.assign_add(tf.tanh(s) * scale)
        return s * 2.0 + v
    return main, {"v": v}


def test_inner_conditional_on_a_sent_number_runs_on_the_host():
    # the conditional's ops run eagerly on the host, as the program's own host work
    under = check(make_inner_conditional_on_a_sent_number,
                  [(X, 0.5), (X, -1.5), (X * 2.0, 2.5), (X, -0.25), (X, 1.0)],
                  host_ops_allowed=frozenset({"Max", "Min"}))
    assert under.target.stats()["fallbacks"] == {}


def make_rebound_in_loop_over_rows(log):
    """Fuzz seed 62107: `n += 1` in a loop over a tensor's rows the host drives is host
    work only, but kinds still took `n` as fixed for the call (the seed-12770 fix sent
    only `for k in range(...)` counters), so `range(n)` stayed in the TF part, which got
    `n` sent ("'HostValue' object cannot be interpreted as an integer"). Any name host
    work rebinds and a TF statement counts or compares with is now sent, not fixed: that
    work runs on the host (here the whole loop: nothing in it is left for the TF part)."""
    def main(x, n):
        y = x * 2.0
        for r in y:
            n += 1
            parts = [r * 2.0 for q in range(n)]
            log.append(len(parts))
        return y, n
    return main, {}


def test_number_rebound_in_a_loop_over_rows_counts_on_the_host():
    under = check(make_rebound_in_loop_over_rows, [(X, 1), (X, 1), (X * 2.0, 1), (X, 1)],
                  host_ops_allowed=frozenset({"StridedSlice", "Mul"}))
    assert under.target.stats()["fallbacks"] == {}


def make_rebound_in_counted_loop(log):
    """Fuzz seed 62218: `n += 1` in a `for k in range(2)` the host drives (a print), then
    `range(n)` and `max(n - 1, 0)` after the loop, in the TF part: the same failure. Those
    run on the host; the loop's and the variable's TF work stays sliced."""
    v = tf.Variable(tf.zeros([3]))

    def main(x, n):
        for k in range(2):
            print("k", k)
            x = x * 1.5 + tf.cast(k, tf.float32)
            n += 1
        v.assign_add(x)
        parts = [x + tf.cast(q, tf.float32) for q in range(n)]
        return tf.add_n(parts), max(n - 1, 0)
    return main, {"v": v}


def test_number_rebound_in_a_host_driven_range_loop():
    under = check(make_rebound_in_counted_loop, [(X, 1), (X, 1), (X * 2.0, 1), (X, 1)],
                  host_ops_allowed=frozenset({"Cast", "AddV2", "AddN"}))
    assert under.target.stats()["fallbacks"] == {}


NESTED = """
import tensorflow as tf
V = tf.Variable(tf.zeros([3]))


def h0(a):
    print("p1", a)
    V.assign_add(tf.fill([3], a))
    return a * 2.0


def h1(a):
    s = h0(tf.reduce_sum(V))
    print("p2", a[1].numpy() * 2.0)
    return tf.reduce_sum(V) * s


def main(x):
    print("p4", x.numpy())
    s = h1(x * 2.0)
    return s + 1.0
"""


def _module(tmp_path, name):
    path = tmp_path / f"{name}.py"
    path.write_text(NESTED)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an imported module is (the fuzzer loads it so)
    spec.loader.exec_module(module)
    return module


def test_nested_call_of_a_callee_with_its_own_nested_call(tmp_path):
    """Fuzz seed 12901 (every function wrapped, as `gpe run` does): main's TF part runs
    h1's, which runs h0's; main's function was traced taking only h1's own queues, not
    h0's after them ("missing a required argument: 'queues_11'")."""
    def program(wrap, log):
        module = _module(tmp_path, f"gpe_nested_{len(made)}")
        made.append(module)
        for name in ("h0", "h1", "main"):  # module globals: h1 calls the wrapped h0
            setattr(module, name, wrap(getattr(module, name)))
        return [module.main(X * float(i % 2 + 1)) for i in range(6)], {"v": module.V}
    made = []
    h0, h1, main = differential(program)
    assert main.stats()["fallbacks"] == {}, main.stats()
    assert main.stats()["graph_calls"] == 5, main.stats()
