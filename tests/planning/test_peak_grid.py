"""budget.planning.peak_grid: what both front ends' peak searches share."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from budget.errors import BudgetTooSmallError
from budget.planning.peak_grid import with_and_without_offload


def _plan(cost: float, peak: int, saved: int = 0) -> SimpleNamespace:
    return SimpleNamespace(total_recompute_cost=cost, peak_bytes=peak, saved_bytes=saved)


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
    assert with_and_without_offload(search, False).total_recompute_cost == 2.0
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
    assert with_and_without_offload(search, True) is (a if kept else b)
    assert asked == [True, False]


def test_a_search_that_fits_wins_over_one_that_does_not():
    b = _plan(5.0, 10)
    search, _ = _search({True: BudgetTooSmallError("no", lowest_peak_bytes=20), False: b})
    assert with_and_without_offload(search, True) is b


def test_where_neither_fits_the_error_names_the_lower_of_their_lowest_peaks():
    one = BudgetTooSmallError("offload", lowest_peak_bytes=30)
    other = BudgetTooSmallError("plain", lowest_peak_bytes=20)
    search, _ = _search({True: one, False: other})
    with pytest.raises(BudgetTooSmallError) as e:
        with_and_without_offload(search, True)
    assert e.value is other
