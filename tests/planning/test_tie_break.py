"""Peak as the tie-breaker (budget.planning.tie_break): which plan of (nearly) the least
recompute is kept, on hand-made plans whose every figure is known."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from helpers.plans import MiB, make_plan

from budget.core.problem import Problem
from budget.planning.tie_break import TIE_TOLERANCE, lowest_peak, tie_tolerance

TOL = 1e-4  # cost units a plan may add for a lower peak, in these tests


def _plan(cost: float, peak: int, saved: int = 5 * MiB):
    return replace(make_plan(), recompute_cost=cost, peak_bytes=peak, saved_bytes=saved)


def test_a_plan_as_cheap_that_peaks_lower_is_kept_with_the_cheapest_status():
    cheapest = _plan(3e-3, 100 * MiB)
    theirs = _plan(3e-3, 80 * MiB, saved=6 * MiB)
    got = lowest_peak(cheapest, [("torch's", theirs)], TOL)
    assert got.peak_bytes == 80 * MiB and got.saved_bytes == 6 * MiB
    assert got.status == "optimal" and got.gap == 0.0  # as cheap as the proven least
    assert got.tie_break.startswith("torch's: the lowest predicted peak of 2 plans")
    assert "100.00 MiB" in got.tie_break and "80.00 MiB" in got.tie_break


def test_a_little_more_recompute_for_a_lower_peak_is_feasible_with_its_gap():
    cheapest = _plan(3e-3, 100 * MiB)
    got = lowest_peak(cheapest, [("other", _plan(3e-3 + TOL / 2, 90 * MiB))], TOL)
    assert got.peak_bytes == 90 * MiB and got.status == "feasible"
    assert got.gap is not None and abs(got.gap - (TOL / 2) / (3e-3 + TOL / 2)) < 1e-12


def test_plans_over_the_tolerance_or_the_target_or_unpredicted_are_never_taken():
    cheapest = _plan(3e-3, 100 * MiB)
    dearer = _plan(3e-3 + 2 * TOL, 50 * MiB)
    bigger = _plan(3e-3, 50 * MiB, saved=cheapest.target_bytes + 1)
    unknown = _plan(3e-3, 0)
    unknown = replace(unknown, peak_bytes=None)
    got = lowest_peak(cheapest, [("a", dearer), ("b", bigger), ("c", unknown)], TOL)
    assert got is cheapest and got.tie_break == ""


def test_the_cheapest_stays_when_it_peaks_lowest_and_says_so():
    cheapest = _plan(3e-3, 80 * MiB)
    got = lowest_peak(cheapest, [("torch's", _plan(3e-3, 90 * MiB))], TOL)
    assert got.saved == cheapest.saved and got.peak_bytes == 80 * MiB
    assert got.tie_break.startswith("the cheapest plan peaks lowest of 2")
    assert "torch's: 90.00 MiB" in got.tie_break


def test_equal_peaks_go_to_less_recompute_then_fewer_saved_bytes():
    cheapest = _plan(3e-3, 90 * MiB, saved=5 * MiB)
    same_but_more = _plan(3e-3, 90 * MiB, saved=6 * MiB)
    assert lowest_peak(cheapest, [("x", same_but_more)], TOL).saved_bytes == 5 * MiB
    smaller = _plan(3e-3, 90 * MiB, saved=4 * MiB)
    assert lowest_peak(cheapest, [("x", smaller)], TOL).saved_bytes == 4 * MiB
    dearer = _plan(3e-3 + TOL / 2, 90 * MiB, saved=1 * MiB)
    assert lowest_peak(cheapest, [("x", dearer)], TOL).saved_bytes == 5 * MiB


def test_the_tolerance_is_a_share_of_the_forwards_cost_inputs_aside():
    p = Problem(
        names=["x", "a", "b"],
        ops=["placeholder", "mm", "relu"],
        is_input=[True, False, False],
        needed=[False, True, True],
        can_save=[False, True, True],
        can_recompute=[False, True, True],
        storage=[-1, 0, 1],
        storage_bytes=[8, 8],
        cost=[5.0, 3.0, 1.0],  # an input's cost (never recomputed) is not counted
        flops=[0.0, 0.0, 0.0],
        edges=np.array([[0, 1], [1, 2]]),
    )
    assert tie_tolerance(p) == TIE_TOLERANCE * 4.0


def test_the_ordered_plans_are_as_cheap_as_the_optimum_and_recompute_latest_or_earliest():
    """Six equally cheap values read from one input, room for three: every plan saving
    three is optimal, and which three is the solver's arbitrary pick. The ordered candidates
    are the optimum's price (the brute-force oracle's), within the target, and recompute
    the last three values in the forward ("latest") or the first three ("earliest"); a
    plan that offloads or recomputes nothing has none."""
    from helpers import oracle
    from helpers.problems import make

    from budget.planning.tie_break import ordered_saved_sets

    p = make(2, [{"bytes": 100, "cost": 1}] * 6, [(0, 2 + i) for i in range(6)])
    target = 300
    best_cost, _ = oracle.optimum(p, target)
    # the budget's cheapest plan: recomputes something, offloads nothing
    plan = replace(make_plan(), target_bytes=target, recompute_cost=best_cost)
    found = dict(ordered_saved_sets(p, plan, tie_tolerance(p)))
    assert set(found) == {
        "the cheapest plan recomputing latest",
        "the cheapest plan recomputing earliest",
    }
    for saved in found.values():
        cost, nbytes = oracle.price(p, saved)
        assert cost == best_cost and nbytes <= target
    recomputed = {name: sorted(set(range(2, 8)) - set(s)) for name, s in found.items()}
    assert recomputed["the cheapest plan recomputing latest"] == [5, 6, 7]
    assert recomputed["the cheapest plan recomputing earliest"] == [2, 3, 4]
    offloads = replace(plan, decisions=[replace(d, decision="offload") for d in plan.decisions])
    assert ordered_saved_sets(p, offloads, tie_tolerance(p)) == []
    nothing = replace(plan, decisions=[replace(d, decision="save") for d in plan.decisions])
    assert ordered_saved_sets(p, nothing, tie_tolerance(p)) == []


def test_where_the_min_cut_misses_the_optimum_the_ordered_plans_are_the_exact_solvers():
    """Values of 300, 200 and 200 bytes costing 3, 1.9 and 1.9, room for 400: the optimum
    recomputes the first (cost 3), which lies above the min-cut's hull (its plan under the
    target recomputes both others, 3.8). The ordered candidates are then the plan's own
    exact solver's: the optimum's price (the brute-force oracle's), not the min-cut's."""
    from helpers import oracle
    from helpers.problems import make

    from budget.planning.tie_break import ordered_saved_sets
    from budget.solvers import get_solver

    nodes = [{"bytes": 300, "cost": 3}, {"bytes": 200, "cost": 1.9}, {"bytes": 200, "cost": 1.9}]
    p = make(1, nodes, [(0, 1), (0, 2), (0, 3)])
    target = 400
    best_cost, _ = oracle.optimum(p, target)
    assert best_cost == 3.0
    cut = get_solver("mincut").solve(p, target, minimize="cost")
    assert oracle.price(p, cut.saved)[0] > best_cost + tie_tolerance(p)  # the min-cut's miss
    plan = replace(make_plan(), target_bytes=target, recompute_cost=best_cost)
    found = ordered_saved_sets(p, plan, tie_tolerance(p))
    assert len(found) == 2
    for _, saved in found:
        assert oracle.price(p, saved) == (best_cost, 400)
    # a plan of a heuristic solver gets no exact solve: the min-cut's miss leaves nothing
    assert ordered_saved_sets(p, replace(plan, solver="greedy"), tie_tolerance(p)) == []
