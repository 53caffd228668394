"""torch's checkpointing beside an eager plan: every candidate module checkpointed whole.

What eager users compare ``budget.apply`` with is torch's activation checkpointing of every
block (``apply_activation_checkpointing`` with ``checkpoint_wrapper``; Hugging Face's
``gradient_checkpointing_enable``): each block keeps its inputs and recomputes all of its
forward in the backward. A preview asked for it (``vs_torch``) gets that plan of the same
trace, over the modules ``budget.apply`` may checkpoint: saved bytes, recompute (budget's
estimator), FLOPs, and the peak of a fake run with it installed, as any eager plan's
(:meth:`budget.eager.apply._Traced.predict`), and what budget.apply's plan keeping as much
recomputes (the comparison at equal memory). Values a whole-module recomputation cannot
make again (an in-place write the region's own values feed, a module's own cache) are kept
as ``budget.apply`` keeps them, where torch's checkpointing would run them again: their
bytes are said (``TorchPlan.kept_inside_bytes``). A set budget refuses is priced and named,
not predicted, and a module some call of which cannot be checkpointed is left out whole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..core.plan import TorchPlan
from ..core.sizes import MemoryBudget
from ..errors import InfeasibleError, PreviewError, SolverTimeout
from ..planning.planner import make_plan
from .plan import EagerPlan
from .planner import checkpointable, eager_plan, problem_for
from .problem import TORCH_KEEPS_TOO, CostCache
from .traced import Trace


def full_checkpointing(
    trace: Trace,
    costs: CostCache,
    excluded: dict[int, str],
    predict: Callable[[EagerPlan], EagerPlan],
    plan_at: Callable[[MemoryBudget], EagerPlan],
) -> TorchPlan | None:
    """Every checkpointable candidate module checkpointed, everything in it recomputed;
    None where no module can be. ``plan_at(budget)``: budget's eager plan of the trace
    at ``budget``, for the comparison at equal memory (``budget_recompute_cost``)."""
    excluded = dict(excluded)
    usable = checkpointable(trace, costs, excluded)
    # checkpoint_wrapper checkpoints every call of a module: one some call of which cannot
    # be checkpointed (a layer shared across depth) is left out whole
    left = {trace.regions[r].name for r in range(len(trace.regions)) if r not in usable}
    usable = [r for r in usable if trace.regions[r].name not in left]
    if not usable:
        return None
    problem, nodes = problem_for(trace, usable, costs)
    # kept: what no recomputation makes (outside the modules, or not recomputable in them)
    # and someone reads; everything else is run again
    kept = [v for v in range(problem.n) if not problem.can_recompute[v] and not problem.is_input[v]]
    saved = problem.prune_unused(kept)
    names = list(dict.fromkeys(trace.regions[r].name for r in usable))
    # of those, the ones checkpoint_wrapper would run again (inside the modules)
    kept_inside = [v for v in saved if problem.reason[v] not in TORCH_KEEPS_TOO]
    priced = TorchPlan.priced(
        problem,
        saved,
        fraction=None,
        peak_bytes=None,
        modules=names,
        kept_inside_bytes=problem.saved_bytes(kept_inside),
    )
    refused = problem.check(saved)
    if refused:
        return replace(priced, refused=refused)
    nbytes = priced.saved_bytes
    try:  # budget's plan keeping as much: a comparison, never a failed preview
        ours = plan_at(MemoryBudget(nbytes=nbytes)).total_recompute_cost
        priced = replace(priced, budget_recompute_cost=ours)
    except (InfeasibleError, SolverTimeout):
        pass
    plan = make_plan(
        problem,
        saved,
        budget=MemoryBudget(fraction=0.0),
        target_bytes=nbytes,
        min_bytes=nbytes,
        max_bytes=nbytes,
        status="reference",
        gap=0.0,
        solver="none",
        estimator=getattr(costs.estimator, "spec", costs.estimator.name),
        timings={},
    )
    try:
        whole = predict(eager_plan(plan, trace, problem, nodes, usable, excluded, costs))
    except PreviewError:  # the fake run cannot run it (a value read in Python): no peak
        return priced
    return replace(priced, peak_bytes=whole.peak_bytes)
