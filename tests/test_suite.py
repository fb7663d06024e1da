"""The program suite (examples/suite.py): every program matches eager, and the TF work of
the separable ones runs in the graph. Prints the share of TF ops run in the graph."""
import io
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

import suite  # noqa: E402
import gpe  # noqa: E402
from harness import run, same  # noqa: E402
from gpe.host.runtime.opcount import graph_ops  # noqa: E402

TOTALS = {"graph": 0, "host": 0}


@pytest.mark.filterwarnings("ignore::gpe.GpeWarning")
@pytest.mark.parametrize("name", sorted(suite.PROGRAMS))
def test_program_matches_eager(name):
    make = suite.PROGRAMS[name]
    eager = run(make, None, sliced=False)
    under = run(make, None, sliced=True)
    for i, (a, b) in enumerate(zip(eager.results, under.results)):
        assert same(a, b), f"{name} call {i}: eager {a!r}, gpe {b!r}"
    for var in eager.variables:
        assert same(eager.variables[var], under.variables[var]), f"{name}: variable {var}"
    assert same(eager.log, under.log) and eager.stdout == under.stdout
    stats = under.target.stats()
    graph = sum(sum(graph_ops(v.part).values()) for v in under.target.variants.values())
    per_call = graph / max(1, len(under.target.variants))
    TOTALS["graph"] += int(per_call * stats["graph_calls"])
    TOTALS["host"] += sum(under.host_ops.values())
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


def test_zz_report_share_of_tf_ops_in_the_graph(capsys):
    total = TOTALS["graph"] + TOTALS["host"]
    assert len(suite.PROGRAMS) >= 40
    if total:
        with capsys.disabled():
            print(f"\nsuite: {len(suite.PROGRAMS)} programs, {len(suite.SEPARABLE)} separable; "
                  f"TF ops run in the graph: {TOTALS['graph']}, on the host: {TOTALS['host']} "
                  f"({TOTALS['graph'] / total:.0%} in the graph)")
