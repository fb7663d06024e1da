"""A new part's sink wrapper written from its signature (tfprog/wrapper_template.py), not
traced: each program below runs sliced (calls counted) and as eager, its wrapper written
(counted), none traced; where the wrapper must capture a value itself, it is traced."""
from __future__ import annotations

import pytest

import call_path_programs as programs
from gpe.tfprog import sink, wrapper_template
import gpe
from harness import check, plain, same


@pytest.mark.timeout(120)
@pytest.mark.parametrize("program", ["no_entry", "mixed_entry", "held_constant"])
def test_a_written_wrapper_runs_the_part_as_eager(program):
    written, traced = wrapper_template.MADE["wrappers"], sink.TRACES["wrapper"]
    check(getattr(programs, program), None)  # 3 of 4 calls sliced, results and state equal
    assert wrapper_template.MADE["wrappers"] == written + 1
    assert sink.TRACES["wrapper"] == traced


def _in_turn(makers: list) -> None:
    """Each program's calls in turn, sliced (one sink over their parts) and eagerly: the
    same results and variables; every call but the profile call sliced."""
    runs = []
    for sliced in (True, False):
        made = [make([]) for make in makers]
        fns = [gpe.function(fn, profile_calls=1) if sliced else fn for fn, _, _ in made]
        results = []
        for i in range(4):
            for fn, (_, _, calls) in zip(fns, made):
                results.append(plain(fn(*calls[i])))
        variables = [{k: v.numpy().tolist() for k, v in vs.items()} for _, vs, _ in made]
        runs.append((results, variables, fns))
    (results, variables, fns), (eager, eager_variables, _) = runs
    assert all(same(a, b) for a, b in zip(results, eager)), (results, eager)
    assert variables == eager_variables
    for fn in fns:
        assert fn.stats()["graph_calls"] == 3, fn.stats()


@pytest.mark.timeout(120)
def test_written_wrappers_of_parts_sharing_a_sink_run_each_its_own():
    """Two parts in one sink (a Case over their wrappers), called in turn."""
    _in_turn([programs.mixed_entry, programs.no_entry])


@pytest.mark.timeout(120)
def test_a_wrapper_capturing_a_value_itself_is_traced_and_calls_the_written_ones():
    """A part whose wrapper captures a value itself makes its sink a traced one, which
    calls the other parts' written wrappers by name."""
    traced = sink.TRACES["wrapper"]
    _in_turn([programs.held_constant, programs.captured_strings])
    assert sink.TRACES["wrapper"] == traced + 1
