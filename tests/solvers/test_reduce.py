"""Problem reduction (budget/solvers/reduce.py) against brute force: the reduced problem
has the same Pareto frontier once its offsets are added, and every one of its plans
expands to a plan of the original problem priced exactly at its own price plus the
offsets (pure data, no torch.fx, except the last test: a real GPT's joint graph). Plans
and prices come from the brute-force oracle, not from Problem's own pricing."""

from __future__ import annotations

import pytest
from helpers import oracle
from helpers.problems import random_problem, rich_problem, with_offload

from budget.core.problem import Problem
from budget.solvers import InfeasibleError, available_solvers, get_solver
from budget.solvers.reduce import Reduced, reduce_problem


def frontier(points) -> list[tuple[float, int]]:
    """The Pareto frontier (cost, bytes) of a set of plans' prices."""
    out: list[tuple[float, int]] = []
    for c, b in sorted(set(points), key=lambda x: (x[1], x[0])):
        if not out or c < out[-1][0]:
            out.append((c, b))
    return out


KINDS = [rich_problem, random_problem]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(60))
def test_reduction_keeps_the_frontier_and_expands_exactly(kind, seed):
    p = kind(seed)
    full = oracle.plans(p)
    red = reduce_problem(p)
    if not full:  # infeasible problems are left to the solvers' own errors
        assert red.identity
        return
    q = red.problem
    assert q.n <= p.n
    reduced = oracle.plans(q)
    for saved, (c, b) in reduced.items():
        expanded = red.expand(list(saved))
        got = oracle.price(p, expanded)
        assert got is not None, (saved, expanded)  # a valid plan of the original problem
        assert got[0] == pytest.approx(c + red.cost_offset, abs=1e-9)
        assert got[1] == b + red.bytes_offset
    shifted = [(c + red.cost_offset, b + red.bytes_offset) for c, b in reduced.values()]
    assert frontier(shifted) == frontier(full.values())


def _lexicographic(plans, target):
    """(cost, device bytes, host bytes) of the best of ``plans`` within ``target``."""
    fits = [(round(c, 9), b, h) for c, b, h in plans if b <= target]
    return min(fits) if fits else None


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(40))
def test_reduction_with_offload_keeps_every_optimum_and_expands_exactly(kind, seed):
    """With offload priced, a plan of the reduced problem (offloads included) expands to
    one of the original problem at its own price plus the offsets, host bytes the same,
    and the least (cost, device bytes, host bytes) within every target is kept."""
    p = with_offload(kind(seed, n=10), seed)
    full = oracle.offload_plans(p)
    red = reduce_problem(p)
    if not full:
        assert red.identity
        return
    q = red.problem
    assert q.offload is not None
    priced = {(saved, away): (c, b) for c, b, saved, away in full}
    reduced = oracle.offload_plans(q)
    for c, b, saved, away in reduced:
        expanded = (tuple(red.expand(list(saved))), tuple(red.expand_offloaded(list(away))))
        got = priced.get(expanded)
        assert got is not None, (saved, away, expanded)  # a valid plan of the original
        assert got[0] == pytest.approx(c + red.cost_offset, abs=1e-9)
        assert got[1] == b + red.bytes_offset
        assert oracle.host_bytes(p, expanded[1]) == oracle.host_bytes(q, away)
    mine = [(c, b, oracle.host_bytes(p, a)) for c, b, _, a in full]
    theirs = [
        (c + red.cost_offset, b + red.bytes_offset, oracle.host_bytes(q, a))
        for c, b, _, a in reduced
    ]
    for target in sorted({b for _, b, _ in mine}):
        assert _lexicographic(theirs, target) == _lexicographic(mine, target), target


def test_the_offload_exemptions_are_exercised():
    """A guard on the property test above: in its problems, leaving the values that may be
    offloaded to the solver keeps nodes the rules would otherwise remove."""
    import dataclasses

    kept = 0
    for kind in KINDS:
        for seed in range(40):
            p = with_offload(kind(seed, n=10), seed)
            plain = reduce_problem(dataclasses.replace(p, offload=None))
            kept += reduce_problem(p).problem.n > plain.problem.n
    assert kept >= 20


def test_every_rule_is_exercised():
    """Not a proof, a guard: the property test above must exercise every rule."""
    fired: set[str] = set()
    for s in range(400):
        p = rich_problem(s)
        fired |= set(reduce_problem(p).rules)
    from budget.solvers.reduce_rules import _RULES

    assert fired == set(_RULES)


def test_needed_node_nobody_can_make_available_is_left_to_the_solver():
    p = Problem(
        names=["x", "a", "b"],
        ops=["in", "op", "op"],
        is_input=[True, False, False],
        needed=[False, False, True],
        can_save=[True, False, False],
        can_recompute=[False, False, True],
        storage=[0, 1, 2],
        storage_bytes=[0, 8, 8],
        cost=[0, 1, 1],
        flops=[0, 0, 0],
        edges=[(0, 1), (1, 2)],
        reason=["", "rng", ""],
    )
    assert reduce_problem(p).identity
    with pytest.raises(InfeasibleError, match="b is needed by the backward"):
        get_solver("mincut", reduce=True).solve(p, None)


def test_negative_costs_are_not_reduced():
    p = random_problem(0)
    p.cost[3] = -1.0
    assert reduce_problem(p).identity


EXACT = [name for name in available_solvers() if get_solver(name).exact]


@pytest.mark.parametrize("name", EXACT)
@pytest.mark.parametrize("seed", range(8))
def test_reduced_solvers_match_unreduced(name, seed):
    p = rich_problem(100 + seed, n=14)
    full = oracle.plans(p)
    if not full:
        return
    plain, wrapped = get_solver(name, reduce=False), get_solver(name, reduce=True)
    if name == "auto":  # reduces inside, only what the min-cut leaves unproven
        assert wrapped.reduction and not plain.reduction
    else:
        assert isinstance(wrapped, Reduced) and not isinstance(plain, Reduced)
    sizes = sorted({b for _, b in full.values()})
    low = sizes[0]
    for target in sorted({low - 1, low, sizes[len(sizes) // 3], sizes[2 * len(sizes) // 3]}):
        fits = [(c, b) for c, b in full.values() if b <= target]
        if not fits:
            with pytest.raises(InfeasibleError, match=f"at most {target} bytes"):
                wrapped.solve(p, target)
            continue
        a, b = plain.solve(p, target), wrapped.solve(p, target)
        assert oracle.price(p, a.saved) == oracle.price(p, b.saved) == min(fits)
        assert a.status == b.status == "optimal"
        assert not p.check(b.saved)
    assert wrapped.solve(p, None, minimize="bytes").objective == low


def test_reduced_solution_reports_the_reduction_and_original_numbers():
    p = rich_problem(5, n=14)  # a forced save, a forced recompute: both offsets
    red = reduce_problem(p)
    assert red.cost_offset > 0 and red.bytes_offset > 0 and red.forced
    best = oracle.optimum(p)
    sol = get_solver("cpsat", reduce=True).solve(p, None)
    assert sol.info["reduced"]["nodes"] == (p.n, red.problem.n)
    assert (sol.objective, p.saved_bytes(sol.saved)) == best
    assert set(red.forced) <= set(sol.saved)
    with pytest.raises(InfeasibleError, match=f"at most {red.bytes_offset - 1} bytes"):
        get_solver("cpsat", reduce=True).solve(p, red.bytes_offset - 1)


def test_gpt_joint_graph_same_optimum_with_and_without_reduction():
    import budget
    from budget.core.sizes import parse_budget
    from budget.models import get_builtin
    from budget.planning.planner import solve_ends, target_bytes

    ex = get_builtin("gpt", layers=2, d=64, seq=64)
    (p,) = budget.problems(ex.step, *ex.args)
    red = reduce_problem(p)
    assert red.problem.n < p.n // 3
    plain, wrapped = get_solver("cpsat", reduce=False), get_solver("cpsat", reduce=True)
    ends = solve_ends(p, plain, 60)
    assert solve_ends(p, wrapped, 60).min_bytes == ends.min_bytes
    for b in (0.1, 0.3, 0.5, 0.7, 0.9):
        t = target_bytes(parse_budget(b), ends)
        x, y = plain.solve(p, t), wrapped.solve(p, t)
        # costs are seconds: the two sums may differ in the last bits (summation order)
        assert x.objective == pytest.approx(y.objective, rel=1e-9, abs=0)
        assert p.saved_bytes(x.saved) == p.saved_bytes(y.saved)
        assert x.status == y.status == "optimal"
