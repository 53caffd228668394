"""Contract suite for every exact solver: the brute-force oracle on small random problems,
agreement, and the edge cases (pure data, no torch.fx)."""

from __future__ import annotations

import itertools

import pytest
from helpers import oracle
from helpers.problems import empty_problem, random_problem

from budget.core.problem import Problem
from budget.solvers import InfeasibleError, SolverTimeout, available_solvers, get_solver

EXACT = [name for name in available_solvers() if get_solver(name).exact]


def test_exact_backends_are_installed():
    import importlib.util

    assert {"auto", "cpsat", "ilp", "mip"} <= set(EXACT)
    assert ("highs" in EXACT) == (importlib.util.find_spec("highspy") is not None)


@pytest.mark.parametrize("reduce", [True, False], ids=["reduced", "plain"])
@pytest.mark.parametrize("name", EXACT)
@pytest.mark.parametrize("seed", range(12))
def test_exact_solvers_match_brute_force(name, seed, reduce):
    p = random_problem(seed)
    solver = get_solver(name, reduce=reduce)
    total = int(p.storage_bytes.sum())
    for target in [0, total // 4, total // 2, total]:
        expect = oracle.optimum(p, target)
        if expect is None:
            with pytest.raises(InfeasibleError):
                solver.solve(p, target)
            continue
        sol = solver.solve(p, target)
        assert oracle.price(p, sol.saved) == expect
        cost = float(p.cost[p.recompute_closure(sol.saved)].sum())
        assert (cost, p.saved_bytes(sol.saved)) == expect and sol.objective == cost
        assert p.saved_bytes(sol.saved) <= target and not p.check(sol.saved)
        assert sol.status == "optimal" and sol.info.get("tie_break") == "optimal"


@pytest.mark.parametrize("reduce", [True, False], ids=["reduced", "plain"])
@pytest.mark.parametrize("name", EXACT)
@pytest.mark.parametrize("seed", range(6))
def test_exact_solvers_find_the_fewest_bytes(name, seed, reduce):
    """``minimize="bytes"``: the fewest bytes, then the least cost among them."""
    p = random_problem(seed)
    expect = oracle.optimum(p, None, minimize="bytes")
    if expect is None:
        with pytest.raises(InfeasibleError):
            get_solver(name, reduce=reduce).solve(p, None, minimize="bytes")
        return
    sol = get_solver(name, reduce=reduce).solve(p, None, minimize="bytes")
    assert oracle.price(p, sol.saved) == expect and sol.objective == expect[1]
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


@pytest.mark.parametrize("name", available_solvers())
def test_empty_problem(name):
    p = empty_problem()
    for target in (0, None):
        sol = get_solver(name).solve(p, target)
        assert sol.saved == [] and sol.objective == 0
    assert get_solver(name).solve(p, 0, minimize="bytes").objective == 0


@pytest.mark.parametrize("name", EXACT)
def test_time_limits_give_a_plan_within_target_or_a_clear_error(name):
    """Whatever the clock does: optimal, or feasible with a bound at most the objective,
    or SolverTimeout; never a plan over the target."""
    p = random_problem(7, n=400)
    target = int(p.storage_bytes.sum()) // 3
    for reduce in (True, False):
        try:
            sol = get_solver(name, reduce=reduce).solve(p, target, time_limit=0.01)
        except SolverTimeout as e:
            assert "raise the time limit" in str(e)
            continue
        assert p.saved_bytes(sol.saved) <= target and not p.check(sol.saved)
        assert sol.status in ("optimal", "feasible")
        if sol.status == "feasible" and sol.bound is not None:
            assert sol.bound <= sol.objective * (1 + 1e-9) and sol.gap is not None


@pytest.mark.parametrize("name", EXACT)
def test_exact_solvers_are_deterministic(name):
    p = random_problem(21, n=40)
    target = int(p.storage_bytes.sum()) // 3
    a = get_solver(name).solve(p, target)
    b = get_solver(name).solve(p, target)
    assert (a.saved, a.objective, a.status) == (b.saved, b.objective, b.status)


@pytest.mark.parametrize("seed", range(6))
def test_exact_solvers_agree_on_larger_problems(seed):
    p = random_problem(100 + seed, n=40)
    total = int(p.storage_bytes.sum())
    for target in [total // 5, total // 2]:
        results = set()
        for name, reduce in itertools.product(EXACT, (True, False)):
            try:
                sol = get_solver(name, reduce=reduce).solve(p, target)
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


@pytest.mark.skipif("highs" not in EXACT, reason="needs highspy")
def test_highs_runs_outside_this_process():
    """highspy >= 1.15 and OR-Tools ship clashing libhighs.so.1 (google/or-tools#5246):
    HiGHS must run in its worker process, never be loaded here next to OR-Tools."""
    # In a fresh interpreter: elsewhere in the suite `import pulp` (the ilp solver) loads
    # highspy itself, which says nothing about the highs solver.
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from budget.solvers import get_solver\n"
        "from budget.core.problem import Problem\n"
        "p = Problem(names=['x', 'a', 'b'], ops=['input', 'op', 'op'],\n"
        "            is_input=[1, 0, 0], needed=[0, 0, 1], can_save=[1, 1, 1],\n"
        "            can_recompute=[1, 1, 1], storage=[-1, 0, 1], storage_bytes=[8, 8],\n"
        "            cost=[0, 1, 2], flops=[0, 1, 2], edges=[(0, 1), (1, 2)])\n"
        "assert get_solver('highs', reduce=False).solve(p, 0).status == 'optimal'\n"
        "print('highspy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("seed", range(4))
def test_mip_with_ortools_highs_matches_brute_force(seed):
    from budget.solvers.mip.mathopt import OrToolsMIP

    p = random_problem(seed)
    target = int(p.storage_bytes.sum()) // 3
    expect = oracle.optimum(p, target)
    if expect is None:
        with pytest.raises(InfeasibleError):
            OrToolsMIP(backend="highs").solve(p, target)
    else:
        sol = OrToolsMIP(backend="highs").solve(p, target)
        assert oracle.price(p, sol.saved) == expect and sol.status == "optimal"
    with pytest.raises(ValueError, match="scip, highs"):
        OrToolsMIP(backend="gurobi")
