"""The plan for a peak budget: the search over plans the partitioner predicts.

:func:`plan_for_peak` takes the optimal plans of the memory budget and of the fractions of
``PEAK_GRID`` below it, partitions and predicts them cheapest first (each distinct saved
and offloaded set once, rescheduled where that lowers the peak), bisects the saved-memory
target between the cheapest fit and the cheaper miss above it (the grid search both front
ends share: :mod:`budget.planning.peak_grid`), and with ``peak_search="exact"`` searches
on with CP-SAT over the liveness bound (:mod:`budget.compile.peak_search`). The
partitioning itself is :class:`budget.compile.split.Partitions`; under Inductor the plan
kept is then checked on the compiled code (:mod:`budget.compile.peak_check`). With
offload it searches twice, with and without, and keeps the cheaper
(:func:`budget.planning.peak_grid.with_and_without_offload`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from ..core.liveness import LivenessBound
from ..core.plan import Plan
from ..core.problem import Problem
from ..core.settings import PlanSettings
from ..core.sizes import MemoryBudget
from ..errors import BudgetTooSmallError
from ..planning.peak_grid import (
    PeakGrid,
    grid_budgets,
    planned_cost,
    with_and_without_offload,
)
from ..planning.planner import Ends, plan_like, solve_ends, solve_problem, solve_sweep
from ..solvers import get_solver
from .liveness import liveness_bound
from .peak_search import PeakSearch, search_peak

if TYPE_CHECKING:
    from .split import Partitions


def plan_for_peak(
    partitions: Partitions,
    problem: Problem,
    settings: PlanSettings,
    timings: dict[str, float],
) -> Plan:
    """:func:`_grid_plan` of ``problem``; with offload, the cheaper of that and the plan
    without offload (:func:`budget.planning.peak_grid.with_and_without_offload`)."""
    return with_and_without_offload(
        lambda allow: _grid_plan(
            partitions, problem if allow else replace(problem, offload=None), settings, timings
        ),
        problem.offload is not None,
        settings.budget,
    )


def _key(plan: Plan) -> tuple:
    """What makes two plans of a graph the same: what they save and what they offload."""
    return tuple(plan.saved), tuple(plan.offloaded)


def _grid_plan(
    partitions: Partitions,
    problem: Problem,
    settings: PlanSettings,
    timings: dict[str, float],
) -> Plan:
    """The plan with the least recompute whose predicted peak fits the graphs' target
    (``settings.graphs_peak_bytes``),
    among the optimal plans at the memory budget and at the fractions of ``PEAK_GRID``
    below it (ties: the lower peak). Not an exact optimisation over liveness: the best
    plan of a saved-memory target, for a grid of targets. Plans are partitioned and
    predicted cheapest first, each distinct saved and offloaded set once, until one fits;
    then the target between that fit and the cheaper miss above it is bisected
    (:class:`budget.planning.peak_grid.PeakGrid`)."""
    peak = settings.graphs_peak_bytes
    assert peak is not None
    start = time.perf_counter()
    budgets = grid_budgets(settings.budget, largest_first=False)
    cap = settings.saved_cap_bytes
    if cap is not None:  # the plan of the cap itself is a candidate, where one exists
        budgets.append(MemoryBudget(nbytes=cap))
    plans = solve_sweep(
        problem,
        budgets,
        solver=settings.solver,
        estimator=settings.estimator,
        time_limit=settings.time_limit,
        timings=timings,
    )
    limit = plans[0].target_bytes  # the memory budget's own target, and the step's cap
    if cap is not None:
        limit = min(limit, cap)
    grid = PeakGrid(peak, key=_key, predict=partitions.predicted)
    grid.walk(
        sorted(
            (p for p in plans if p.saved_bytes <= limit),
            key=lambda p: (planned_cost(p), p.saved_bytes),
        )
    )
    grid.refine(_planner_at(problem, settings, timings))
    tried, fits = grid.tried, grid.fits
    if not fits:  # recompute values again, down to the target itself (cheapest first)
        for p in sorted(tried.values(), key=lambda p: (planned_cost(p), p.saved_bytes)):
            if grid.costs_more(p):
                break
            again = partitions.predicted(p, limit=peak)
            tried[_key(p)] = again
            if (again.peak_bytes or 0) <= peak:
                fits.append(again)
        grid.complete(lambda p: partitions.predicted(p, limit=peak))
    proven, floor, exact_s = False, None, 0.0
    if settings.peak_search == "exact":
        t0 = time.perf_counter()
        exact = _search_exact(partitions, problem, settings, plans[0], limit, fits, timings)
        exact_s = time.perf_counter() - t0
        for p in exact.tried:
            tried.setdefault(_key(p), p)
        if exact.best is not None and exact.best not in fits:
            fits.append(exact.best)
        proven, floor = exact.proven, exact.floor_bytes
    elif not fits:  # what no plan can go below, for the error
        floor = _bound(partitions).floor()
    best = grid.best(
        f"plans tried for this graph within memory budget {settings.budget}, recomputing "
        "values again where that helps",
        floor_bytes=floor,
    )
    took = {**timings, "peak search": time.perf_counter() - start}
    if settings.peak_search != "exact":
        return replace(best, timings=took)
    # the peak search's own status, and its share of the time
    status = "optimal" if proven else "feasible"
    return replace(best, status=status, timings={**took, "exact search": exact_s})


def _bound(partitions: Partitions) -> LivenessBound:
    return liveness_bound(
        partitions.joint_module.graph,
        partitions.node_info,
        partitions.nodes,
        partitions.num_fwd_outputs,
        partitions.outputs_held,
    )


ONCE = 1 << 62  # a limit no prediction is over: the backward is not rescheduled


def _search_exact(
    partitions: Partitions,
    problem: Problem,
    settings: PlanSettings,
    first: Plan,
    limit: int,
    fits: list[Plan],
    timings: dict[str, float],
) -> PeakSearch:
    """:func:`budget.compile.peak_search.search_peak` from the grid's cheapest fit, over
    plans saving at most ``limit`` (the memory budget's target, or the step's cap)."""
    peak = settings.graphs_peak_bytes
    assert peak is not None
    bound = _bound(partitions)

    def make(saved: list[int]) -> Plan:  # partitioned recomputing each value once
        plan = plan_like(problem, saved, first, solver="cpsat", timings=dict(timings))
        return partitions.predicted(plan, limit=ONCE)  # the bound's plans

    def fit(plan: Plan) -> bool:
        return (plan.peak_bytes or 0) <= peak

    incumbent = min(fits, key=lambda p: p.total_recompute_cost, default=None)
    return search_peak(
        problem,
        bound,
        peak,
        limit - problem.fixed_bytes,
        make,
        fit,
        incumbent=incumbent,
        time_limit=settings.time_limit,
    )


def _planner_at(
    problem: Problem, settings: PlanSettings, timings: dict[str, float]
) -> Callable[[int], Plan | None]:
    """The plan of a saved-memory target in bytes (None below what the solver reaches),
    the graph's ends solved once, on first use: the peak grid's bisection."""
    ends: list[Ends] = []

    def plan_at(target: int) -> Plan | None:
        if not ends:
            ends.append(solve_ends(problem, get_solver(settings.solver), settings.time_limit))
        try:
            return solve_problem(
                problem,
                MemoryBudget(nbytes=target),
                solver=settings.solver,
                estimator=settings.estimator,
                time_limit=settings.time_limit,
                timings=timings,
                ends=ends[0],
            )
        except BudgetTooSmallError:
            return None

    return plan_at
