"""The lexicographic driver shared by the MIP solvers (``ilp``, ``highs``, ``mip``).

A MIP solver builds the closure model (:mod:`budget.solvers.mip.model`) in its backend's
API, as a :class:`MipModel`; :func:`solve_lexicographic` then minimises the primary
objective and breaks ties on the other one, exactly, whatever the backend's tolerances.
Where the problem prices offload (``Problem.offload``) the model has offload columns,
the cost objective includes the offload price, the bytes objective counts device bytes,
and a last tie-break takes the fewest host bytes (as ``cpsat``): nothing is offloaded
that neither saves time nor frees device memory. :class:`MipSolver` is the solver
template for them: a subclass only builds its model.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Literal, NamedTuple, Protocol

from ...core.problem import Problem
from ..base import InfeasibleError, Objective, Request, Search, SolverBase, no_plan_in_time
from .model import _MAX_UNITS, ClosureModel, MipObjective, MipWeights, closure_model, mip_weights


@dataclass
class MipResult:
    """One MIP solve: ``status`` optimal | feasible | infeasible | none (no plan found in
    time); ``saved`` the nodes whose s is 1; ``bound`` the backend's dual bound in units;
    ``offloaded`` the nodes whose o is 1 (offload columns only)."""

    status: Literal["optimal", "feasible", "infeasible", "none"]
    saved: list[int]
    bound: float | None = None
    offloaded: list[int] = field(default_factory=list)


class Plan(NamedTuple):
    """A plan as the driver compares them: the saved set and those of it offloaded."""

    saved: list[int]
    offloaded: list[int]


class MipModel(Protocol):
    """The closure model built in one MIP backend's API (see ``ilp``, ``highs``, ``mip``)."""

    def minimize(
        self,
        objective: dict[MipObjective, float],
        time_limit: float,
        hint: Plan | None,
        gap: float = 0.5,
    ) -> MipResult:
        """Minimise ``sum(weight * objective)`` over the objectives (in units),
        warm-started from the plan ``hint`` where the API takes one, to within an
        absolute ``gap`` (units; below one: exact)."""
        ...

    def cap(self, which: MipObjective, units: int) -> None:
        """Add the row: objective ``which`` <= ``units`` (+ half a unit of tolerance)."""
        ...


def _plan(problem: Problem, res: MipResult) -> Plan:
    """The solve's plan, pruned (:meth:`Problem.prune_unused`), offloading only what it
    still saves and what frees device memory (:meth:`Problem.freeing`)."""
    saved = problem.prune_unused(res.saved)
    kept = set(saved)
    return Plan(saved, problem.freeing(saved, (v for v in res.offloaded if v in kept)))


def _weighted_scale(weights: MipWeights, first: Objective, second: Objective) -> int | None:
    """``M`` for one exactly lexicographic solve of ``first * M + second``, or None when
    its largest coefficient would pass 1e9 or the model offloads (three objectives)."""
    if weights.offloads:
        return None
    totals = {"cost": int(weights.cost.sum()), "bytes": sum(weights.size.values())}
    top = {
        "cost": int(weights.cost.max()) if len(weights.cost) else 0,
        "bytes": max(weights.size.values(), default=0),
    }
    scale = totals[second] + 1
    return scale if scale * top[first] + top[second] <= _MAX_UNITS else None


def solve_lexicographic(
    problem: Problem,
    model: MipModel,
    weights: MipWeights,
    *,
    solver: str,
    target_bytes: int | None,
    minimize: Objective,
    time_limit: float,
    start: float,
    info: dict[str, object],
    one_solve: bool = True,
) -> Search:
    """The lexicographic solve shared by the MIP solvers (first ``minimize``, then the
    other objective, then, with offload, the host bytes).

    In integer units both objectives are bounded, so one solve of ``first * M + second``
    with ``M`` above the largest possible ``second`` is exactly lexicographic; it is used
    when its largest coefficient stays below 1e9 (numerically as safe as the objectives
    alone; always so on the bench graphs) and the model has no offload columns.
    Otherwise one solve per objective: the first, then (when it is proven and time is
    left) each next one with the ones before capped at their optimum (``one_solve=False``
    forces this: on the bench graphs CBC was measured to prove the two stages quickly
    where it did not prove the weighted objective at all, ``python bench/solvers.py``;
    SCIP and HiGHS are fastest with one solve). Every value compared is recomputed
    exactly from the plans (``MipWeights.value``), so backend tolerances can never trade
    a unit of an objective for the next one.
    """
    first: Objective = minimize
    second: Objective = "bytes" if minimize == "cost" else "cost"
    scale = _weighted_scale(weights, first, second) if one_solve else None
    objective: dict[MipObjective, float] = (
        {first: 1.0} if scale is None else {first: float(scale), second: 1.0}
    )
    res = model.minimize(objective, time_limit, None, _gap(weights, objective))
    if res.status == "infeasible":
        raise InfeasibleError(f"no plan saves at most {target_bytes} bytes")
    if res.status == "none":
        raise no_plan_in_time(solver, time_limit, problem)
    plan = _plan(problem, res)
    bound = res.bound
    if scale is not None:
        tie_break = "optimal" if res.status == "optimal" else "not proven"
        if bound is not None:  # first >= (bound - second) / scale for every plan
            bound = max(0.0, (bound - (scale - 1)) / scale)
        stages = "one solve"
    else:
        order: list[MipObjective] = [first, second, *(["host"] if weights.offloads else [])]
        tie_break = "not run"
        if res.status == "optimal":
            plan, tie_break = _tie_breaks(
                problem,
                model,
                weights,
                plan,
                order,
                target_bytes=target_bytes,
                slack=weights.cost_slack if first == "cost" else 0,
                time_left=lambda: time_limit - (time.perf_counter() - start),
            )
        stages = "two" if len(order) == 2 else "three"
    return Search(
        plan.saved,
        optimal=res.status == "optimal",
        bound=weights.unscale(bound, first),
        info={**info, "tie_break": tie_break, "lexicographic": stages},
        offloaded=plan.offloaded,
    )


def _tie_breaks(
    problem: Problem,
    model: MipModel,
    weights: MipWeights,
    plan: Plan,
    order: list[MipObjective],
    *,
    target_bytes: int | None,
    slack: int,
    time_left: Callable[[], float],
) -> tuple[Plan, str]:
    """Each objective of ``order`` after the first, minimised with those before it capped
    at the plan's values (the first one ``slack`` units above: rounded costs), hinted with
    the plan; a stage's plan replaces it only when exactly no worse before and better in
    that objective. Returns the plan and the tie-break's status."""
    caps: list[tuple[MipObjective, int]] = []
    tie_break = "not run"
    for k in range(1, len(order)):
        remaining = time_left()
        if remaining <= 0:
            break
        capped, extra = order[k - 1], slack if k == 1 else 0
        caps.append((capped, weights.value(problem, plan.saved, capped, plan.offloaded) + extra))
        model.cap(*caps[-1])
        res = model.minimize({order[k]: 1.0}, remaining, plan, _gap(weights, {order[k]: 1.0}))
        if res.status not in ("optimal", "feasible"):
            return plan, "not proven"
        other = _plan(problem, res)
        if _better(problem, weights, other, plan, order[k], caps, target_bytes):
            plan = other
        tie_break = "optimal" if res.status == "optimal" else "not proven"
        if tie_break != "optimal":
            break
    return plan, tie_break


def _gap(weights: MipWeights, objective: dict[MipObjective, float]) -> float:
    """The absolute gap of a solve of ``objective``: the cost's alone may have one wider
    than exact (:attr:`MipWeights.cost_gap`, with offload)."""
    return weights.cost_gap if set(objective) == {"cost"} else 0.5


def _better(
    problem: Problem,
    weights: MipWeights,
    other: Plan,
    plan: Plan,
    goal: MipObjective,
    caps: list[tuple[MipObjective, int]],
    target_bytes: int | None,
) -> bool:
    """Whether ``other`` is a valid plan within ``target_bytes`` and every cap, exactly,
    with less of ``goal`` than ``plan``."""

    def value(p: Plan, which: MipObjective) -> int:
        return weights.value(problem, p.saved, which, p.offloaded)

    return (
        not problem.check(other.saved, other.offloaded)
        and all(value(other, which) <= units for which, units in caps)
        and value(other, goal) < value(plan, goal)
        and (
            target_bytes is None
            or problem.saved_bytes(other.saved, other.offloaded) <= target_bytes
        )
    )


class MipSolver(SolverBase):
    """A MIP backend as a solver: the closure model in integer units, built in the
    backend's API (:meth:`build`), then :func:`solve_lexicographic` (``ilp``, ``highs``,
    ``mip``). Every one plans offload: the model and the driver carry it."""

    exact: ClassVar[bool] = True
    reduce: ClassVar[bool] = True  # measured faster on the bench graphs (bench/solvers.py)
    one_solve: ClassVar[bool] = True  # see solve_lexicographic
    plans_offload: ClassVar[bool] = True

    def build(
        self, problem: Problem, m: ClosureModel, weights: MipWeights
    ) -> tuple[MipModel, dict[str, object]]:
        """The built model, and the ``info`` to report (backend name, variables)."""
        raise NotImplementedError

    def _search(self, request: Request) -> Search:
        problem, target_bytes, minimize, time_limit = request
        start = time.perf_counter()
        m = closure_model(problem)
        weights = mip_weights(problem, m, target_bytes)
        model, info = self.build(problem, m, weights)
        return solve_lexicographic(
            problem,
            model,
            weights,
            solver=self.name,
            target_bytes=target_bytes,
            minimize=minimize,
            time_limit=time_limit - (time.perf_counter() - start),
            start=start,
            info=info,
            one_solve=self.one_solve,
        )
