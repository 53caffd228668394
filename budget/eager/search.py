"""Which eager plan a budget gets, with its predicted peak: ``budget.apply``'s search.

A memory budget alone: its plan (:func:`~budget.eager.planner.plan_trace`) with the peak
tie-break (:func:`_tie_broken`; :mod:`budget.planning.tie_break`). A peak memory budget is
met as on the compiled path: the plans of the memory budget and of the fractions of
``PEAK_GRID`` below it, from the largest down, each distinct plan's peak predicted
(:mod:`budget.eager.peak`) until one fits; then cheaper plans under rows of the step's
moments (:mod:`budget.eager.peak_rows`; without offload, which is searched beside). Eager
checkpointing cannot recompute a value twice, so nothing is rescheduled: under every plan's
peak, BudgetTooSmallError names the lowest.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from itertools import chain, islice
from typing import Any

from ..core.sizes import MemoryBudget
from ..estimators import get_estimator
from ..planning.peak_grid import PeakGrid, grid_budgets, with_and_without_offload
from ..planning.planner import make_plan, plan_like
from ..planning.tie_break import lowest_peak, ordered_saved_sets, tie_tolerance
from .peak_rows import RowSearch
from .plan import EagerPlan
from .planner import checkpointable, eager_plan, indices_of, plan_key, plan_trace, problem_for
from .problem import CostCache
from .traced import Trace

TIE_CANDIDATES = 4  # plans of smaller budgets the peak tie-break predicts at most


def plan_predicted(
    trace: Trace,
    budget: MemoryBudget,
    peak_bytes: int | None,
    predict: Callable[[EagerPlan], EagerPlan],
    *,
    solver: str,
    estimator: str,
    time_limit: float,
    excluded: dict[int, str] | None = None,
    offload: bool = False,
    costs: CostCache | None = None,
) -> EagerPlan:
    """The plan ``budget.apply`` makes, with its predicted peak (``predict(plan)`` gives
    the plan with its ``peak_bytes`` and ``timeline``, once per distinct plan): under a
    peak budget (``peak_bytes``) the grid search (:func:`_for_peak`; with offload, also
    without: :func:`~budget.planning.peak_grid.with_and_without_offload`), else the
    memory budget's plan with the peak tie-break (:func:`_tie_broken`); ``costs``: as in
    :func:`plan_trace`."""
    opts = {"solver": solver, "estimator": estimator, "time_limit": time_limit}
    costs = CostCache(get_estimator(estimator)) if costs is None else costs
    opts |= {"costs": costs, "offload": offload}
    opts |= {"excluded": excluded}
    if peak_bytes is None:
        return _tie_broken(trace, budget, predict, opts)
    plain = (
        {**opts, "offload": False, "costs": opts["costs"].without_offload()} if offload else opts
    )

    def search(allow: bool) -> EagerPlan:
        return _for_peak(trace, budget, peak_bytes, predict, opts if allow else plain)

    return with_and_without_offload(search, offload, budget)


def _for_peak(
    trace: Trace,
    budget: MemoryBudget,
    peak_bytes: int,
    predict: Callable[[EagerPlan], EagerPlan],
    opts: dict[str, Any],
) -> EagerPlan:
    """The eager plan with the least recompute whose predicted peak is at most
    ``peak_bytes``, among the plans at ``budget`` and at the fractions of ``PEAK_GRID``
    below it and those the rows find (ties: the lower peak); ``opts``: plan_trace's.

    The grid search of :mod:`budget.planning.peak_grid`, from the largest fraction down: a
    smaller target never costs less for a given set of checkpointed modules (the set
    itself is chosen greedily, so this is the grid's cheapest fit up to that choice). Then
    the rows' stage (:func:`_search_rows`), which can only add cheaper plans that fit."""
    start = time.perf_counter()
    own = plan_trace(trace, budget, **opts)  # the memory budget's plan: its target is the cap

    def make(b: MemoryBudget) -> EagerPlan | None:
        """The plan at ``b``, None when it saves more than the memory budget allows."""
        p = own if b is budget else plan_trace(trace, b, **opts)
        return p if p.saved_bytes <= own.target_bytes else None

    grid = PeakGrid(peak_bytes, key=plan_key, predict=predict)  # type: ignore[arg-type]
    grid.walk(p for b in grid_budgets(budget) if (p := make(b)) is not None)
    if grid.missed is not None:  # between the cheapest fit and the last miss above it
        grid.refine(lambda target: make(MemoryBudget(nbytes=target)), grid.missed.target_bytes)
    if not opts["offload"]:
        _search_rows(trace, grid, budget, own, opts)
    best = grid.best(
        f"eager plans tried within memory budget {budget} (smaller candidate modules, "
        "modules=, may reach lower)"
    )
    return replace(best, timings={**best.timings, "peak search": time.perf_counter() - start})


def _search_rows(
    trace: Trace, grid: PeakGrid, budget: MemoryBudget, first: EagerPlan, opts: dict[str, Any]
) -> None:
    """The rows' stage of the peak search (:mod:`budget.eager.peak_rows`), over the plans
    that checkpoint every candidate module."""
    costs, excluded = opts["costs"], opts["excluded"] or {}
    usable = checkpointable(trace, costs, dict(excluded))
    if not usable:
        return
    problem, nodes = problem_for(trace, usable, costs)
    common = {"budget": budget, "target_bytes": first.target_bytes, "estimator": first.estimator}
    common |= {"min_bytes": first.min_bytes, "max_bytes": first.max_bytes}

    def make(saved: list[int]) -> EagerPlan:
        done = {"status": "feasible", "gap": None, "solver": "cpsat rows", "timings": {}}
        plan = make_plan(problem, saved, **done, **common)
        return eager_plan(plan, trace, problem, nodes, usable, excluded, costs)

    rows = RowSearch(trace, problem, nodes, usable, lambda p: indices_of(problem, p.saved))
    rows.run(grid, make, first.target_bytes, key=plan_key, time_limit=opts["time_limit"])


def _tie_broken(
    trace: Trace,
    budget: MemoryBudget,
    predict: Callable[[EagerPlan], EagerPlan],
    opts: dict[str, Any],
) -> EagerPlan:
    """The memory budget's plan, or, where one peaks lower, another plan whose recompute
    is within the tie tolerance of the cheapest's (:mod:`budget.planning.tie_break`): the
    plans of the fractions of ``PEAK_GRID`` below the budget, walked down while they stay
    within it (a smaller target never costs less), ``TIE_CANDIDATES`` distinct plans at
    most; and the cheapest plans recomputing latest and earliest in the forward, with the
    same modules checkpointed (:func:`_ordered`; not at b=0, whose plan is the fewest bytes
    first). Not at budget 1 (the model as it is). Under the ``flops`` estimator pointwise
    ops cost nothing, so plans that recompute them instead of saving them tie with plans
    that save them, and peak lower."""
    made = plan_trace(trace, budget, **opts)
    cheapest = predict(made)
    if budget.fraction == 1.0:
        return cheapest  # the model as it is
    start = time.perf_counter()
    costs = opts["costs"]
    tolerance = tie_tolerance(problem_for(trace, checkpointable(trace, costs, {}), costs)[0])
    seen = {plan_key(made)}  # kept, it is the plan of the budget asked for

    def fresh(plans: Iterable[tuple[str, EagerPlan]]) -> Iterator[tuple[str, EagerPlan]]:
        for named, p in plans:
            if plan_key(p) not in seen:
                seen.add(plan_key(p))
                yield named, p

    grid = islice(fresh(_grid_plans(trace, budget, made, tolerance, opts)), TIE_CANDIDATES)
    ordered = _ordered(trace, made, tolerance, costs) if budget.fraction != 0.0 else []
    others = [(named, predict(p)) for named, p in chain(grid, fresh(ordered))]
    chosen = lowest_peak(cheapest, others, tolerance)
    took = time.perf_counter() - start
    return replace(chosen, timings={**chosen.timings, "tie-break": took})  # type: ignore[return-value]


def _grid_plans(
    trace: Trace, budget: MemoryBudget, made: EagerPlan, tolerance: float, opts: dict[str, Any]
) -> Iterator[tuple[str, EagerPlan]]:
    """The plans of the grid's fractions below ``budget`` within ``made``'s target, from
    the largest down, while their recompute stays within the tolerance (a smaller target
    never costs less), with ``made``'s budget figures."""
    for b in grid_budgets(budget)[1:]:
        p = plan_trace(trace, b, **opts)
        if p.saved_bytes > made.target_bytes:
            continue  # a size budget: the fractions above it
        if p.total_recompute_cost > made.total_recompute_cost + tolerance:
            return
        yield (
            f"the plan at budget {b}",
            replace(p, budget=made.budget, target_bytes=made.target_bytes),
        )


def _ordered(
    trace: Trace, made: EagerPlan, tolerance: float, costs: CostCache
) -> list[tuple[str, EagerPlan]]:
    """The cheapest plans recomputing latest and earliest in the forward
    (:func:`~budget.planning.tie_break.ordered_saved_sets`), with ``made``'s modules
    checkpointed and its budget."""
    checkpointed = [r for r, c in enumerate(made.regions) if c.checkpoint]
    problem, nodes = problem_for(trace, checkpointed, costs)
    reasons = {r: c.reason for r, c in enumerate(made.regions) if not c.checkpoint}
    return [
        (
            named,
            eager_plan(
                plan_like(problem, saved, made), trace, problem, nodes, checkpointed, reasons, costs
            ),
        )
        for named, saved in ordered_saved_sets(problem, made, tolerance)
    ]
