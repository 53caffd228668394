"""The compiled path's peak tie-break: the budget's cheapest plan against torch's own
saved set at the same fraction and against the cheapest plans recomputing latest and
earliest in the forward (:func:`budget.planning.tie_break.ordered_saved_sets`), each
partitioned and predicted, the lowest peak kept (:func:`budget.planning.tie_break.lowest_peak`).

torch's min-cut at a fraction below 1 often lands on a plan as cheap as the exact optimum
that recomputes other values; where its backward holds less at once, its peak is lower,
and budget's plan would be dominated by torch's (as cheap, peaking higher). Taking it as
a candidate makes that impossible as far as the graphs' prediction tells. A set a few
bytes over budget's target (the two fractions span ranges whose ends differ) is fitted
to it by the greedy solver's descent (storages dropped by bytes freed per recompute
added); a candidate that fails budget's checks is left out.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from ..core.plan import Plan
from ..core.problem import Problem
from ..planning.planner import plan_like
from ..planning.tie_break import lowest_peak, ordered_saved_sets, tie_tolerance, within_tie
from ..solvers.heuristics.greedy_moves import State, descend
from .torch_plan import fraction_of, torch_saved

if TYPE_CHECKING:
    from .split import Partitions


def tie_break(partitions: Partitions, problem: Problem, plan: Plan) -> Plan:
    """``plan`` (the memory budget's cheapest), or the plan of the others (the cheapest
    recomputing latest and earliest, torch's at the same fraction) within the tolerance
    that peaks lowest; all predicted. Not run at b=1 (torch's own plan already) or for a
    plan that recomputes nothing (nothing to place)."""
    fraction = fraction_of(plan)
    if fraction is None or fraction >= 1.0 or not plan.recomputed:
        return plan
    start = time.perf_counter()
    cheapest = partitions.predicted(plan)
    tolerance = tie_tolerance(problem)
    ordered = ordered_saved_sets(problem, plan, tolerance) if fraction > 0 else []
    candidates = [(named, plan_like(problem, saved, plan)) for named, saved in ordered]
    found = _torch_plan(partitions, problem, plan, fraction)
    if found is not None:
        theirs, fitted = found
        named = f"torch's saved set at budget {fraction:.3g}"
        candidates.append((named + (", fitted to the target" if fitted else ""), theirs))
    seen = {frozenset(plan.saved)}
    others = []
    for named, other in candidates:
        # the others within the tolerance, each saved set once: partitioned to predict
        if frozenset(other.saved) not in seen and within_tie(plan, other, tolerance):
            seen.add(frozenset(other.saved))
            others.append((named, partitions.predicted(other)))
    chosen = lowest_peak(cheapest, others, tolerance)
    took = time.perf_counter() - start
    return replace(chosen, timings={**chosen.timings, "tie-break": took})


def _torch_plan(
    partitions: Partitions, problem: Problem, plan: Plan, fraction: float
) -> tuple[Plan, bool] | None:
    """torch's saved set at ``fraction`` as a plan of ``problem`` with ``plan``'s budget
    figures, and whether it was fitted to ``plan``'s target: torch's fraction spans its
    own range, whose ends are a few bytes from budget's, so its set can save a little over
    the target; then it is fitted to the target as the greedy solver would (:func:`_within`).
    None where no valid plan is left."""
    torchs = torch_saved(partitions, problem, fraction)
    saved = _within(problem, torchs, plan.target_bytes)
    if saved is None or problem.check(saved):
        return None
    return plan_like(problem, saved, plan), saved != torchs


def _within(problem: Problem, saved: list[int], target: int) -> list[int] | None:
    """``saved`` fitted to ``target`` by the greedy solver's descent from it
    (:mod:`budget.solvers.heuristics.greedy`: saved storages dropped by bytes freed per
    recompute added, until it fits); None where the descent cannot get there."""
    limit = target - problem.fixed_bytes  # saved by every plan: off the descent's target
    state = State(problem, saved)
    if state.nbytes > limit:
        descend(state, limit, "cost")
    fitted = problem.prune_unused(state.saved())
    return fitted if problem.saved_bytes(fitted) <= limit else None
