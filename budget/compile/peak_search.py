"""The exact peak search: the plan with the least recompute whose predicted peak fits.

A peak budget asks for the cheapest plan whose predicted peak (:mod:`budget.compile.peak`)
is at most a limit. The peak of a plan is not linear in its decisions, so no single integer
programme gives it. The search covers the plans that recompute each value once (the caller
partitions them without rescheduling): it enumerates them cheapest first
(:func:`~budget.planning.cheapest_first.cheapest_first`) with CP-SAT
(:mod:`budget.solvers.mip.peak`), each under the rows of a bound that no such plan's
predicted peak is below (:mod:`budget.core.liveness`), and has each plan partitioned and
predicted. A plan that does not fit refines the bound at its own need times
(:meth:`~budget.core.liveness.LivenessBound.refine`; the model is then rebuilt). When
CP-SAT proves that no plan is left, the best is the optimum among them (``proven``):
every cheaper plan was either cut by the bound, or partitioned and found over the limit.

It starts from the best plan another search found, when given (the grid of
:func:`budget.compile.peak_plan.plan_for_peak`), so it can only improve on it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..core.liveness import LivenessBound
from ..core.plan import Plan
from ..core.problem import Problem
from ..planning.cheapest_first import Enumeration, cheapest_first
from ..solvers.mip.peak import PeakModel

MAX_PLANS = 8  # partitions the search may make (each 0.1-0.4 s on the bench graphs)


@dataclass
class PeakSearch(Enumeration[Plan]):
    """What the search did (:class:`~budget.planning.cheapest_first.Enumeration`), and the
    bound's floor: no plan's predicted peak is below it."""

    floor_bytes: int | None = None


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
    floor = bound.floor()
    if floor > limit_bytes:  # below what any plan can reach
        return PeakSearch(
            incumbent, True, stopped="below the bound of every plan", floor_bytes=floor
        )
    found = cheapest_first(
        problem,
        lambda: PeakModel(problem, bound, limit_bytes, cap_bytes),
        make,
        fits,
        lambda _plan, saved, recomputed: bound.refine(saved, recomputed),  # the rows missed
        best=incumbent,
        time_limit=time_limit,
        max_plans=max_plans,
    )
    return PeakSearch(found.best, found.proven, found.tried, found.stopped, floor_bytes=floor)
