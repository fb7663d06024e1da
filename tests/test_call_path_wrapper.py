"""A new part's sink wrapper written from its signature (tfprog/wrapper_template.py), not
traced: each program below runs sliced (calls counted) and as eager, its wrapper written
(counted), none traced; where the wrapper must capture a value itself, it is traced."""
from __future__ import annotations

import types

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


@pytest.mark.timeout(120)
def test_a_traced_sink_calls_a_bundles_wrapper_by_name():
    """A bundle's wrapper is a registered FunctionDef with nothing to call in Python
    (bundle_load._Wrapper): a traced sink (another part's wrapper captures a value) calls
    it by name. Stood in for here by a written wrapper seen as a bundle's: a program that
    loaded a bundle and sliced a function capturing a string tensor raised TypeError."""
    step, variables, calls = programs.mixed_entry([])
    sliced = gpe.function(step, profile_calls=1)
    results = [float(sliced(*args)) for args in calls[:2]]  # a profile call, a sliced one
    part = next(iter(sliced.variants.values())).part.function
    written = part.__dict__["_gpe_wrappers"]
    kept = dict(written)  # (holds the written wrappers: their FunctionDefs stay registered)
    for key, made in kept.items():
        written[key] = types.SimpleNamespace(function_def=made.function_def,
                                             captured_inputs=[])
    traced = sink.TRACES["sink"]
    strings, strings_vars, strings_calls = programs.captured_strings([])
    other = gpe.function(strings, profile_calls=1)
    for args, other_args in zip(calls[2:], strings_calls[2:]):
        other(*other_args)
        results.append(float(sliced(*args)))
    assert sink.TRACES["sink"] > traced  # the group's sink was traced
    eager_step, eager_vars, _ = programs.mixed_entry([])
    assert results == [float(eager_step(*args)) for args in calls]
    assert variables["v"].numpy().tolist() == eager_vars["v"].numpy().tolist()
    assert sliced.stats()["graph_calls"] == 3 and other.stats()["graph_calls"] == 1
    assert kept
