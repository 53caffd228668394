"""The lexicographic driver shared by the MIP solvers (``ilp``, ``highs``, ``mip``).

A MIP solver builds the closure model (:mod:`budget.solvers.mip.model`) in its backend's
API, as a :class:`MipModel`; :func:`solve_lexicographic` then minimises the primary
objective and breaks ties on the other one, exactly, whatever the backend's tolerances.
:class:`MipSolver` is the solver template for them: a subclass only builds its model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol

from ...core.problem import Problem
from ..base import InfeasibleError, Objective, Request, Search, SolverBase, no_plan_in_time
from .model import _MAX_UNITS, ClosureModel, MipWeights, closure_model, mip_weights


@dataclass
class MipResult:
    """One MIP solve: ``status`` optimal | feasible | infeasible | none (no plan found in
    time); ``saved`` the nodes whose s is 1; ``bound`` the backend's dual bound in units."""

    status: Literal["optimal", "feasible", "infeasible", "none"]
    saved: list[int]
    bound: float | None = None


class MipModel(Protocol):
    """The closure model built in one MIP backend's API (see ``ilp``, ``highs``, ``mip``)."""

    def minimize(
        self, objective: dict[Objective, float], time_limit: float, hint: list[int] | None
    ) -> MipResult:
        """Minimise ``sum(weight * objective)`` over the cost and bytes objectives (in
        units), warm-started from the plan ``hint`` where the API takes one."""
        ...

    def cap(self, which: Objective, units: int) -> None:
        """Add the row: objective ``which`` <= ``units`` (+ half a unit of tolerance)."""
        ...


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
    other objective).

    In integer units both objectives are bounded, so one solve of ``first * M + second``
    with ``M`` above the largest possible ``second`` is exactly lexicographic; it is used
    when its largest coefficient stays below 1e9 (numerically as safe as the objectives
    alone; always so on the bench graphs). Otherwise two solves: the first objective,
    then (when it is proven and time is left) the other with the first capped at its
    optimum (``one_solve=False`` forces this: on the bench graphs CBC was measured to
    prove the two stages quickly where it did not prove the weighted objective at all,
    ``python bench/solvers.py``; SCIP and HiGHS are fastest with one solve). Every value compared is recomputed exactly from the
    plans (``MipWeights.value``), so backend tolerances can never trade a unit of the
    first objective for the second.
    """
    first: Objective = minimize
    second: Objective = "bytes" if minimize == "cost" else "cost"
    totals = {"cost": int(weights.cost.sum()), "bytes": sum(weights.size.values())}
    top = {
        "cost": int(weights.cost.max()) if len(weights.cost) else 0,
        "bytes": max(weights.size.values(), default=0),
    }
    scale = totals[second] + 1
    single = one_solve and scale * top[first] + top[second] <= _MAX_UNITS
    objective = {first: float(scale), second: 1.0} if single else {first: 1.0}
    res = model.minimize(objective, time_limit, None)
    if res.status == "infeasible":
        raise InfeasibleError(f"no plan saves at most {target_bytes} bytes")
    if res.status == "none":
        raise no_plan_in_time(solver, time_limit, problem)
    saved = problem.prune_unused(res.saved)
    bound = res.bound
    if single:
        tie_break = "optimal" if res.status == "optimal" else "not proven"
        if bound is not None:  # first >= (bound - second) / scale for every plan
            bound = max(0.0, (bound - totals[second]) / scale)
    else:
        tie_break = "not run"
        remaining = time_limit - (time.perf_counter() - start)
        if res.status == "optimal" and remaining > 0:
            best = weights.value(problem, saved, first)
            model.cap(first, best)
            res2 = model.minimize({second: 1.0}, remaining, saved)
            if res2.status in ("optimal", "feasible"):
                other = problem.prune_unused(res2.saved)
                if not problem.check(other) and (
                    weights.value(problem, other, first) <= best
                    and weights.value(problem, other, second)
                    < weights.value(problem, saved, second)
                    and (target_bytes is None or problem.saved_bytes(other) <= target_bytes)
                ):
                    saved = other
            tie_break = "optimal" if res2.status == "optimal" else "not proven"
    return Search(
        saved,
        optimal=res.status == "optimal",
        bound=weights.unscale(bound, first),
        info={**info, "tie_break": tie_break, "lexicographic": "one solve" if single else "two"},
    )


class MipSolver(SolverBase):
    """A MIP backend as a solver: the closure model in integer units, built in the
    backend's API (:meth:`build`), then :func:`solve_lexicographic` (``ilp``, ``highs``,
    ``mip``)."""

    exact: ClassVar[bool] = True
    reduce: ClassVar[bool] = True  # measured faster on the bench graphs (bench/solvers.py)
    one_solve: ClassVar[bool] = True  # see solve_lexicographic

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
