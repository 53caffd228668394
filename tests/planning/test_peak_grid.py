"""budget.planning.peak_grid: what both front ends' peak searches share."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from budget.core.sizes import MemoryBudget
from budget.errors import BudgetTooSmallError, SolverTimeout
from budget.planning.peak_grid import with_and_without_offload

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
