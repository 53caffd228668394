"""torch's own plan beside budget's: what ``activation_memory_budget`` makes torch's
partitioner choose for the same graph, priced and predicted as budget's plans are.

A preview asked for it (``vs_torch``) gets, on each plan of a memory budget, torch's saved
set at the same fraction (torch's ``choose_saved_values_set``, through
:func:`budget.runtime._torch_private.torch_saved_set`: its knapsack and min-cuts as
torch runs them), with the bytes it saves, the recompute it costs on budget's estimator,
and the peak its graphs are predicted to reach, partitioned as torch partitions (no value
recomputed a second time), and what budget's plan saving as much costs (the preview's
solver's, its optimum with an exact one): the comparison at equal memory, where the same
fraction falls a little apart in the two ranges. A set budget refuses (a random op
recomputed, a value that cannot be recomputed) is priced but not partitioned, the reasons
named. Training never computes it: a comparison, not a plan.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..core.plan import Plan, TorchPlan
from ..core.problem import Problem
from ..core.sizes import MemoryBudget, parse_budget
from ..errors import InfeasibleError, SolverTimeout
from ..planning.planner import plan_like, solve_ends, solve_problem
from ..runtime import _torch_private as T
from ..solvers import get_solver
from .peak_plan import ONCE

if TYPE_CHECKING:
    from .split import Partitions


def torch_plan(partitions: Partitions, problem: Problem, plan: Plan) -> TorchPlan | None:
    """torch's plan of ``plan``'s graph at ``plan``'s fraction (a size budget: where it
    falls in the graph's range); None where the plan has no fraction (an empty range)."""
    fraction = fraction_of(plan)
    if fraction is None:
        return None
    saved = torch_saved(partitions, problem, fraction)
    priced = TorchPlan.priced(problem, saved, fraction=fraction, peak_bytes=None)
    refused = problem.check(saved)
    if refused:  # priced, not partitioned: a plan of it is invalid
        return replace(priced, refused=refused)
    # partitioned as torch partitions it (nothing recomputed twice); torch's range ends a
    # few bytes from budget's, so its set may save a little over budget's target
    like = replace(plan, target_bytes=max(plan.target_bytes, priced.saved_bytes))
    theirs = partitions.predicted(plan_like(problem, saved, like), ONCE)
    return TorchPlan(
        fraction=fraction,
        saved_bytes=theirs.saved_bytes,  # the copies and states partitioning found
        recompute_cost=theirs.recompute_cost,
        recompute_flops=theirs.recompute_flops,
        peak_bytes=theirs.peak_bytes,
        budget_recompute_cost=budget_at(partitions, problem, priced.saved_bytes),
    )


def budget_at(partitions: Partitions, problem: Problem, nbytes: int) -> float | None:
    """What budget's plan of ``problem`` saving at most ``nbytes`` costs (recompute, and
    offloads' exposed copies where offload is planned), on the preview's solver: its
    optimum with an exact one. None where that solver finds none (a heuristic's range can
    end above torch's bytes) or runs out of time: a comparison, never a failed preview.
    The range's ends are solved once per graph and solver, beside torch's sets."""
    settings = partitions.settings
    key = ("budget's ends", settings.solver)
    try:
        if key not in partitions.min_cuts:
            backend = get_solver(settings.solver)
            partitions.min_cuts[key] = solve_ends(problem, backend, settings.time_limit)
        ours = solve_problem(
            problem,
            MemoryBudget(nbytes=nbytes),
            solver=settings.solver,
            estimator=settings.estimator,
            time_limit=settings.time_limit,
            ends=partitions.min_cuts[key],
        )
    except (InfeasibleError, SolverTimeout):
        return None
    return ours.total_recompute_cost


def torch_saved(partitions: Partitions, problem: Problem, fraction: float) -> list[int]:
    """torch's saved set at ``fraction`` as indices of ``problem`` (inputs aside, values no
    one reads pruned); torch's choice is made once per fraction and graph (the tie-break and
    the ``vs_torch`` comparison both ask), kept beside its min-cuts."""
    key = ("torch's saved set", fraction)
    if key not in partitions.min_cuts:
        partitions.min_cuts[key] = T.torch_saved_set(
            partitions.joint_module.graph, partitions.node_info, fraction, partitions.min_cuts
        )
    chosen = partitions.min_cuts[key]
    index = {n: i for i, n in enumerate(partitions.nodes)}
    return problem.prune_unused(
        index[n] for n in chosen if n in index and not problem.is_input[index[n]]
    )


def fraction_of(plan: Plan) -> float | None:
    """The plan's budget as a fraction of its range (a size budget: where it falls)."""
    budget = parse_budget(plan.budget)
    if budget.fraction is not None:
        return budget.fraction
    span = plan.max_bytes - plan.min_bytes
    return None if span <= 0 else (plan.target_bytes - plan.min_bytes) / span
