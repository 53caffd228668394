"""Trace + budget -> EagerPlan: which regions to checkpoint, and each op's policy inside.

Budget semantics are those of the compiled path (DESIGN.md), for what eager keeps:

- fraction 1.0: nothing checkpointed (``max_bytes``: what autograd keeps then);
- fraction 0.0: the fewest bytes with every usable region checkpointed (``min_bytes``);
- fraction b: target ``min + b * (max - min)``; a size: that target (below ``min_bytes``
  a :class:`~budget.errors.BudgetTooSmallError` naming it).

Whether a region is checkpointed changes what the problem is (:mod:`budget.eager.problem`),
so the region choice sits outside the solver: every candidate region is checkpointed and
the problem solved exactly by the configured solver; then, region by region, a region whose
plan recomputes nothing that costs anything is tried without checkpointing (autograd then
keeps what it saves there, and the solver re-plans the rest at the same target), and kept
so when the step's recompute cost does not grow. Each plan is an exact optimum for its
set of checkpointed regions; over sets of regions the search is greedy.

Which of these plans a budget gets, with its predicted peak (a peak budget's search, the
peak tie-break), is :mod:`budget.eager.search`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch
import torch.fx as fx

from ..core.plan import Plan
from ..core.problem import Problem
from ..core.sizes import MemoryBudget
from ..errors import InfeasibleError
from ..estimators import get_estimator
from ..planning.offload import host_link
from ..planning.planner import budget_target, make_plan
from ..solvers import Solution, get_solver
from ..solvers.auto import asking
from .offload import save_choices
from .plan import EagerPlan, RegionChoice
from .problem import CostCache, _cacheable, build_problem, held_storages, storage_key
from .traced import Trace

_EPS = 1e-12


def _forced(problem: Problem) -> list[int]:
    """The plan of a problem where nothing is recomputed: every needed value saved."""
    return np.flatnonzero(problem.needed & ~problem.is_input).tolist()


def plan_trace(
    trace: Trace,
    budget: MemoryBudget,
    *,
    solver: str,
    estimator: str,
    time_limit: float,
    excluded: dict[int, str] | None = None,
    costs: CostCache | None = None,
    offload: bool = False,
) -> EagerPlan:
    """The eager plan of ``trace`` at ``budget``; ``excluded``: regions that may not be
    checkpointed, and why; ``costs``: priced nodes and built problems to reuse (the plans
    of one trace at several budgets, made with the same estimator, solver and offload);
    ``offload``: values may also be moved to host memory (:mod:`budget.eager.offload`)."""
    start = time.perf_counter()
    excluded = dict(excluded or {})
    costs = costs or CostCache(get_estimator(estimator))
    if offload and costs.link is None:
        costs.link = host_link(estimator, next(iter(trace.ops)))
    backend = get_solver(solver)
    usable = checkpointable(trace, costs, excluded)

    plain, plain_nodes = problem_for(trace, (), costs)
    plain_saved = _forced(plain)
    max_bytes = plain.saved_bytes(plain_saved)
    t_estimate = time.perf_counter() - start
    movable = bool(usable) or costs.link is not None  # anything a plan can take away
    if movable and costs.min_bytes is None:
        full, _ = problem_for(trace, usable, costs)
        low = backend.solve(full, None, minimize="bytes", time_limit=time_limit)
        costs.min_bytes = min(int(low.objective), max_bytes)
    min_bytes = costs.min_bytes if movable and costs.min_bytes is not None else max_bytes
    target = budget_target(
        budget,
        min_bytes,
        max_bytes,
        scope=f"of this step with eager checkpointing of {len(usable)} module(s)",
    )
    spec = getattr(costs.estimator, "spec", costs.estimator.name)
    common = {
        "budget": budget,
        "target_bytes": target,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "estimator": spec,
    }
    if target >= max_bytes or not movable:
        status = "reference" if budget.fraction == 1.0 else "optimal"
        timings = {"estimate": t_estimate, "solve": time.perf_counter() - start - t_estimate}
        plan = make_plan(
            plain, plain_saved, status=status, gap=0.0, solver="none", timings=timings, **common
        )
        return eager_plan(plan, trace, plain, plain_nodes, (), excluded, costs)

    checkpointed = list(usable)
    best = _solve(trace, checkpointed, costs, backend, target, time_limit)
    assert best is not None  # every region checkpointed reaches min_bytes <= target
    for r in list(checkpointed):
        problem, nodes, sol = best
        if _region_cost(problem, nodes, sol.saved, trace, r) > _EPS:
            continue
        trial, enough = [x for x in checkpointed if x != r], sol.objective * (1 + 1e-9) + _EPS
        found = _solve(trace, trial, costs, asking(backend, enough), target, time_limit)
        if found is not None and found[2].objective <= enough:
            checkpointed, best = trial, found
    problem, nodes, sol = best
    timings = {"estimate": t_estimate, "solve": time.perf_counter() - start - t_estimate}
    plan = make_plan(
        problem,
        sol.saved,
        offloaded=sol.offloaded,
        status=sol.status,
        gap=sol.gap,
        solver=backend.name,
        timings=timings,
        **common,
    )
    return eager_plan(plan, trace, problem, nodes, checkpointed, excluded, costs)


def plan_key(p: EagerPlan) -> tuple:
    """What makes two eager plans the same: the calls they checkpoint, what they save."""
    return tuple(r.key for r in p.regions if r.checkpoint), tuple(p.saved), tuple(p.offloaded)


def checkpointable(trace: Trace, costs: CostCache, excluded: dict[int, str]) -> list[int]:
    """The candidate regions not ``excluded`` that some plan can checkpoint; the others
    join ``excluded``, with why. Checkpointing a region where a value the backward needs
    can be neither cached nor recomputed (BatchNorm, whose running statistics must not be
    updated twice, followed by an in-place ReLU that writes its output) has no plan."""
    usable = [r for r in range(len(trace.regions)) if r not in excluded]
    if not usable or not _stuck(problem_for(trace, usable, costs)[0]):
        return usable
    for r in usable:
        stuck = _stuck(problem_for(trace, [r], costs)[0])
        if stuck:
            excluded[r] = f"checkpointing it has no plan: {stuck}"
    return [r for r in usable if r not in excluded]


def _stuck(problem: Problem) -> str:
    """Why no plan of ``problem`` is valid ("" when one is): saving every value that can
    be saved is valid when any plan is."""
    errors = problem.check(np.flatnonzero(problem.can_save & ~problem.is_input).tolist())
    return errors[0] if errors else ""


def _solve(
    trace: Trace,
    checkpointed: Sequence[int],
    costs: CostCache,
    backend: object,
    target: int,
    time_limit: float,
) -> tuple[Problem, list[fx.Node | None], Solution] | None:
    problem, nodes = problem_for(trace, checkpointed, costs)
    try:
        sol = backend.solve(problem, target, minimize="cost", time_limit=time_limit)  # type: ignore[attr-defined]
    except InfeasibleError:
        return None
    return problem, nodes, sol


def problem_for(
    trace: Trace, checkpointed: Sequence[int], costs: CostCache
) -> tuple[Problem, list[fx.Node | None]]:
    key = tuple(sorted(checkpointed))
    if key not in costs.problems:
        costs.problems[key] = build_problem(trace, checkpointed, costs)
    return costs.problems[key]


def _region_cost(
    problem: Problem, nodes: list[fx.Node | None], saved: Sequence[int], trace: Trace, r: int
) -> float:
    """The recompute cost the plan ``saved`` pays inside region ``r``."""
    closure = problem.recompute_closure(saved)
    return float(
        sum(
            problem.cost[v]
            for v in closure
            if (n := nodes[v]) is not None and trace.region_of_value(n) == r
        )
    )


def eager_plan(
    plan: Plan,
    trace: Trace,
    problem: Problem,
    nodes: list[fx.Node | None],
    checkpointed: Sequence[int],
    excluded: dict[int, str],
    costs: CostCache,
) -> EagerPlan:
    """``plan`` with its per-region choices: the policy of each op call of each
    checkpointed region, from the values the plan saves; planned with offload, the saves
    around the model's forward, each offloaded or not."""
    saved_nodes = {nodes[d] for d in indices_of(problem, plan.saved)}
    held = held_storages(trace, set(checkpointed))  # kept anyway: ops cached for the rest
    by_name = {d.name: d for d in plan.decisions}
    region_by_name = {
        n.name: trace.region_of_value(n) for n in nodes if n is not None and n.op != "placeholder"
    }
    regions = []
    for r, region in enumerate(trace.regions):
        if r not in checkpointed:
            left = {"reason": excluded.get(r, ""), "call": region.call}
            regions.append(RegionChoice(region.name, region.path, False, **left))
            continue
        policy = []
        for op in region.nodes:
            values = [v for v in trace.outputs_of(op) if v is op or storage_key(v) not in held]
            # after the region's last autograd save, recomputation stops before the op (early
            # stop): a value the plan keeps there is kept by autograd outside the region (an
            # output another op saves); a cached copy would hold it to the region's backward
            replayed = region.last_save is not None and trace.order[op] < region.last_save
            cache = replayed and any(v in saved_nodes for v in values) and _cacheable(op, trace)[0]
            policy.append("save" if cache else "recompute")
        mine = [d for d in plan.decisions if region_by_name.get(d.name) == r]
        rng = by_name.get(f"rng_state_{r}")
        regions.append(
            RegionChoice(
                module=region.name,
                path=region.path,
                checkpoint=True,
                ops=list(region.ops),
                policy=policy,  # type: ignore[arg-type]
                saved_bytes=sum(d.bytes for d in mine if d.decision == "save")
                + (rng.bytes if rng else 0),
                recompute_cost=sum(d.cost for d in mine if d.decision == "recompute"),
                recompute_flops=sum(d.flops for d in mine if d.decision == "recompute"),
                call=region.call,
            )
        )
    made = {k: getattr(plan, k) for k in plan.__dataclass_fields__}
    made |= {"compiler": "eager-checkpoint", "torch_version": torch.__version__}
    saves = save_choices(trace, checkpointed, plan.offloaded) if costs.link is not None else []
    counted = trace.model_calls == 1 and all(r.in_model for r in trace.regions if r.calls > 1)
    return EagerPlan(**made, regions=regions, saves=saves, counted_from_model=counted)


def indices_of(problem: Problem, names: Sequence[str]) -> list[int]:
    where = {n: i for i, n in enumerate(problem.names)}
    return [where[n] for n in names if n in where]
