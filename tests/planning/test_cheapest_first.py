"""budget.planning.cheapest_first (the loop of both exact peak searches) against the
brute-force oracle: with a judge the model does not know (saved bytes under a lower
limit), the loop ends with the cheapest plan the judge accepts, proven."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from helpers import oracle
from helpers.problems import random_problem, rich_problem

from budget.planning.cheapest_first import cheapest_first
from budget.solvers.mip.rows import RowModel


@dataclass
class _Plan:
    saved: list[int]
    total_recompute_cost: float
    saved_bytes: int


def _make(p):
    def make(saved: list[int]) -> _Plan:
        price = oracle.price(p, saved)
        assert price is not None, f"the loop offered an invalid plan: {saved}"
        return _Plan(saved, *price)

    return make


@pytest.mark.parametrize("rebuild", [False, True])
@pytest.mark.parametrize("seed", range(8))
def test_the_loop_ends_with_the_cheapest_plan_its_judge_accepts(seed, rebuild):
    p = (random_problem if seed % 2 else rich_problem)(seed)
    limit = int(p.storage_bytes.sum() * 0.3)  # the judge's, unknown to the model
    builds: list[RowModel] = []

    def build() -> RowModel:
        builds.append(RowModel(p, None, []))
        return builds[-1]

    found = cheapest_first(
        p,
        build,
        _make(p),
        lambda plan: plan.saved_bytes <= limit,
        lambda *_: rebuild,
        time_limit=60.0,
        max_plans=10_000,
    )
    want = oracle.optimum(p, limit)
    assert found.proven and found.stopped == "no cheaper plan left"
    missed = [t for t in found.tried if t.saved_bytes > limit]
    assert len(builds) == (1 + len(missed) if rebuild else 1)
    if want is None:
        assert found.best is None
        return
    assert found.best is not None and found.best.saved_bytes <= limit
    assert found.best.total_recompute_cost == pytest.approx(want[0])
    costs = [t.total_recompute_cost for t in found.tried]
    assert costs == sorted(costs)  # cheapest first
    assert found.tried[-1] is found.best  # after a fit, only cheaper plans are asked for


def test_a_known_fit_bounds_the_search_and_the_plan_limit_stops_it():
    p = rich_problem(0)
    cheapest = oracle.optimum(p)
    assert cheapest is not None
    known = _Plan([], cheapest[0], cheapest[1])  # as cheap as any plan: nothing is cheaper
    found = cheapest_first(
        p,
        lambda: RowModel(p, None, []),
        _make(p),
        lambda _: True,
        lambda *_: False,
        best=known,
        time_limit=60.0,
        max_plans=5,
    )
    assert found.best is known and found.proven and not found.tried
    found = cheapest_first(
        p,
        lambda: RowModel(p, None, []),
        _make(p),
        lambda _: False,
        lambda *_: False,
        time_limit=60.0,
        max_plans=2,
    )
    assert found.best is None and len(found.tried) == 2
    assert not found.proven and found.stopped == "2 plans predicted"


def test_nothing_to_build_a_model_from_stops_at_once():
    p = rich_problem(0)
    found = cheapest_first(
        p,
        lambda: None,
        _make(p),
        lambda _: True,
        lambda *_: True,
        time_limit=60.0,
        max_plans=5,
    )
    assert found.best is None and not found.tried and found.stopped == "no model to ask"
