"""The exact peak search: the plan with the least recompute whose predicted peak fits.

A peak budget asks for the cheapest plan whose predicted peak (:mod:`budget.compile.peak`)
is at most a limit. The peak of a plan is not linear in its decisions, so no single integer
programme gives it. The search covers the plans that recompute each value once (the caller
partitions them without rescheduling): it enumerates them cheapest first with CP-SAT
(:mod:`budget.solvers.mip.peak`), each under the rows of a bound that no such plan's
predicted peak is below (:mod:`budget.core.liveness`), and has each plan it gets
partitioned and predicted:

- a plan that fits becomes the best; from then on only cheaper plans are asked for;
- a plan that does not first refines the bound at its own need times
  (:meth:`~budget.core.liveness.LivenessBound.refine`; the model is then rebuilt), and is
  excluded, with every plan that recomputes the same values and saves more (they hold
  more for the same work, so they cannot peak lower);
- when CP-SAT proves that no plan is left, the best is the optimum among them
  (``proven``): every cheaper plan was either cut by the bound, or partitioned and found
  over the limit.

It stops earlier at the time limit or after ``max_plans`` partitions, keeping the best
found (not proven then). It starts from the best plan another search found, when given
(the grid of :func:`budget.compile.peak_plan.plan_for_peak`), so it can only improve on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core.liveness import LivenessBound
from ..core.plan import Plan
from ..core.problem import Problem
from ..solvers.mip.peak import PeakModel

MAX_PLANS = 8  # partitions the search may make (each 0.1-0.4 s on the bench graphs)


@dataclass
class PeakSearch:
    """What the search did: the best plan that fits (None if none did), whether it is
    proven the cheapest, the plans it partitioned, and why it stopped."""

    best: Plan | None
    proven: bool
    tried: list[Plan] = field(default_factory=list)
    stopped: str = ""
    floor_bytes: int | None = None  # no plan's predicted peak is below this


def search_peak(
    problem: Problem,
    bound: LivenessBound,
    limit_bytes: int,
    cap_bytes: int | None,
    make: Callable[[list[int]], Plan],
    fits: Callable[[Plan], bool],
    *,
    incumbent: Plan | None = None,
    time_limit: float = 60.0,
    max_plans: int = MAX_PLANS,
) -> PeakSearch:
    """Search plans of ``problem`` whose predicted peak is at most ``limit_bytes`` and
    whose saved bytes (the solvers' share, without fixed bytes) are at most ``cap_bytes``.

    ``make(saved)``: the plan saving ``saved``. ``fits(plan)``: partitions and predicts
    ``plan`` and says whether it fits. ``incumbent``: a plan known to fit.
    """
    start = time.perf_counter()
    result = PeakSearch(best=incumbent, proven=False, floor_bytes=bound.floor())
    if result.floor_bytes > limit_bytes:  # below what any plan can reach
        result.proven, result.stopped = True, "below the bound of every plan"
        return result
    excluded: list[tuple[list[int], list[int]]] = []

    def build() -> PeakModel:
        model = PeakModel(problem, bound, limit_bytes, cap_bytes)
        for saved, recomputed in excluded:
            model.exclude(saved, recomputed)
        if result.best is not None:
            model.cheaper_than(result.best.total_recompute_cost)
        return model

    model = build()
    while True:
        left = time_limit - (time.perf_counter() - start)
        if left <= 0:
            result.stopped = "time limit"
            break
        if len(result.tried) >= max_plans:
            result.stopped = f"{max_plans} plans partitioned"
            break
        found = model.next(left)
        if found.exhausted:
            result.proven, result.stopped = True, "no cheaper plan left"
            break
        if found.saved is None:
            result.stopped = "time limit"
            break
        saved = problem.prune_unused(found.saved)
        recomputed = problem.recompute_closure(saved)
        plan = make(saved)
        result.tried.append(plan)
        excluded.append((saved, recomputed))
        if fits(plan):
            if result.best is None or plan.total_recompute_cost < result.best.total_recompute_cost:
                result.best = plan
            model.exclude(saved, recomputed)
            model.cheaper_than(result.best.total_recompute_cost)
        elif bound.refine(saved, recomputed):  # the rows missed its peak: learn why
            model = build()
        else:
            model.exclude(saved, recomputed)
    return result
