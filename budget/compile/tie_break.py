"""The compiled path's peak tie-break: the budget's cheapest plan against torch's own
saved set at the same fraction, each partitioned and predicted, the lower peak kept
(:func:`budget.planning.tie_break.lowest_peak`).

torch's min-cut at a fraction below 1 often lands on a plan as cheap as the exact optimum
that recomputes other values; where its backward holds less at once, its peak is lower,
and budget's plan would be dominated by torch's (as cheap, peaking higher). Taking it as
a candidate makes that impossible as far as the graphs' prediction tells. A set a few
bytes over budget's target (the two fractions span ranges whose ends differ) is fitted
to it by recomputing its values cheapest per byte instead; a candidate that fails
budget's checks is left out.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from ..core.plan import Plan
from ..core.problem import Problem
from ..core.sizes import parse_budget
from ..planning.planner import plan_like
from ..planning.tie_break import lowest_peak, tie_tolerance
from ..runtime import _torch_private as T

if TYPE_CHECKING:
    from .split import Partitions


def tie_break(partitions: Partitions, problem: Problem, plan: Plan) -> Plan:
    """``plan`` (the memory budget's cheapest), or torch's plan at the same fraction where
    that is within the tolerance and peaks lower; both predicted. Not run at b=1 (torch's
    own plan already) or for a plan that recomputes nothing (nothing to place)."""
    fraction = _fraction(plan)
    if fraction is None or fraction >= 1.0 or not plan.recomputed:
        return plan
    start = time.perf_counter()
    cheapest = partitions.predicted(plan)
    found = _torch_plan(partitions, problem, plan, fraction)
    chosen = cheapest
    if found is not None and set(found[0].saved) != set(plan.saved):
        named = f"torch's saved set at budget {fraction:.3g}"
        named += ", fitted to the target" if found[1] else ""
        others = [(named, partitions.predicted(found[0]))]
        chosen = lowest_peak(cheapest, others, tie_tolerance(problem))
    took = time.perf_counter() - start
    return replace(chosen, timings={**chosen.timings, "tie-break": took})


def _fraction(plan: Plan) -> float | None:
    """The plan's budget as a fraction of its range (a size budget: where it falls)."""
    budget = parse_budget(plan.budget)
    if budget.fraction is not None:
        return budget.fraction
    span = plan.max_bytes - plan.min_bytes
    return None if span <= 0 else (plan.target_bytes - plan.min_bytes) / span


def _torch_plan(
    partitions: Partitions, problem: Problem, plan: Plan, fraction: float
) -> tuple[Plan, bool] | None:
    """torch's saved set at ``fraction`` as a plan of ``problem`` with ``plan``'s budget
    figures, and whether it was fitted to ``plan``'s target: torch's fraction spans its
    own range, whose ends are a few bytes from budget's, so its set can save a little over
    the target; then the values cheapest to recompute per byte are recomputed instead
    until it fits (:func:`_within`). None where no valid plan is left."""
    chosen = T.torch_saved_set(
        partitions.joint_module.graph, partitions.node_info, fraction, partitions.min_cuts
    )
    index = {n: i for i, n in enumerate(partitions.nodes)}
    torchs = [index[n] for n in chosen if n in index and not problem.is_input[index[n]]]
    torchs = problem.prune_unused(torchs)
    saved = _within(problem, torchs, plan.target_bytes)
    if saved is None or problem.check(saved):
        return None
    return plan_like(problem, saved, plan), saved != torchs


def _within(problem: Problem, saved: list[int], target: int) -> list[int] | None:
    """``saved`` less the values cheapest to recompute per byte of theirs, until it saves
    at most ``target``; None where what can be recomputed does not free enough."""
    kept = list(saved)

    def over() -> bool:
        return problem.saved_bytes(kept) + problem.fixed_bytes > target

    def per_byte(v: int) -> float:
        return float(problem.cost[v]) / int(problem.storage_bytes[problem.storage[v]])

    movable = [
        v
        for v in kept
        if problem.can_recompute[v]
        and problem.storage[v] >= 0
        and problem.storage_bytes[problem.storage[v]] > 0
    ]
    for v in sorted(movable, key=per_byte):
        if not over():
            break
        kept.remove(v)
    return None if over() else problem.prune_unused(kept)
