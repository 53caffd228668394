"""``auto``: the parametric min-cut first, CP-SAT from its plan when it is not proven.

Measured on bench/solvers.py: the min-cut proves optimality in well under a second on
random DAGs of 20k nodes, where CP-SAT finds no plan in 20 s; on real joint graphs with
identical layers it proves only the budgets on its hull, and CP-SAT, warm-started from
its plan, proves the rest in a fraction of a second. Combined: a proven optimum when
either proves one, otherwise the better plan with the better bound; never no plan when
the min-cut has one.

A plan the min-cut calls optimal is returned as it is: its proof already covers the
tie-break (``mincut._proven``: its cost meets the Lagrangian bound at the target, and the
bound one byte below its own bytes exceeds its cost, so no plan with fewer bytes is as
cheap; for ``minimize="bytes"`` the lexicographic cut). An earlier CP-SAT tie-break after
a proven cut could not improve such a plan and took 15 of the 16.5 s on the 20k DAG.
"""

from __future__ import annotations

import time
from typing import ClassVar

from ..problem import Problem
from .base import InfeasibleError, Objective, Solution, SolverBase, SolverTimeout
from .cpsat import CpSat
from .mincut import MinCutSolver
from .reduce import Reduced


class Auto(SolverBase):
    """Min-cut on the problem as given; what it does not prove, on the reduced problem.

    The reduction (:mod:`budget.solvers.reduce`) is skipped while the cut alone proves
    the plan (on the 20k-node random DAG the cut takes 0.5 s, the reduction 1.1 s);
    when the cut does not, the cut and CP-SAT run on the reduced problem (on GPT-24 it
    has 317 nodes instead of 2085, and CP-SAT proves it 2-3x faster).
    """

    name: ClassVar[str] = "auto"
    exact: ClassVar[bool] = True
    requires: ClassVar[str] = "ortools"
    reduce: ClassVar[bool] = True
    reduces_inside: ClassVar[bool] = True  # get_solver sets ``reduction`` instead of wrapping

    def __init__(self, reduction: bool = True) -> None:
        self.reduction = reduction

    def solve(
        self,
        problem: Problem,
        target_bytes: int | None,
        *,
        minimize: Objective = "cost",
        time_limit: float = 60.0,
    ) -> Solution:
        start = time.perf_counter()
        try:
            quick: Solution | None = MinCutSolver().solve(
                problem, target_bytes, minimize=minimize, time_limit=time_limit
            )
        except InfeasibleError:
            quick = None  # off the hull something may still fit: let CP-SAT decide
        if quick is not None and quick.status == "optimal":
            # proven by the cut, ties included (module docstring)
            quick.info = {**quick.info, "tie_break": "optimal"}
            return _tag(quick, "mincut", start)
        remaining = max(0.1, time_limit - (time.perf_counter() - start))
        try:
            if self.reduction:
                exact = Reduced(_CutThenCpSat()).solve(
                    problem, target_bytes, minimize=minimize, time_limit=remaining
                )
            else:
                exact = _CutThenCpSat().solve(
                    problem, target_bytes, minimize=minimize, time_limit=remaining, quick=quick
                )
        except SolverTimeout:
            if quick is None:
                raise
            return _tag(quick, "mincut (cpsat timed out)", start)
        return _tag(*_better(exact, quick), start)


class _CutThenCpSat(SolverBase):
    """The min-cut, then CP-SAT warm-started from its plan unless the cut proved it."""

    name: ClassVar[str] = "auto"
    exact: ClassVar[bool] = True
    requires: ClassVar[str] = "ortools"

    def solve(
        self,
        problem: Problem,
        target_bytes: int | None,
        *,
        minimize: Objective = "cost",
        time_limit: float = 60.0,
        quick: Solution | None = None,
    ) -> Solution:
        start = time.perf_counter()
        if quick is None:
            try:
                quick = MinCutSolver().solve(
                    problem, target_bytes, minimize=minimize, time_limit=time_limit
                )
            except InfeasibleError:
                quick = None
            if quick is not None and quick.status == "optimal":
                quick.info = {**quick.info, "tie_break": "optimal"}
                return _tag(quick, "mincut", start)
        remaining = max(0.1, time_limit - (time.perf_counter() - start))
        try:
            exact = CpSat().solve(
                problem,
                target_bytes,
                minimize=minimize,
                time_limit=remaining,
                hint=quick.saved if quick is not None else None,
            )
        except SolverTimeout:
            if quick is None:
                raise
            return _tag(quick, "mincut (cpsat timed out)", start)
        return _tag(*_better(exact, quick), start)


def _better(exact: Solution, quick: Solution | None) -> tuple[Solution, str]:
    """CP-SAT's plan when it is proven (or alone), else the better plan, better bound."""
    if exact.status == "optimal" or quick is None:
        return exact, exact.info.get("auto", "cpsat")  # type: ignore[return-value]
    best = exact if exact.objective <= quick.objective else quick
    bounds = [b for b in (exact.bound, quick.bound) if b is not None]
    best.bound = max(bounds) if bounds else None
    return best, "cpsat+mincut"


def _tag(sol: Solution, how: str, start: float) -> Solution:
    sol.info = {**sol.info, "auto": how}
    sol.seconds = time.perf_counter() - start
    return sol
