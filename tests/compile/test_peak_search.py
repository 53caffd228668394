"""budget.compile.peak_search: the exact peak search against brute force. On a step small
enough to partition every plan, the oracle partitions and predicts each saved set (the
peak model, each value recomputed once) and keeps the cheapest that fits each limit; the
search, which only sees the bound and CP-SAT, must find a plan as cheap and prove it."""

from __future__ import annotations

import itertools

import pytest
import torch
from helpers.partitions import capture

from budget.compile.liveness import liveness_bound
from budget.compile.peak_search import search_peak
from budget.models import Example

pytest.importorskip("ortools")


def _tiny() -> Example:
    torch.manual_seed(0)
    w1, w2 = (torch.randn(32, 32, requires_grad=True) for _ in range(2))
    x = torch.randn(512, 32)  # activations of 64 KiB, weights of 4 KiB

    def step(x):
        return (torch.tanh(torch.tanh(x @ w1)) @ w2).sum()

    return Example("tiny", torch.nn.Module(), (x,), step)


@pytest.fixture(scope="session")  # built once per worker: tests/conftest.py
def bounded():
    """The tiny step's capture and its liveness bound."""
    got = capture(_tiny(), "eager")
    p = got.partitions
    return got, liveness_bound(p.joint_module.graph, p.node_info, p.nodes, p.num_fwd_outputs)


@pytest.fixture(scope="session")
def tiny(bounded):
    """With every distinct plan partitioned (the oracle): seconds, so asked only by the
    tests that read the plans."""
    got, bound = bounded
    problem = got.problem
    free = [v for v in range(problem.n) if not problem.is_input[v] and problem.can_save[v]]
    assert len(free) <= 16  # the oracle partitions every distinct plan
    plans = {}
    for k in range(len(free) + 1):
        for saved in itertools.combinations(free, k):
            pruned = tuple(problem.prune_unused(saved))
            if pruned not in plans and not problem.check(pruned):
                plans[pruned] = got.plan(list(pruned))
    return got, bound, plans


def test_the_search_finds_and_proves_the_cheapest_plan_that_fits(tiny):
    got, bound, plans = tiny
    problem = got.problem
    peaks = sorted({p.peak_bytes for p in plans.values()})
    assert len(peaks) >= 2
    for limit in peaks + [peaks[0] - 1]:
        fitting = [p for p in plans.values() if p.peak_bytes <= limit]
        oracle = min((p.recompute_cost for p in fitting), default=None)
        result = search_peak(
            problem,
            bound,
            limit,
            None,
            lambda saved: got.plan(saved),
            lambda plan, limit=limit: plan.peak_bytes <= limit,
            max_plans=len(plans) + 1,
        )
        assert result.proven, (limit, result.stopped)
        found = None if result.best is None else result.best.recompute_cost
        assert found == pytest.approx(oracle) if oracle is not None else found is None


def test_no_plan_peaks_below_the_floor(tiny):
    _, bound, plans = tiny
    assert bound.floor() <= min(p.peak_bytes for p in plans.values())


def test_peak_search_exact_plans_the_oracles_cheapest_and_says_it_is_proven(tiny):
    """Through budget.plan: the plan proven cheapest at the lowest peak any plan reaches;
    the grid's plan (the default search) recomputes no less."""
    import budget

    _, _, plans = tiny
    limit = min(p.peak_bytes for p in plans.values())
    oracle = min(p.recompute_cost for p in plans.values() if p.peak_bytes <= limit)
    example = _tiny()
    with budget.config.patch(peak_search="exact"):
        exact = budget.plan(example.step, *example.args, peak_memory_budget=f"{limit}B")
    grid = budget.plan(example.step, *example.args, peak_memory_budget=f"{limit}B")
    assert exact.peak_bytes <= limit and exact.status == "optimal"
    assert exact.total_recompute_cost == pytest.approx(oracle)
    assert grid.total_recompute_cost >= exact.total_recompute_cost - 1e-18


def test_a_budget_below_the_floor_is_refused_as_unreachable_by_any_plan(bounded):
    import budget

    _, bound = bounded
    example = _tiny()
    with pytest.raises(
        budget.BudgetTooSmallError, match="no plan of this graph is predicted to peak below"
    ):
        budget.plan(example.step, *example.args, peak_memory_budget=f"{bound.floor() - 1}B")
