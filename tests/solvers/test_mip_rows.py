"""budget.solvers.mip.rows (the eager peak search's model) against the brute-force oracle:
the cheapest saved set under a cap and rows of storage groups, on drawn problems."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import oracle
from helpers.problems import random_problem, rich_problem

from budget.solvers.mip.rows import RowModel


def _rows(p, seed):
    """Two rows over drawn storage groups, each with room for about half of them."""
    rng = np.random.default_rng(seed)
    groups = [g for g in range(len(p.storage_bytes)) if p.storage_bytes[g] > 0]
    rows = []
    for _ in range(2):
        chosen = [g for g in groups if rng.random() < 0.6]
        rows.append((chosen, int(sum(p.storage_bytes[g] for g in chosen) * 0.5)))
    return rows


def _fits(p, saved, rows, cap):
    kept = {int(p.storage[v]) for v in saved if p.storage[v] >= 0 and not p.is_input[v]}
    if sum(int(p.storage_bytes[g]) for g in kept) > cap:
        return False
    return all(sum(int(p.storage_bytes[g]) for g in kept if g in gs) <= room for gs, room in rows)


@pytest.mark.parametrize("seed", range(12))
def test_the_cheapest_plan_under_rows_is_the_oracles(seed):
    p = (random_problem if seed % 2 else rich_problem)(seed)
    rows = _rows(p, seed)
    cap = int(p.storage_bytes.sum() * 0.7)
    best = min(
        (cost for saved, (cost, _) in oracle.plans(p).items() if _fits(p, saved, rows, cap)),
        default=None,
    )
    got = RowModel(p, cap, rows).next(10.0)
    found = got.saved
    if best is None:
        assert found is None and got.exhausted
        return
    assert found is not None and _fits(p, found, rows, cap)
    assert oracle.price(p, found)[0] == pytest.approx(best)


@pytest.mark.parametrize("seed", [0, 2, 5, 6])  # whose cheapest plan under the cap costs
def test_excluded_and_cheaper_plans_are_left_out(seed):
    p = random_problem(seed)
    cap = int(p.storage_bytes.sum() * 0.3)
    model = RowModel(p, cap, [])
    first = model.next(10.0).saved
    assert first is not None
    cost = oracle.price(p, first)[0]
    assert cost == oracle.optimum(p, cap)[0] > 0
    model.exclude(first, [])  # every saved set containing the first is out
    second = model.next(10.0).saved
    if second is None:  # then every plan under the cap saves what the first does
        fits = [s for s, (_, b) in oracle.plans(p).items() if b <= cap]
        assert all(set(first) <= set(s) for s in fits), fits
    else:
        assert not set(first) <= set(second) and oracle.price(p, second)[0] >= cost
    model.cheaper_than(cost)  # nothing is cheaper than the optimum
    assert model.next(10.0).exhausted


def test_a_row_over_the_limit_whatever_is_saved_leaves_no_plan():
    p = random_problem(2)
    assert RowModel(p, None, [([], -1)]).next(10.0).exhausted
    assert RowModel(p, None, [([], 0)]).next(10.0).saved is not None
