"""Exact closure ILP (DESIGN.md) through PuLP, solved with CBC.

Variables: ``s_v`` (saved) and ``r_v`` (recomputed) for each non-input node that allows
them, ``y_g`` for each storage with bytes. Ties are broken exactly by a second solve:
first minimise the primary objective, then fix it at its optimum and minimise the other.
PuLP is imported only when a problem is solved, so ``import budget`` stays light.
"""

from __future__ import annotations

import time
import warnings
from typing import ClassVar

import numpy as np

from ..problem import Problem
from .base import (
    InfeasibleError,
    Objective,
    Solution,
    SolverBase,
    SolverTimeout,
    closure_model,
    finish,
)

# Coefficients are scaled so CBC sees numbers of moderate size; the final plan is always
# re-checked in exact integer bytes, so scaling can never let a plan exceed its target.
_COST_SCALE = 1e6
_BYTE_SCALE = 1.0 / 1024.0


def _cost_weights(problem: Problem) -> np.ndarray:
    top = float(problem.cost.max()) if problem.n else 0.0
    return problem.cost * (_COST_SCALE / top) if top > 0 else np.zeros(problem.n)


class PulpILP(SolverBase):
    name: ClassVar[str] = "ilp"
    exact: ClassVar[bool] = True
    requires: ClassVar[str] = "pulp"

    def solve(
        self,
        problem: Problem,
        target_bytes: int | None,
        *,
        minimize: Objective = "cost",
        time_limit: float = 60.0,
    ) -> Solution:
        import pulp

        start = time.perf_counter()
        model, s, r, y = _build(pulp, problem, target_bytes)
        w = _cost_weights(problem)
        cost_expr = pulp.lpSum(float(w[v]) * r[v] for v in r if w[v] > 0)
        bytes_expr = pulp.lpSum(float(problem.storage_bytes[g]) * _BYTE_SCALE * y[g] for g in y)
        first, second = (cost_expr, bytes_expr) if minimize == "cost" else (bytes_expr, cost_expr)

        status = _run(pulp, model, first, time_limit, problem, target_bytes)
        optimal = status == "optimal"
        tie_break = "not run"
        best = pulp.value(first) or 0.0
        remaining = time_limit - (time.perf_counter() - start)
        if optimal and remaining > 0:
            model += first <= best + 1e-7 * max(1.0, abs(best)), "tie_break"
            status2 = _run(pulp, model, second, remaining, problem, target_bytes)
            tie_break = "optimal" if status2 == "optimal" else "not proven"
        saved = sorted(v for v in s if (pulp.value(s[v]) or 0) > 0.5)
        return finish(
            problem,
            saved,
            solver=self.name,
            target_bytes=target_bytes,
            minimize=minimize,
            optimal=optimal,
            bound=None,
            start=start,
            info={"backend": "CBC", "variables": len(s) + len(r) + len(y), "tie_break": tie_break},
        )


def _build(pulp, problem: Problem, target_bytes: int | None):  # type: ignore[no-untyped-def]
    m = closure_model(problem)
    model = pulp.LpProblem("budget", pulp.LpMinimize)
    s = {v: model.add_variable(f"s{v}", cat="Binary") for v in m.save}
    r = {v: model.add_variable(f"r{v}", cat="Binary") for v in m.recompute}
    y = {g: model.add_variable(f"y{g}", cat="Binary") for g in m.groups}
    for v in m.need:
        model += pulp.lpSum(x[v] for x in (s, r) if v in x) >= 1, f"need{v}"
    for k, (v, u) in enumerate(m.closure):
        model += r[v] <= pulp.lpSum(x[u] for x in (s, r) if u in x), f"closure{k}"
    for v, g in m.store:
        model += y[g] >= s[v], f"store{v}"
    if target_bytes is not None:
        model += (
            pulp.lpSum(float(problem.storage_bytes[g]) * _BYTE_SCALE * y[g] for g in y)
            <= target_bytes * _BYTE_SCALE,
            "memory",
        )
    return model, s, r, y


def _run(pulp, model, objective, time_limit: float, problem: Problem, target) -> str:  # type: ignore[no-untyped-def]
    model.setObjective(objective)
    with warnings.catch_warnings():
        # PuLP 3.3 deprecates its bundled CBC in favour of pulp[cbc] for 4.0; we pin pulp<4.
        warnings.simplefilter("ignore", DeprecationWarning)
        solver = pulp.PULP_CBC_CMD(msg=False, timeLimit=max(1, int(time_limit)), threads=1)
        model.solve(solver)
    if model.status == pulp.LpStatusInfeasible:
        raise InfeasibleError(f"no plan saves at most {target} bytes")
    if model.sol_status == pulp.LpSolutionOptimal:
        return "optimal"
    if model.sol_status == pulp.LpSolutionIntegerFeasible:
        return "feasible"
    raise SolverTimeout(
        f"ilp found no plan within {time_limit:.0f}s for a problem of {problem.n} nodes; "
        "raise budget.config.time_limit"
    )
