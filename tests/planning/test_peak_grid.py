"""budget.planning.peak_grid: what both front ends' peak searches share."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

import pytest

from budget.core.sizes import MemoryBudget
from budget.errors import BudgetTooSmallError, SolverTimeout
from budget.planning.peak_grid import PeakGrid, with_and_without_offload

ONE = MemoryBudget(fraction=1.0)


@dataclass
class _Plan:  # what the choice reads of a Plan
    total_recompute_cost: float
    peak_bytes: int
    saved_bytes: int = 0
    target_bytes: int = 100
    min_bytes: int = 10
    max_bytes: int = 110
    timings: dict = field(default_factory=dict)
    name: int = 0
    recompute_cost: float = 0.0
    offload_cost: float = 0.0
    peak_target_bytes: int | None = None


def _plan(cost: float, peak: int, saved: int = 0, target: int = 100) -> _Plan:
    return _Plan(cost, peak, saved, target)


def _search(found: dict[bool, object]):
    asked = []

    def search(allow: bool):
        asked.append(allow)
        got = found[allow]
        if isinstance(got, Exception):
            raise got
        return got

    return search, asked


def test_without_offload_only_the_plain_search_runs():
    search, asked = _search({False: _plan(2.0, 10)})
    assert with_and_without_offload(search, False, ONE).total_recompute_cost == 2.0
    assert asked == [False]


@pytest.mark.parametrize(
    ("moved", "plain", "kept"),
    [
        ((1.0, 12), (2.0, 10), True),  # offload cheaper
        ((3.0, 9), (2.0, 10), False),  # recomputation alone cheaper
        ((2.0, 11), (2.0, 10), False),  # equal cost: the lower peak
    ],
)
def test_with_offload_the_cheaper_of_both_searches_is_kept(moved, plain, kept):
    a, b = _plan(*moved), _plan(*plain)
    search, asked = _search({True: a, False: b})
    got = with_and_without_offload(search, True, ONE)
    assert (got.total_recompute_cost, got.peak_bytes) == (moved if kept else plain)
    assert asked == [True, False] and "peak search" in got.timings


def test_a_plan_without_offload_over_the_memory_budgets_target_is_not_kept():
    # a fraction is of the offload problem's range (here 10..110: half is 60 bytes), whose
    # least bytes can be below the plain problem's
    a, b = _plan(3.0, 10, saved=40), _plan(1.0, 10, saved=61)
    search, _ = _search({True: a, False: b})
    assert with_and_without_offload(search, True, MemoryBudget(fraction=0.5)).saved_bytes == 40
    search, _ = _search({True: a, False: _plan(1.0, 10, saved=60)})
    assert with_and_without_offload(search, True, MemoryBudget(fraction=0.5)).saved_bytes == 60


def test_once_a_plan_fits_the_other_search_running_out_of_time_leaves_it():
    a = _plan(3.0, 10)
    search, _ = _search({True: a, False: SolverTimeout("out of time")})
    assert with_and_without_offload(search, True, ONE).total_recompute_cost == 3.0
    search, _ = _search({True: SolverTimeout("out of time"), False: a})
    with pytest.raises(SolverTimeout):
        with_and_without_offload(search, True, ONE)


def test_a_search_that_fits_wins_over_one_that_does_not():
    b = _plan(5.0, 10)
    search, _ = _search({True: BudgetTooSmallError("no", lowest_peak_bytes=20), False: b})
    assert with_and_without_offload(search, True, ONE).total_recompute_cost == 5.0


def test_where_neither_fits_the_error_names_the_lower_of_their_lowest_peaks():
    one = BudgetTooSmallError("offload", lowest_peak_bytes=30)
    other = BudgetTooSmallError("plain", lowest_peak_bytes=20)
    search, _ = _search({True: one, False: other})
    with pytest.raises(BudgetTooSmallError) as e:
        with_and_without_offload(search, True, ONE)
    assert e.value is other


@pytest.mark.parametrize("seed", range(100))
def test_plans_saving_more_than_the_peak_budget_change_neither_choice_nor_error(seed):
    """A plan's peak is at least what it saves, so the grid predicts no plan saving more
    than the peak budget, unless nothing fits and it could still peak lowest. Oracle: every
    plan's peak known (min over all, by hand), against the grid's choice or error."""
    rng = random.Random(seed)
    budget = rng.randrange(40, 120)
    plans, peaks = [], {}
    for i in range(rng.randrange(1, 12)):
        saved = rng.randrange(0, 150)
        peaks[i] = saved + rng.choice([0, rng.randrange(0, 80)])  # never below saved
        cost = float(rng.randrange(0, 5))
        plans.append(_Plan(cost, None, saved, name=i, recompute_cost=cost))
    predicted = []

    def predict(p):  # type: ignore[no-untyped-def]
        predicted.append(p.name)
        return replace(p, peak_bytes=peaks[p.name])

    grid = PeakGrid(budget, key=lambda p: p.name, predict=predict)
    for p in plans:
        grid.try_plan(p)
    fits = [p for p in plans if peaks[p.name] <= budget]
    lowest = min(peaks.values())
    if fits:
        want = min(fits, key=lambda p: (p.total_recompute_cost, peaks[p.name], p.saved_bytes))
        got = grid.best("plans")
        assert (got.name, got.peak_bytes, got.peak_target_bytes) == (
            want.name,
            peaks[want.name],
            budget,
        )
    else:
        with pytest.raises(BudgetTooSmallError) as e:
            grid.best("plans")
        assert e.value.lowest_peak_bytes == lowest
        assert f"of the {len(plans)} plans" in str(e.value)
    assert len(set(predicted)) == len(predicted)  # each plan once
    for p in plans:
        if p.name not in predicted:  # skipped: it could neither fit nor peak lowest
            assert p.saved_bytes > budget and (fits or p.saved_bytes >= lowest)
    if fits:
        assert all(p.saved_bytes <= budget for p in plans if p.name in predicted)


def test_a_plan_passed_over_then_predicted_elsewhere_counts_once():
    """A plan saving more than the peak budget is passed over; the exact search may
    predict it later (``record``): the refusal counts it once and predicts it no more."""
    asked = []
    grid = PeakGrid(50, key=lambda p: p.name, predict=lambda p: asked.append(p) or p)
    plan = _Plan(1.0, None, 80, name=1)
    assert grid.try_plan(plan) is False and not asked
    grid.record(1, replace(plan, peak_bytes=90))
    with pytest.raises(BudgetTooSmallError, match="of the 1 plans") as e:
        grid.best("plans")
    assert e.value.lowest_peak_bytes == 90 and not asked
