"""The parametric min-cut solver against the brute-force oracle (helpers/oracle.py) and
CP-SAT (pure data, no torch.fx).

Exactness is claimed only where the module docstring claims it: no shared storages, or
shared storages that are zero-cost views of a savable base. Elsewhere plans must still be
valid, never over target, and the bound must stay below the true optimum.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest
from helpers import oracle
from helpers.problems import copies, distinct_storage, empty_problem, random_problem, view_group

from budget.core.problem import Problem
from budget.solvers import InfeasibleError, available_solvers, get_solver
from budget.solvers.mincut import solver as M

pytestmark = pytest.mark.skipif("mincut" not in available_solvers(), reason="needs ortools")

LAMBDAS = [0.0, 1e-9, 0.3, 1.0, 7.5, 50.0, 123.25, 1e4, 1e12, math.inf]


EXACT_KINDS = [distinct_storage, view_group]


def all_plans(p: Problem) -> list[tuple[int, float, list[int]]]:
    """(bytes, cost, saved) of every valid saved set, by the oracle."""
    return [(b, c, list(saved)) for saved, (c, b) in oracle.plans(p).items()]


def price(p: Problem, saved: list[int]) -> tuple[int, float]:
    """A solver's plan priced as the planner prices it (for problems too large for the
    oracle; on small ones the tests compare it with the oracle's answers)."""
    return p.saved_bytes(saved), float(p.cost[p.recompute_closure(saved)].sum())


def lagrangian(b: int, c: float, lam: float):
    if lam == 0:
        return (b, c)
    if math.isinf(lam):
        return (c, b)
    return Fraction(b) + Fraction(lam) * Fraction(c)


def lower_hull(points):
    return M._lower_hull([(b, Fraction(c)) for b, c in points])


def interpolate(hull, t):
    if t < hull[0][0]:
        return math.inf
    for (b0, c0), (b1, c1) in zip(hull, hull[1:], strict=False):
        if t < b1:
            return c0 + (c1 - c0) * Fraction(t - b0, b1 - b0)
    return hull[-1][1]


def test_registered_and_not_exact():
    solver = get_solver("mincut")
    assert solver.name == "mincut" and solver.exact is False and solver.requires == "ortools"


@pytest.mark.parametrize("kind", EXACT_KINDS)
@pytest.mark.parametrize("seed", range(20))
def test_lagrangian_plan_matches_brute_force(kind, seed):
    p = kind(seed)
    if kind is view_group:
        assert M._model(p).exact_groups
    plans = all_plans(p)
    for lam in LAMBDAS:
        saved = M.lagrangian_plan(p, lam)
        assert not p.check(saved)
        assert p.prune_unused(saved) == saved  # the minimal sink side is already pruned
        got = lagrangian(*price(p, saved), lam)
        assert got == min(lagrangian(b, c, lam) for b, c, _ in plans), (lam, saved)


@pytest.mark.parametrize("seed", range(12))
def test_lagrangian_plan_with_shared_storage_is_valid(seed):
    p = random_problem(seed)  # node 5 shares node 4's storage without being its view
    best = {lam: min(lagrangian(b, c, lam) for b, c, _ in all_plans(p)) for lam in LAMBDAS}
    for lam in LAMBDAS:
        saved = M.lagrangian_plan(p, lam)
        assert not p.check(saved)
        assert lagrangian(*price(p, saved), lam) >= best[lam]


def test_lagrangian_plan_rejects_negative_lambda():
    with pytest.raises(ValueError, match="non-negative"):
        M.lagrangian_plan(distinct_storage(0), -1.0)


@pytest.mark.parametrize("kind", EXACT_KINDS)
@pytest.mark.parametrize("seed", range(20))
def test_hull_is_the_exact_lower_hull(kind, seed):
    p = kind(seed, n=11)
    plans = all_plans(p)
    expect = lower_hull([(b, c) for b, c, _ in plans])
    got = M.hull(p)
    assert [(b, Fraction(c)) for b, c, _ in got] == expect
    for b, c, saved in got:
        assert not p.check(saved) and price(p, saved) == (b, c)
    total = int(p.storage_bytes.sum())
    for t in range(0, total + 101, 50):  # the bound is the hull, exactly
        lb = M.lower_bound(p, t)
        want = interpolate(expect, t)
        assert lb == want if math.isinf(want) else lb == pytest.approx(float(want), rel=1e-12)


@pytest.mark.parametrize("kind", [distinct_storage, view_group])
@pytest.mark.parametrize("seed", range(8))
def test_hull_vertices_are_pareto_optimal(kind, seed):
    p = kind(200 + seed, n=30)
    hull = M.hull(p)
    cpsat = get_solver("cpsat")
    for (b0, c0, _), (b1, c1, _) in zip(hull, hull[1:], strict=False):
        assert b0 < b1 and c0 > c1
    for (b0, c0, _), (b1, c1, _), (b2, c2, _) in zip(hull, hull[1:], hull[2:], strict=False):
        # strictly convex: the middle vertex lies below the chord
        assert (c1 - c0) * (b2 - b0) < (c2 - c0) * (b1 - b0)
    for b, c, saved in hull:
        assert not p.check(saved) and price(p, saved) == (b, c)
        sol = cpsat.solve(p, b)
        assert price(p, sol.saved) == (b, c)


@pytest.mark.parametrize("seed", range(10))
def test_sweep_matches_full_cuts(seed):
    """The contracted sweep finds what a sweep of full, uncontracted cuts finds."""
    p = distinct_storage(300 + seed, n=60)
    model = M._build(p)
    left, _ = model.lex("bytes")
    right, _ = model.lex("cost")
    found = {(left.bytes_q, left.cost_q), (right.bytes_q, right.cost_q)}
    stack = [(left, right)] if right.cost_q < left.cost_q else []
    while stack:
        a, b = stack.pop()
        lp, lq = b.bytes_q - a.bytes_q, a.cost_q - b.cost_q
        c, _ = model.cut(lp, lq)
        if lq * c.bytes_q + lp * c.cost_q < lq * a.bytes_q + lp * a.cost_q:
            found.add((c.bytes_q, c.cost_q))
            stack += [(a, c), (c, b)]
    swept = {(c.bytes_q, c.cost_q) for c in M._build(p).sweep()}
    assert M._lower_hull(list(swept)) == M._lower_hull(list(found))


@pytest.mark.parametrize("kind", [random_problem, *EXACT_KINDS])
@pytest.mark.parametrize("seed", range(10))
def test_lower_bound_and_solve_against_cpsat(kind, seed):
    # random_problem's shared storage is not a view: the cut cannot price it exactly, but
    # the bound must hold and plans stay valid; the exact kinds check the hull is complete
    p = kind(400 + seed, n=24)
    cpsat, mincut = get_solver("cpsat"), get_solver("mincut")
    total = int(p.storage_bytes.sum())
    rng = np.random.default_rng(seed)
    for t in [0, *sorted(int(x) for x in rng.integers(0, total + 1, size=6)), total]:
        try:
            opt = cpsat.solve(p, t)
        except InfeasibleError:
            with pytest.raises(InfeasibleError):
                mincut.solve(p, t)
            continue
        best = price(p, opt.saved)
        assert M.lower_bound(p, t) <= best[1] + 1e-9
        try:
            sol = mincut.solve(p, t)
        except InfeasibleError as e:
            assert not M._model(p).exact_groups and e.min_bytes > t
            continue
        got = price(p, sol.saved)
        assert got[0] <= t and not p.check(sol.saved)
        assert sol.objective == got[1] >= best[1]
        if sol.status == "optimal":
            assert got == best
        else:
            assert sol.bound is not None and sol.bound <= best[1] + 1e-9


@pytest.mark.parametrize("kind", EXACT_KINDS)
@pytest.mark.parametrize("seed", range(12))
def test_solve_against_brute_force(kind, seed):
    p = kind(seed, n=11)
    mincut = get_solver("mincut")
    total = int(p.storage_bytes.sum())
    vertices = {b for b, _, _ in M.hull(p)}
    for t in sorted({0, total // 4, total // 3, total // 2, total, *vertices}):
        expect = oracle.optimum(p, t)  # (cost, bytes)
        if expect is None:
            with pytest.raises(InfeasibleError, match="smallest reachable") as err:
                mincut.solve(p, t)
            assert err.value.min_bytes == min_bytes_brute(p)[0]
            continue
        sol = mincut.solve(p, t)
        nbytes, cost = price(p, sol.saved)
        assert nbytes <= t and not p.check(sol.saved)
        if sol.status == "optimal":
            assert (cost, nbytes) == expect
        else:
            assert sol.bound <= expect[0] <= cost
        if t in vertices:  # a hull vertex is provably optimal at its own bytes
            assert sol.status == "optimal" and (cost, nbytes) == expect


def min_bytes_brute(p: Problem) -> tuple[int, float]:
    cost, nbytes = oracle.optimum(p, None, minimize="bytes")
    return nbytes, cost


@pytest.mark.parametrize("kind", EXACT_KINDS)
@pytest.mark.parametrize("seed", range(16))
def test_min_bytes_is_exact(kind, seed):
    p = kind(seed, n=11)
    sol = get_solver("mincut").solve(p, None, minimize="bytes")
    assert sol.status == "optimal"
    assert price(p, sol.saved) == min_bytes_brute(p)
    assert sol.objective == price(p, sol.saved)[0]


@pytest.mark.parametrize("seed", range(12))
def test_min_bytes_with_shared_storage(seed):
    p = random_problem(seed, n=11)
    sol = get_solver("mincut").solve(p, None, minimize="bytes")
    got, best = price(p, sol.saved), min_bytes_brute(p)
    assert not p.check(sol.saved) and got[0] >= best[0]
    if sol.status == "optimal":
        assert got == best
    else:
        assert sol.bound <= best[0]


def test_infeasible_target_names_the_smallest_size():
    p = distinct_storage(3)
    low = min_bytes_brute(p)[0]
    assert low > 0
    with pytest.raises(InfeasibleError, match=f"smallest reachable is {low} bytes") as err:
        get_solver("mincut").solve(p, low - 1)
    assert err.value.min_bytes == low
    assert M.lower_bound(p, low - 1) == math.inf
    with pytest.raises(InfeasibleError):
        get_solver("mincut").solve(p, low - 1, minimize="bytes")


def small(**kw) -> Problem:
    base = dict(
        names=["x", "a", "b"],
        ops=["in", "op", "op"],
        is_input=[True, False, False],
        needed=[False, False, True],
        can_save=[True, True, True],
        can_recompute=[False, True, True],
        storage=[0, 1, 2],
        storage_bytes=[0, 8, 16],
        cost=[0, 1, 1],
        flops=[0, 0, 0],
        edges=[(0, 1), (1, 2)],
        reason=["", "", ""],
    )
    base.update(kw)
    return Problem(**base)


def test_needed_node_that_can_be_neither_saved_nor_recomputed():
    p = small(
        can_save=[True, True, False], can_recompute=[False, True, False], reason=["", "", "rng"]
    )
    with pytest.raises(InfeasibleError, match=r"b is needed by the backward .*\(rng\)"):
        get_solver("mincut").solve(p, None)


def test_unavailable_input_forbids_recompute():
    # a can be neither saved nor recomputed, so b (needed, not savable) cannot be recomputed
    p = small(can_save=[True, False, False], can_recompute=[False, False, True])
    with pytest.raises(InfeasibleError, match="b is needed by the backward"):
        get_solver("mincut").solve(p, None)
    # once b can be saved, saving it is the only plan
    p = small(can_save=[True, False, True], can_recompute=[False, False, True])
    assert get_solver("mincut").solve(p, None).saved == [2]
    assert M.hull(p) == [(16, 0.0, [2])]


def test_empty_problem_and_nothing_needed():
    # (solve() on the empty problem is in test_solvers' suite over every solver)
    p = empty_problem()
    assert get_solver("mincut").solve(p, 0).status == "optimal"
    assert M.hull(p) == [(0, 0.0, [])] and M.lower_bound(p, 0) == 0
    q = small(needed=[False, False, False])
    assert get_solver("mincut").solve(q, 0).saved == []


@pytest.mark.parametrize("seed", range(6))
def test_rounded_weights_stay_valid_and_bounded(seed):
    """Bytes beyond 2**36 and fractional costs are rounded: plans valid, bounds below."""
    p = distinct_storage(seed, n=10)
    rng = np.random.default_rng(seed)
    p = dataclasses.replace(
        p,
        storage_bytes=p.storage_bytes * (2**31 + 7),
        cost=p.cost * 1.37e9 + rng.random(p.n) * (~p.is_input),
    )
    model = M._model(p)
    assert not model.bytes_exact and not model.cost_exact
    plans = all_plans(p)
    mincut = get_solver("mincut")
    total = int(p.storage_bytes.sum())
    for t in [total // 3, total // 2, total]:
        fits = [c for b, c, _ in plans if b <= t]
        if not fits:
            continue
        assert M.lower_bound(p, t) <= min(fits) * (1 + 1e-12)
        try:
            sol = mincut.solve(p, t)
        except InfeasibleError:
            continue
        got = price(p, sol.saved)
        assert got[0] <= t and not p.check(sol.saved)
        if sol.status == "optimal":
            assert got[1] <= min(fits) * (1 + 1e-12)


def test_the_plan_is_the_same_whatever_unit_the_costs_are_in():
    """Costs in seconds are FLOPs over a host's measured rate, which differs between runs
    and hosts. Scaled by any rate, the costs' ratios are the same, and so is the cut among
    equally cheap plans (the integer weights are taken relative to the largest cost, not
    floored from a scale of the raw costs, which splits ties differently at each rate)."""
    mincut = get_solver("mincut")
    rates = [97.49e9, 99.05e9, 98.16e9, 1.7e11, 3.1e12]
    for seed in range(20):
        for n in (12, 20):
            p = random_problem(seed, n)  # small integer costs: many equally cheap plans
            total = int(p.storage_bytes.sum())
            for target in (total // 4, total // 3, total // 2):
                try:
                    mincut.solve(p, target)
                except InfeasibleError:
                    continue
                plans = {
                    tuple(
                        sorted(mincut.solve(dataclasses.replace(p, cost=p.cost / r), target).saved)
                    )
                    for r in rates
                }
                assert len(plans) == 1, (seed, n, target, plans)


def test_view_groups_of_a_real_shape_are_exact():
    """mm -> view -> permute share one storage; split/getitem chains too."""
    names = ["x", "mm", "view", "perm", "split", "g0", "g1", "out"]
    p = Problem(
        names=names,
        ops=["in", "mm", "view", "permute", "split", "getitem", "getitem", "mul"],
        is_input=[True] + [False] * 7,
        needed=[False, False, False, True, False, True, False, True],
        can_save=[True, True, True, True, False, True, True, True],
        can_recompute=[False] + [True] * 7,
        storage=[0, 1, 1, 1, -1, 1, 1, 2],
        storage_bytes=[0, 64, 32],
        cost=[0, 100, 0, 0, 0, 0, 0, 5],
        flops=[0] * 8,
        edges=[(0, 1), (1, 2), (2, 3), (1, 4), (4, 5), (4, 6), (5, 7), (6, 7)],
        reason=[""] * 8,
    )
    assert M._model(p).exact_groups
    plans = all_plans(p)
    got = M.hull(p)
    assert [(b, Fraction(c)) for b, c, _ in got] == lower_hull([(b, c) for b, c, _ in plans])


@pytest.mark.parametrize("seed", range(8))
def test_solve_fills_hull_edges_of_identical_layers(seed):
    """Identical layers tie at every breakpoint: the hull has one layer's vertices, and
    the plans in between (some layers switched) lie on its edges. solve finds them."""
    one = distinct_storage(seed, n=8)
    k = 5
    p = copies(one, k)
    hull = M.hull(p)
    single = M.hull(one)
    assert [(b, c) for b, c, _ in hull] == [(k * b, k * c) for b, c, _ in single]
    cpsat, mincut = get_solver("cpsat"), get_solver("mincut")
    for (b0, c0, _), (b1, c1, _) in zip(single, single[1:], strict=False):
        for j in range(k + 1):  # j layers at the cheaper vertex, the rest at the smaller
            t = k * b0 + j * (b1 - b0)
            sol = mincut.solve(p, t)
            nbytes, cost = price(p, sol.saved)
            assert nbytes <= t and not p.check(sol.saved)
            assert cost == k * c0 + j * (c1 - c0) == price(p, cpsat.solve(p, t).saved)[1]
            assert sol.status == "optimal"
            vertex = max(c for b, c, _ in hull if b <= t)
            assert cost <= vertex
