"""The compiled path's peak tie-break: the budget's cheapest plan against torch's own
saved set at the same fraction, each partitioned and predicted, the lower peak kept
(:func:`budget.planning.tie_break.lowest_peak`).

torch's min-cut at a fraction below 1 often lands on a plan as cheap as the exact optimum
that recomputes other values; where its backward holds less at once, its peak is lower,
and budget's plan would be dominated by torch's (as cheap, peaking higher). Taking it as
a candidate makes that impossible as far as the graphs' prediction tells; a candidate
outside budget's own target or checks is left out.
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
    theirs = _torch_plan(partitions, problem, plan, fraction)
    chosen = cheapest
    if theirs is not None and set(theirs.saved) != set(plan.saved):
        named = f"torch's saved set at budget {fraction:.3g}"
        others = [(named, partitions.predicted(theirs))]
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
) -> Plan | None:
    """torch's saved set at ``fraction`` as a plan of ``problem`` with ``plan``'s budget
    figures; None where it is not a valid plan within ``plan``'s target."""
    chosen = T.torch_saved_set(
        partitions.joint_module.graph, partitions.node_info, fraction, partitions.min_cuts
    )
    index = {n: i for i, n in enumerate(partitions.nodes)}
    saved = [index[n] for n in chosen if n in index and not problem.is_input[index[n]]]
    saved = problem.prune_unused(saved)
    if problem.check(saved) or problem.saved_bytes(saved) + problem.fixed_bytes > plan.target_bytes:
        return None
    return plan_like(problem, saved, plan)
