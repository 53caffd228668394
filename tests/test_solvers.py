"""Contract suite for every exact solver: brute force on small random problems, agreement,
and the edge cases (pure data, no torch.fx)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from budget.problem import Problem
from budget.solvers import InfeasibleError, available_solvers, get_solver


def random_problem(seed: int, n: int = 10) -> Problem:
    rng = np.random.default_rng(seed)
    n_in = 2
    edges = []
    for v in range(n_in, n):
        for u in rng.choice(v, size=min(v, int(rng.integers(1, 3))), replace=False):
            edges.append((int(u), v))
    storage = np.arange(n)
    if n > 5:
        storage[5] = storage[4]  # node 5 is a view of node 4
    return Problem(
        names=[f"n{i}" for i in range(n)],
        ops=["op"] * n,
        is_input=[i < n_in for i in range(n)],
        needed=[i >= n_in and rng.random() < 0.5 for i in range(n)],
        can_save=[True] * n,
        can_recompute=[i >= n_in and rng.random() < 0.85 for i in range(n)],
        storage=storage,
        storage_bytes=[0] * n_in + [int(b) for b in rng.integers(1, 9, size=n - n_in) * 100],
        cost=[0.0] * n_in + [float(c) for c in rng.integers(0, 5, size=n - n_in)],
        flops=[0.0] * n,
        edges=edges,
    )


def brute_force(p: Problem, target: int | None) -> tuple[float, int] | None:
    """(min cost, min bytes among those) over every saved set, or None if infeasible."""
    best = None
    free = [v for v in range(p.n) if not p.is_input[v]]
    for mask in itertools.product([0, 1], repeat=len(free)):
        saved = [v for v, m in zip(free, mask, strict=True) if m]
        if p.check(saved):
            continue
        nbytes = p.saved_bytes(saved)
        if target is not None and nbytes > target:
            continue
        cost = float(p.cost[p.recompute_closure(saved)].sum())
        if best is None or (cost, nbytes) < best:
            best = (cost, nbytes)
    return best


EXACT = [name for name in available_solvers() if get_solver(name).exact]


def test_both_exact_backends_are_installed():
    assert {"ilp", "cpsat"} <= set(EXACT)


@pytest.mark.parametrize("name", EXACT)
@pytest.mark.parametrize("seed", range(12))
def test_exact_solvers_match_brute_force(name, seed):
    p = random_problem(seed)
    solver = get_solver(name)
    total = int(p.storage_bytes.sum())
    for target in [0, total // 4, total // 2, total]:
        expect = brute_force(p, target)
        if expect is None:
            with pytest.raises(InfeasibleError):
                solver.solve(p, target)
            continue
        sol = solver.solve(p, target)
        cost = float(p.cost[p.recompute_closure(sol.saved)].sum())
        assert (cost, p.saved_bytes(sol.saved)) == expect
        assert p.saved_bytes(sol.saved) <= target and not p.check(sol.saved)
        assert sol.status == "optimal"


@pytest.mark.parametrize("name", EXACT)
def test_needed_node_that_can_be_neither_saved_nor_recomputed(name):
    p = Problem(
        names=["x", "a"],
        ops=["in", "op"],
        is_input=[True, False],
        needed=[False, True],
        can_save=[True, False],
        can_recompute=[False, False],
        storage=[0, 1],
        storage_bytes=[0, 8],
        cost=[0, 1],
        flops=[0, 0],
        edges=[(0, 1)],
        reason=["", "random op"],
    )
    with pytest.raises(InfeasibleError, match=r"a is needed by the backward .*\(random op\)"):
        get_solver(name).solve(p, None)


def empty_problem() -> Problem:
    return Problem(
        names=[],
        ops=[],
        is_input=[],
        needed=[],
        can_save=[],
        can_recompute=[],
        storage=[],
        storage_bytes=[],
        cost=[],
        flops=[],
        edges=[],
    )


@pytest.mark.parametrize("name", available_solvers())
def test_empty_problem(name):
    p = empty_problem()
    for target in (0, None):
        sol = get_solver(name).solve(p, target)
        assert sol.saved == [] and sol.objective == 0
    assert get_solver(name).solve(p, 0, minimize="bytes").objective == 0


@pytest.mark.parametrize("seed", range(6))
def test_exact_solvers_agree_on_larger_problems(seed):
    p = random_problem(100 + seed, n=40)
    total = int(p.storage_bytes.sum())
    for target in [total // 5, total // 2]:
        results = set()
        for name in EXACT:
            try:
                sol = get_solver(name).solve(p, target)
            except InfeasibleError:
                results.add(None)
                continue
            results.add(
                (float(p.cost[p.recompute_closure(sol.saved)].sum()), p.saved_bytes(sol.saved))
            )
        assert len(results) == 1, results


def test_missing_backend_names_the_package_and_what_is_available():
    from budget.solvers import _SOLVERS, register_solver
    from budget.solvers.base import SolverBase

    class Phantom(SolverBase):
        name = "phantom"
        exact = True
        requires = "no_such_package_xyz"

    register_solver(Phantom)
    try:
        assert "phantom" not in available_solvers()
        with pytest.raises(
            ValueError, match=r"needs the package 'no_such_package_xyz' .*available: auto"
        ):
            get_solver("phantom")
        with pytest.raises(ValueError, match="already registered"):
            register_solver(Phantom)
    finally:
        del _SOLVERS["phantom"]
