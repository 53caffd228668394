"""Exact closure ILP (DESIGN.md) with an OR-Tools MIP solver, through MathOpt.

The model of ``ilp`` (s, r, y binaries; need, closure, storage and memory rows; with
offload, o binaries and two continuous exposures; integer units from
:class:`~budget.solvers.mip.model.MipWeights`) built in OR-Tools' MathOpt, solved
by SCIP (default) or HiGHS, both shipped in the ``ortools`` wheel. SCIP is the default by
measurement: it was the faster of the two on every bench graph (``python bench/solvers.py``).
MathOpt reports the dual bound, so a time-limited solve is "feasible"
with its proven gap. Ties are broken exactly by ``driver.solve_lexicographic``: one
solve of the weighted objective where the units allow it, otherwise a second solve
hinted with the first plan. Deterministic: one thread, a
fixed seed, a relative gap of 0 and an absolute gap below one unit. MathOpt rather than
``pywraplp``: ``pywraplp`` neither passes HiGHS options nor silences its banner.
"""

from __future__ import annotations

import datetime
import functools
from typing import Any, ClassVar

import numpy as np

from ...core.problem import Problem
from .driver import MipResult, MipSolver, Plan
from .matrix import ClosureMatrix, closure_matrix
from .model import ClosureModel, MipObjective, MipWeights

BACKENDS = ("scip", "highs")


class MathOptModel:
    """The closure model in MathOpt (a :class:`~budget.solvers.mip.driver.MipModel`)."""

    def __init__(self, problem: Problem, matrix: ClosureMatrix, backend: str) -> None:
        from ortools.math_opt.python import mathopt

        self.mathopt, self.problem, self.matrix, self.backend = mathopt, problem, matrix, backend
        model = mathopt.Model(name="budget")
        self.model = model
        self.x = [self._column(c) for c in range(matrix.num_cols)]
        self._rows = 0
        self._add_rows()

    def _column(self, c: int) -> Any:
        """Column ``c`` of the matrix as a variable: binary, or bounded (the exposures)."""
        upper, integer = float(self.matrix.col_upper[c]), bool(self.matrix.integer[c])
        if integer and upper == 1.0:
            return self.model.add_binary_variable()
        return self.model.add_variable(lb=0.0, ub=upper, is_integer=integer)

    def _add_rows(self) -> None:
        m, x = self.matrix, self.x
        start, index, value = m.start.tolist(), m.index.tolist(), m.value.tolist()
        for k in range(self._rows, len(m.row_lower)):
            lo, hi = float(m.row_lower[k]), float(m.row_upper[k])
            row = self.model.add_linear_constraint(lb=lo, ub=hi)
            for e in range(start[k], start[k + 1]):
                row.set_coefficient(x[index[e]], value[e])
        self._rows = len(m.row_lower)

    def _params(self, time_limit: float, gap: float) -> Any:
        return self.mathopt.SolveParameters(
            time_limit=datetime.timedelta(seconds=max(0.1, float(time_limit))),
            threads=1 if self.backend == "scip" else None,  # HiGHS takes no thread option
            random_seed=0,
            relative_gap_tolerance=0.0,
            absolute_gap_tolerance=gap,
            enable_output=False,
        )

    def minimize(
        self,
        objective: dict[MipObjective, float],
        time_limit: float,
        hint: Plan | None,
        gap: float = 0.5,
    ) -> MipResult:
        mathopt, m = self.mathopt, self.matrix
        target = self.model.objective
        target.clear()
        target.is_maximize = False
        c = m.weighted(objective)
        for col in np.flatnonzero(c).tolist():
            target.set_linear_coefficient(self.x[col], float(c[col]))
        model_params = None
        if hint is not None:
            point = m.point(self.problem, hint.saved, hint.offloaded)
            values = {v: float(point[i]) for i, v in enumerate(self.x)}
            model_params = mathopt.ModelSolveParameters(
                solution_hints=[mathopt.SolutionHint(variable_values=values)]
            )
        kind = mathopt.SolverType.GSCIP if self.backend == "scip" else mathopt.SolverType.HIGHS
        result = mathopt.solve(
            self.model, kind, params=self._params(time_limit, gap), model_params=model_params
        )
        reason = result.termination.reason
        T = mathopt.TerminationReason
        if reason in (T.INFEASIBLE, T.INFEASIBLE_OR_UNBOUNDED):
            return MipResult("infeasible", [])
        if reason == T.OPTIMAL:
            status = "optimal"
        elif reason == T.FEASIBLE:
            status = "feasible"
        elif reason == T.NO_SOLUTION_FOUND:
            return MipResult("none", [])
        else:  # numerical trouble or a solver error: never a user error
            raise RuntimeError(f"mip ({self.backend}) stopped: {result.termination}")
        values = np.asarray(result.variable_values(self.x), np.float64)
        bound = float(result.termination.objective_bounds.dual_bound)
        return MipResult(status, m.saved(values), bound, m.offloaded(values))  # type: ignore[arg-type]

    def cap(self, which: MipObjective, units: int) -> None:
        self.matrix.cap(which, units)
        self._add_rows()


@functools.cache
def _has_backend(backend: str) -> bool:
    """Is MathOpt installed with this solver compiled in? (one tiny solve, cached)"""
    try:
        from ortools.math_opt.python import mathopt
    except ImportError:
        return False
    kind = mathopt.SolverType.GSCIP if backend == "scip" else mathopt.SolverType.HIGHS
    model = mathopt.Model()
    model.minimize(model.add_binary_variable())
    try:
        mathopt.solve(model, kind)
    except Exception:  # noqa: BLE001 - MathOpt raises several types for a missing solver
        return False
    return True


class OrToolsMIP(MipSolver):
    """``mip``: SCIP by default (``OrToolsMIP(backend="highs")`` for HiGHS)."""

    name: ClassVar[str] = "mip"
    requires: ClassVar[str] = "ortools"
    default_backend: ClassVar[str] = "scip"

    def __init__(self, backend: str | None = None) -> None:
        backend = backend or self.default_backend
        if backend not in BACKENDS:
            raise ValueError(f"mip backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
        self.backend = backend

    @classmethod
    def available(cls) -> bool:
        return super().available() and _has_backend(cls.default_backend)

    def build(
        self, problem: Problem, m: ClosureModel, weights: MipWeights
    ) -> tuple[MathOptModel, dict[str, object]]:
        model = MathOptModel(problem, closure_matrix(problem, m, weights), self.backend)
        info = {
            "backend": f"{self.backend.upper()} (OR-Tools MathOpt)",
            "variables": len(model.x),
        }
        return model, info
