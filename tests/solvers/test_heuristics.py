"""Contract suite for the heuristic solvers (greedy, dp): valid plans, never over target,
never better than the exact optimum, InfeasibleError when they cannot fit, and the cases
where each is provably optimal (pure data, no torch.fx)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import oracle
from helpers.problems import independent_problem, make, random_problem

import budget.solvers.heuristics.greedy_moves as greedy_moves
from budget.core.problem import Problem
from budget.solvers import InfeasibleError, available_solvers, get_solver

HEURISTICS = ["greedy", "dp"]


def targets(p: Problem) -> list[int | None]:
    total = int(p.storage_bytes.sum())
    return [0, total // 8, total // 4, total // 3, total // 2, total, None]


def real_cost(p: Problem, saved: list[int]) -> float:
    return float(p.cost[p.recompute_closure(saved)].sum())


def test_heuristics_are_registered_and_not_exact():
    assert set(HEURISTICS) <= set(available_solvers())
    for name in HEURISTICS:
        solver = get_solver(name)
        assert solver.exact is False and solver.name == name


@pytest.mark.parametrize("name", HEURISTICS)
@pytest.mark.parametrize("seed", range(40))
def test_valid_never_over_target_never_below_optimum(name, seed):
    p = random_problem(seed)
    solver = get_solver(name)
    for target in targets(p):
        expect = oracle.optimum(p, target)
        if expect is None:
            with pytest.raises(InfeasibleError):
                solver.solve(p, target)
            continue
        try:
            sol = solver.solve(p, target)
        except InfeasibleError as e:  # allowed for a heuristic, but it must say so
            assert "found no plan that saves at most" in str(e)
            continue
        assert p.check(sol.saved) == []
        cost, nbytes = oracle.price(p, sol.saved)  # None (unpackable) when invalid
        assert target is None or nbytes <= target
        assert sol.objective == real_cost(p, sol.saved) == cost >= expect[0]
        assert sol.status == "feasible" and sol.bound is None and sol.gap is None


@pytest.mark.parametrize("name", HEURISTICS)
@pytest.mark.parametrize("seed", range(20))
def test_bytes_floor_is_reachable_and_consistent(name, seed):
    """``minimize="bytes"`` gives a valid floor, no lower than the true minimum, and the
    same solver then fits any cost target at or above it (what the planner relies on)."""
    p = random_problem(seed)
    solver = get_solver(name)
    if oracle.optimum(p) is None:
        with pytest.raises(InfeasibleError):
            solver.solve(p, None, minimize="bytes")
        return
    low = solver.solve(p, None, minimize="bytes")
    assert p.check(low.saved) == [] and low.objective == p.saved_bytes(low.saved)
    _, true_min = oracle.optimum(p, None, minimize="bytes")
    assert low.objective >= true_min
    for target in (int(low.objective), int(low.objective) + 150):
        sol = solver.solve(p, target)
        assert p.check(sol.saved) == [] and p.saved_bytes(sol.saved) <= target


@pytest.mark.parametrize("name", HEURISTICS)
@pytest.mark.parametrize("seed", range(4))
def test_never_better_than_cpsat_on_larger_problems(name, seed):
    p = random_problem(100 + seed, n=40)
    total = int(p.storage_bytes.sum())
    exact, solver = get_solver("cpsat"), get_solver(name)
    for target in [total // 5, total // 2]:
        try:
            best = exact.solve(p, target).objective
        except InfeasibleError:
            with pytest.raises(InfeasibleError):
                solver.solve(p, target)
            continue
        try:
            sol = solver.solve(p, target)
        except InfeasibleError:
            continue
        assert p.check(sol.saved) == [] and p.saved_bytes(sol.saved) <= target
        assert sol.objective >= best - 1e-9


@pytest.mark.parametrize(
    "name,equal_bytes",
    # the documented cases where each heuristic is exact: greedy when the values are
    # independent and of equal size, dp when independent and under its bucket resolution
    [("greedy", True), ("dp", False)],
)
@pytest.mark.parametrize("seed", range(30))
def test_heuristic_is_optimal_in_its_documented_case(name, equal_bytes, seed):
    p = independent_problem(seed, equal_bytes=equal_bytes)
    for target in targets(p):
        expect = oracle.optimum(p, target)
        if expect is None:
            with pytest.raises(InfeasibleError):
                get_solver(name).solve(p, target)
            continue
        sol = get_solver(name).solve(p, target)
        assert (sol.objective, p.saved_bytes(sol.saved)) == expect


@pytest.mark.parametrize("seed", range(25))
def test_greedy_walk_limit_changes_speed_not_plans(seed, monkeypatch):
    """Optimistic (cut-short) prices are priced in full before a move is applied, so the
    greedy's plans do not depend on how far re-pricing walks may go."""
    p = random_problem(seed, n=30)
    plans = []
    for walk in (0, 3, 10**9):
        monkeypatch.setattr(greedy_moves, "_WALK", walk)
        row = []
        for target in targets(p):
            try:
                row.append(get_solver("greedy").solve(p, target).saved)
            except InfeasibleError as e:
                row.append(str(e))
        row.append(get_solver("greedy").solve(p, None, minimize="bytes").saved)
        plans.append(row)
    assert plans[0] == plans[1] == plans[2]


def test_dp_believes_independent_costs_and_pays_the_closure():
    # c (not needed, cost 10) -> a (needed, cost 1); b (needed, cost 2) reads an input.
    # Room for one of a, b: the knapsack keeps b (value 2) and "recomputes a for 1", but
    # recomputing a recomputes c too (11). Saving a and recomputing b costs 2.
    p = make(
        1,
        [
            {"name": "c", "needed": False, "cost": 10},
            {"name": "a", "cost": 1},
            {"name": "b", "cost": 2},
        ],
        [(0, 1), (1, 2), (0, 3)],
    )
    dp = get_solver("dp").solve(p, 100)
    assert dp.info["believed_cost"] == 1 and dp.objective == 11
    assert get_solver("cpsat").solve(p, 100).objective == 2
    assert get_solver("greedy").solve(p, 100).objective == 2


def test_dp_prices_a_view_at_its_storage():
    # the backward reads a free view of a costly matmul (same storage), and b (cost 1):
    # room for one. Priced alone the view is worth 0; priced as its storage, 10.
    p = make(
        1,
        [
            {"name": "mm", "needed": False, "cost": 10},
            {"name": "view", "cost": 0, "storage": 1},
            {"name": "b", "cost": 1},
        ],
        [(0, 1), (1, 2), (0, 3)],
    )
    sol = get_solver("dp").solve(p, 100)
    assert sol.saved == [2] and sol.objective == 1 == get_solver("cpsat").solve(p, 100).objective


@pytest.mark.parametrize("name", HEURISTICS)
def test_unrecomputable_blocker_is_saved_instead(name):
    # a (needed, 100 B) reads r, a random op nobody needs directly (10 B): recomputing a
    # means saving r.
    p = make(
        1,
        [
            {"name": "r", "needed": False, "recompute": False, "bytes": 10, "reason": "rng"},
            {"name": "a", "bytes": 100, "cost": 5},
        ],
        [(0, 1), (1, 2)],
    )
    sol = get_solver(name).solve(p, 50)
    assert sol.saved == [1] and sol.objective == 5
    assert get_solver(name).solve(p, None, minimize="bytes").objective == 10
    with pytest.raises(InfeasibleError):
        get_solver(name).solve(p, 5)


@pytest.mark.parametrize("name", HEURISTICS)
def test_blockers_shared_by_several_drops(name, monkeypatch):
    # a0..a3 (100 B each) all read r0 and r1 (150 B each, cannot be recomputed). Dropping
    # one a alone would save 300 B to free 100 B; dropping all four together frees 400 B
    # for 300 B. The greedy has to see the compound move (dp recomputes all at capacity 0).
    nodes = [
        {"name": f"r{i}", "needed": False, "recompute": False, "bytes": 150} for i in range(2)
    ] + [{"name": f"a{i}", "bytes": 100, "cost": 1} for i in range(4)]
    edges = [(0, 1), (0, 2)] + [(r, a) for a in range(3, 7) for r in (1, 2)]
    p = make(1, nodes, edges)
    calls = []
    compound = greedy_moves._compound
    monkeypatch.setattr(greedy_moves, "_compound", lambda *a: calls.append(1) or compound(*a))
    solver = get_solver(name)
    assert solver.solve(p, None, minimize="bytes").saved == [1, 2]
    for target in (300, 399):
        sol = solver.solve(p, target)
        assert (sol.objective, p.saved_bytes(sol.saved)) == oracle.optimum(p, target) == (4.0, 300)
    assert solver.solve(p, 400).objective == 0
    assert bool(calls) == (name == "greedy")


@pytest.mark.parametrize("name", HEURISTICS)
def test_needed_node_that_can_be_neither_saved_nor_recomputed(name):
    p = make(1, [{"name": "a", "save": False, "recompute": False, "reason": "random op"}], [(0, 1)])
    with pytest.raises(InfeasibleError, match=r"a is needed by the backward .*\(random op\)"):
        get_solver(name).solve(p, None)


@pytest.mark.parametrize("name", HEURISTICS)
def test_unsaveable_chain_to_an_unrecomputable_value(name):
    # a must be recomputed (cannot be saved) and reads r, which is neither: no plan at all
    p = make(
        1,
        [
            {"name": "r", "needed": False, "save": False, "recompute": False, "reason": "rng"},
            {"name": "a", "save": False},
        ],
        [(0, 1), (1, 2)],
    )
    with pytest.raises(InfeasibleError, match=r"r is needed to recompute a .*\(rng\)"):
        get_solver(name).solve(p, 10**9)


@pytest.mark.parametrize("name", HEURISTICS)
def test_nothing_recomputable(name):
    nodes = [{"recompute": False, "bytes": 100 * (i + 1), "cost": i} for i in range(4)]
    p = make(1, nodes, [(0, 1), (1, 2), (2, 3), (0, 4)])
    sol = get_solver(name).solve(p, 1000)
    assert sol.saved == [1, 2, 3, 4] and sol.objective == 0
    assert get_solver(name).solve(p, None, minimize="bytes").objective == 1000
    with pytest.raises(InfeasibleError):
        get_solver(name).solve(p, 999)


@pytest.mark.parametrize("name", HEURISTICS)
def test_greedy_says_how_far_it_got(name):
    # everything must be saved (nothing recomputes): the smallest plan saves 300 bytes
    p = make(1, [{"recompute": False, "bytes": 300}], [(0, 1)])
    with pytest.raises(InfeasibleError, match="300"):
        get_solver(name).solve(p, 100)


@pytest.mark.parametrize("name", HEURISTICS)
def test_layered_dag_smoke(name):
    """A wider graph (1,500 nodes, views, blockers): plans stay valid and under target."""
    rng = np.random.default_rng(7)
    n, width = 1500, 50
    edges = [
        (int(max(0, v // width - rng.integers(1, 4)) * width + rng.integers(0, width)), v)
        for v in range(width, n)
        for _ in range(int(rng.integers(1, 4)))
    ]
    storage = np.arange(n)
    views = np.flatnonzero(rng.random(n) < 0.05)
    storage[views[views >= 2 * width]] = views[views >= 2 * width] - width
    is_input = np.arange(n) < width
    p = Problem(
        names=[f"n{i}" for i in range(n)],
        ops=["op"] * n,
        is_input=is_input,
        needed=~is_input & (rng.random(n) < 0.4),
        can_save=np.ones(n, bool),
        can_recompute=~is_input & (rng.random(n) < 0.97),
        storage=storage,
        storage_bytes=np.where(is_input, 0, rng.integers(1, 1000, size=n) * 1024),
        cost=np.where(is_input, 0, rng.integers(0, 100, size=n)).astype(float),
        flops=np.zeros(n),
        edges=edges,
    )
    solver = get_solver(name)
    low = solver.solve(p, None, minimize="bytes")
    high = p.saved_bytes(solver.solve(p, None).saved)
    for b in (0.0, 0.3, 0.7):
        target = int(low.objective + b * (high - low.objective))
        sol = solver.solve(p, target)
        assert p.check(sol.saved) == [] and p.saved_bytes(sol.saved) <= target
