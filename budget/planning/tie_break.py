"""Peak as the tie-breaker: among plans of (nearly) the least recompute, the lowest peak.

A memory budget bounds what a plan saves, not what is alive together: plans of equal
recompute can peak far apart (what the backward recomputes, and next to what, decides
it). The front end gives the cheapest plan of the budget and other plans within the same
budget, each with its predicted peak: both front ends weigh the cheapest plans recomputing
latest and earliest in the forward (:func:`ordered_saved_sets`); the compiled path adds
torch's own saved set at the same fraction, the eager path the plans of smaller fractions.
:func:`lowest_peak` keeps the one that peaks lowest among those whose recompute is at most
the cheapest's plus ``TIE_TOLERANCE`` of the cost of recomputing the whole forward (ties:
less recompute, then fewer saved bytes). The forward's cost is about half the backward's,
so a lower peak never costs more than about 0.25% of the backward's work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from ..core.plan import TIE_KEPT_NOTE, Plan
from ..core.problem import Problem
from ..core.sizes import format_bytes
from ..errors import InfeasibleError, SolverTimeout
from ..solvers import available_solvers, get_solver

TIE_TOLERANCE = 0.005  # of the cost of recomputing every forward value once
EXACT_SECONDS = 10.0  # an exact solver's limit for an ordered candidate the min-cut misses
_KEPT = "the cheapest plan"  # the budget's cheapest plan, as the notes name it


def tie_tolerance(problem: Problem) -> float:
    """The recompute a plan may add to the cheapest's for a lower peak, in cost units."""
    return TIE_TOLERANCE * float(problem.cost[~problem.is_input].sum())


def within_tie(cheapest: Plan, other: Plan, tolerance: float) -> bool:
    """Whether ``other`` may replace ``cheapest`` for a lower peak: it saves within
    ``cheapest``'s target and recomputes at most ``tolerance`` more. Needs no peak, so a
    front end can leave a plan that fails it unpredicted."""
    return (
        other.saved_bytes <= cheapest.target_bytes
        and other.total_recompute_cost <= cheapest.total_recompute_cost + tolerance
    )


def ordered_saved_sets(
    problem: Problem, plan: Plan, tolerance: float
) -> list[tuple[str, list[int]]]:
    """The saved sets (indices of ``problem``) of plans as cheap as ``plan`` but for the
    tolerance, recomputing as late and as early in the forward as they can, each named: the
    cheapest plans under ``plan``'s target on the costs raised by each node's distance from
    the forward's end (or its start), by at most ``tolerance`` in all (:func:`_cheapest`).
    A joint graph of identical layers has many equally cheap plans, and which layers
    recompute decides how much the backward holds at once; the solver's own pick among them
    is arbitrary. None for a plan that offloads (the min-cut plans saves and recomputations
    only) or recomputes nothing; the caller asks none at b=0, whose plan is the fewest
    bytes first, then the cheapest. A set the problem refuses (:meth:`Problem.check`) or
    that costs more than ``plan`` and the tolerance is left out."""
    if plan.offloaded or not plan.recomputed:
        return []
    n = problem.n
    step = tolerance / max(n, 1) ** 2  # n nodes, each raised by at most n steps
    position = np.arange(n, dtype=np.float64)
    found = []
    for named, raise_by in (("latest", n - position), ("earliest", position)):
        raised = problem.cost + step * raise_by * (problem.cost > 0)
        nudged = replace(problem, cost=raised, offload=None)  # saves and recomputations
        limit = plan.target_bytes - problem.fixed_bytes
        saved = _cheapest(problem, nudged, limit, plan.recompute_cost + tolerance, plan.solver)
        if saved is not None:
            found.append((f"the cheapest plan recomputing {named}", saved))
    return found


def _cheapest(
    problem: Problem, nudged: Problem, limit: int, within: float, solver: str
) -> list[int] | None:
    """The saved set of ``nudged``'s cheapest plan saving at most ``limit`` bytes: the
    min-cut's (polynomial), or where that costs more than ``within`` on ``problem``'s own
    costs (the min-cut is exact on its frontier's hull only, and a target inside a hull
    edge can leave it far from the optimum), ``solver``'s (the plan's own) in at most
    ``EXACT_SECONDS`` where it is an exact one; a heuristic's plan would be no nearer the
    optimum. None where no valid plan within ``within`` is found."""
    names = ["mincut"]
    if solver in available_solvers() and get_solver(solver).exact:
        names.append(solver)
    for name in names:
        options = {} if name == "mincut" else {"time_limit": EXACT_SECONDS}
        try:
            sol = get_solver(name).solve(nudged, limit, minimize="cost", **options)
        except (InfeasibleError, SolverTimeout):
            continue
        if not problem.check(sol.saved) and problem.recompute_cost(sol.saved) <= within:
            return list(sol.saved)
    return None


def lowest_peak(cheapest: Plan, others: Sequence[tuple[str, Plan]], tolerance: float) -> Plan:
    """``cheapest`` (the budget's least-recompute plan) or the plan of ``others`` (each
    named, for the plan's ``tie_break`` note) that peaks lowest among those within
    ``cheapest``'s target and ``tolerance`` of its recompute. Every plan must carry its
    predicted peak (``peak_bytes``)."""
    base = cheapest.total_recompute_cost
    within = [
        (name, p)
        for name, p in others
        if within_tie(cheapest, p, tolerance) and p.peak_bytes is not None
    ]
    if not within or cheapest.peak_bytes is None:
        return cheapest
    pool = [(_KEPT, cheapest), *within]
    name, best = min(
        pool, key=lambda e: (e[1].peak_bytes, e[1].total_recompute_cost, e[1].saved_bytes)
    )
    share = f"{TIE_TOLERANCE:.1%} of the forward's recompute"
    if best is cheapest:
        rest = ", ".join(f"{n}: {format_bytes(p.peak_bytes or 0)}" for n, p in within)
        note = f"{TIE_KEPT_NOTE} of {len(pool)} within {share} ({rest})"
        return replace(cheapest, tie_break=note)
    note = (
        f"{name}: the lowest predicted peak of {len(pool)} plans within {share} "
        f"({format_bytes(best.peak_bytes or 0)}; the cheapest plan: "
        f"{format_bytes(cheapest.peak_bytes)})"
    )
    extra = best.total_recompute_cost - base
    status, gap = cheapest.status, cheapest.gap
    if extra > 1e-12 * max(base, 1e-300):  # more recompute than the proven least
        status = "feasible"
        gap = extra / best.total_recompute_cost if cheapest.status == "optimal" else None
    return replace(best, tie_break=note, status=status, gap=gap, timings=cheapest.timings)
