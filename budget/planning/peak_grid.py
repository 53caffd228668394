"""The grid peak search both front ends run for a peak budget.

A plan's peak is not monotone in its saved memory (saving less can mean recomputing more
at once), so the search does not bisect the budget from the start. It takes the plans of
the memory budget and of the fractions of ``PEAK_GRID`` below it, cheapest first, and
predicts each distinct plan once (the front end's ``predict``: the compiled path
partitions the joint graph, the eager path runs the step on fake tensors) until the next
plan would recompute more than the cheapest that fits. Between the cheapest fit and the
nearest cheaper plan above it that does not fit, the grid's 5% steps can leave recompute
on the table, so there the saved-memory target is bisected (:meth:`PeakGrid.refine`).
:func:`~budget.planning.planner.cheapest_fit` then picks the plan, or names the lowest
peak found.

A plan that saves more than the peak budget is not predicted: everything a plan saves is
live at once as its forward ends, so its peak is at least its saved bytes (both counted
per storage, above what is resident before the step, device bytes only), and it misses.
Where nothing fits, the error names the lowest peak of all the plans tried, so those plans
are predicted after all, fewest saved bytes first, while one could peak lower than every
plan predicted (:meth:`PeakGrid.complete`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import replace
from typing import TypeVar

from ..core.plan import Plan
from ..core.sizes import MemoryBudget
from ..errors import BudgetTooSmallError, SolverTimeout
from .planner import PEAK_GRID, bisect_target, cheapest_fit

P = TypeVar("P", bound=Plan)  # a front end's plan type


def grid_budgets(budget: MemoryBudget, *, largest_first: bool = True) -> list[MemoryBudget]:
    """The memory budget, then the fractions of ``PEAK_GRID`` below it, largest first (or
    smallest first: where plans tie, a stable sort keeps the first one)."""
    cap = budget.fraction
    below = sorted((f for f in PEAK_GRID if cap is None or f < cap), reverse=largest_first)
    return [budget, *(MemoryBudget(fraction=f) for f in below)]


class PeakGrid:
    """What the search has predicted (``tried``, by plan key) and what fits ``peak_bytes``.

    ``key(plan)``: what makes two plans the same (what they save and offload; on the eager
    path, with the checkpointed modules); ``predict(plan)``: the plan with its predicted peak
    (``peak_bytes``), called once per distinct plan."""

    def __init__(
        self,
        peak_bytes: int,
        key: Callable[[Plan], Hashable],
        predict: Callable[[Plan], Plan],
    ) -> None:
        self.peak_bytes = peak_bytes
        self.key = key
        self.predict = predict
        self.tried: dict[Hashable, Plan] = {}  # predicted
        self.over: dict[Hashable, Plan] = {}  # not predicted: they save more than peak_bytes
        self.fits: list[Plan] = []
        self.missed: Plan | None = None  # the last plan walked that missed, before any fit

    def costs_more(self, plan: Plan) -> bool:
        """Whether ``plan`` costs more (offloads' exposed time in) than the cheapest fit so
        far."""
        return bool(self.fits) and planned_cost(plan) > min(
            f.total_recompute_cost for f in self.fits
        )

    def try_plan(self, plan: Plan) -> bool:
        """Predict ``plan`` (unless the same plan was, or it saves more than the peak
        budget: a miss) and say whether it fits."""
        k = self.key(plan)
        if k in self.over or (k not in self.tried and plan.saved_bytes > self.peak_bytes):
            self.over.setdefault(k, plan)
            return False
        if k not in self.tried:  # neighbouring targets often give the same plan
            self.record(k, self.predict(plan))
        return any(f is self.tried[k] for f in self.fits)

    def record(self, k: Hashable, told: Plan) -> None:
        """``told``, a predicted plan of key ``k``, among those tried."""
        self.tried[k] = told
        if (told.peak_bytes or 0) <= self.peak_bytes:
            self.fits.append(told)

    def complete(self, predict: Callable[[Plan], Plan] | None = None) -> None:
        """Where nothing fits: predict the plans that save more than the peak budget while
        one could peak lower than every plan predicted (fewest saved bytes first: a plan's
        peak is at least what it saves), so the lowest peak tried is known. ``predict``:
        the front end's last word on a plan's peak (default: ``self.predict``)."""
        for k in [k for k in self.over if k in self.tried]:  # predicted since (exact search)
            del self.over[k]
        for k, plan in sorted(self.over.items(), key=lambda kv: kv[1].saved_bytes):
            if self.fits:
                return
            lowest = min((p.peak_bytes or 0 for p in self.tried.values()), default=None)
            if lowest is not None and plan.saved_bytes >= lowest:
                return
            del self.over[k]
            self.record(k, (predict or self.predict)(plan))

    def walk(self, plans: Iterable[Plan]) -> None:
        """Try ``plans`` (cheapest first) until one recomputes more than a fit."""
        for plan in plans:
            if self.costs_more(plan):
                break
            if not self.try_plan(plan) and not self.fits:
                self.missed = plan

    def refine(self, plan_at: Callable[[int], Plan | None], upper: int | None = None) -> None:
        """Bisect the saved-memory target between the cheapest fit and ``upper``, by
        default the target of the nearest cheaper plan above it that does not fit;
        ``plan_at(target)``: the plan of a target in bytes, or None where there is none
        (below what the solver reaches, or over the memory budget)."""
        if not self.fits:
            return
        best = min(self.fits, key=lambda p: p.total_recompute_cost)
        if upper is None:
            above = [
                p.target_bytes
                for p in [*self.tried.values(), *self.over.values()]
                if p not in self.fits
                and p.target_bytes > best.target_bytes
                and planned_cost(p) < best.total_recompute_cost
            ]
            if not above:
                return
            upper = min(above)

        def fits_at(target: int) -> bool:
            plan = plan_at(target)
            return plan is not None and self.try_plan(plan)

        bisect_target(best.target_bytes, upper, fits_at)

    def best(self, searched: str, floor_bytes: int | None = None) -> Plan:
        """The cheapest fit, or BudgetTooSmallError naming the lowest peak tried."""
        self.complete()
        return cheapest_fit(
            self.fits,
            list(self.tried.values()),
            self.peak_bytes,
            searched,
            floor_bytes,
            others=len(self.over),
        )


def with_and_without_offload(search: Callable[[bool], P], offload: bool, budget: MemoryBudget) -> P:
    """``search(offload)``, the plan of a front end's peak search; with offload also
    ``search(False)``, and the cheaper of the two (ties: the lower peak).

    Offloading nothing is an offload plan too, but the two searches walk different plans:
    a saved-memory target's plan with offload also moves what the link hides for free,
    and its copies in flight peak otherwise, so the search with offload alone can settle
    on a plan dearer than recomputation alone at the same peak budget. The plan without
    offload is kept only within the memory ``budget``'s target of the one with (a fraction
    is of the offload problem's range, whose least bytes can be lower). Where neither
    fits, the error names the lower of their lowest peaks; once one fits, the other
    running out of time only leaves it. The kept plan's "peak search" time is both's."""
    if not offload:
        return search(False)
    found: list[P] = []
    missed: list[BudgetTooSmallError] = []
    took = 0.0
    for allow in (True, False):
        start = time.perf_counter()
        try:
            plan = search(allow)
        except BudgetTooSmallError as e:
            missed.append(e)
        except SolverTimeout:
            if not found:
                raise
        else:
            if allow or not found or plan.saved_bytes <= _limit(found[0], budget):
                found.append(plan)
        took += time.perf_counter() - start
    if not found:
        raise min(missed, key=lambda e: (e.lowest_peak_bytes is None, e.lowest_peak_bytes or 0))
    best = min(found, key=lambda p: (p.total_recompute_cost, p.peak_bytes or 0, p.saved_bytes))
    return replace(best, timings={**best.timings, "peak search": took})


def _limit(plan: Plan, budget: MemoryBudget) -> int:
    """The most a plan may save under ``budget`` in the range of ``plan``'s problem."""
    if budget.fraction is None:
        return int(budget.nbytes or 0)
    return plan.min_bytes + math.floor(budget.fraction * max(0, plan.max_bytes - plan.min_bytes))


def planned_cost(plan: Plan) -> float:
    """What a plan costs as solved: its recompute and its offloads' exposed time (not the
    values a prediction recomputes again, which partitioning adds)."""
    return plan.recompute_cost + plan.offload_cost
