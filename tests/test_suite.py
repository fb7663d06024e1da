"""The program suite (examples/suite.py): every program matches eager, and the TF work of
the separable ones runs in the graph. Prints the share of TF ops run in the graph."""
import functools
import io
import os
import sys
import warnings

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

import suite  # noqa: E402
import gpe  # noqa: E402
from harness import run, same  # noqa: E402
from gpe.host.runtime.opcount import graph_ops  # noqa: E402


@functools.cache
def runs(name):
    """The program run eagerly and under gpe, once per test process: the test of each
    program and the test of the totals share them, in whichever order they run."""
    make = suite.PROGRAMS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gpe.GpeWarning)
        return run(make, None, sliced=False), run(make, None, sliced=True)


def ops_in_the_graph(under) -> int:
    """TF ops the sliced calls ran in the graph (a variant's op count per sliced call)."""
    graph = sum(sum(graph_ops(v.part).values()) for v in under.target.variants.values())
    per_call = graph / max(1, len(under.target.variants))
    return int(per_call * under.target.stats()["graph_calls"])


@pytest.fixture(scope="module", autouse=True)
def _forget_the_runs():
    """The runs' functions (and their variants) do not outlive this module."""
    yield
    runs.cache_clear()


@pytest.mark.filterwarnings("ignore::gpe.GpeWarning")
@pytest.mark.parametrize("name", sorted(suite.PROGRAMS))
def test_program_matches_eager(name):
    eager, under = runs(name)
    for i, (a, b) in enumerate(zip(eager.results, under.results)):
        assert same(a, b), f"{name} call {i}: eager {a!r}, gpe {b!r}"
    for var in eager.variables:
        assert same(eager.variables[var], under.variables[var]), f"{name}: variable {var}"
    assert same(eager.log, under.log) and eager.stdout == under.stdout
    stats = under.target.stats()
    if name in suite.SEPARABLE:
        assert stats["graph_calls"] > 0, stats
        assert not under.host_ops, f"{name}: TF ops ran on the host: {under.host_ops}"
    assert_user_terms(under.target)

def assert_user_terms(target) -> None:
    """What gpe tells the user (fallback reasons, guard failures, variants, explain) names
    the user's variables and expressions, never the slicer's temporaries (`_gpe_h0`), and
    a reason about a place in the program names its file and line."""
    stats = target.stats()
    told = list(stats["fallbacks"]) + list(stats["guard_failures"]) + stats["variants_built"]
    told.append(gpe.explain(target, file=io.StringIO()))
    for text in told:
        assert "_gpe_" not in text, text
    for reason in stats["fallbacks"]:
        if "line" in reason or "cannot cross" in reason:
            assert ".py:" in reason, reason


@pytest.mark.filterwarnings("ignore::gpe.GpeWarning")
def test_most_of_the_suites_tf_ops_run_in_the_graph(capsys):
    """Over the whole suite (every program run, in any order: `runs` shares them with the
    tests above), at least 95% of the TF ops the gpe runs ran were in the graph, none of
    them on the host in a separable program, and the suite has its 40-odd programs. Prints
    the share (98% on 2026-11-27: 5858 ops in the graph, 95 on the host)."""
    assert len(suite.PROGRAMS) >= 40 and len(suite.SEPARABLE) >= 35
    totals = {"graph": 0, "host": 0}
    for name in sorted(suite.PROGRAMS):
        _, under = runs(name)
        totals["graph"] += ops_in_the_graph(under)
        totals["host"] += sum(under.host_ops.values())
        if name in suite.SEPARABLE:
            assert not under.host_ops, (name, under.host_ops)
    total = totals["graph"] + totals["host"]
    with capsys.disabled():
        print(f"\nsuite: {len(suite.PROGRAMS)} programs, {len(suite.SEPARABLE)} separable; "
              f"TF ops run in the graph: {totals['graph']}, on the host: {totals['host']} "
              f"({totals['graph'] / max(1, total):.0%} in the graph)")
    assert totals["graph"] >= 0.95 * total > 0, totals
