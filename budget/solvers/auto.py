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
from collections.abc import Callable
from typing import ClassVar

from ..core.problem import Problem
from .base import InfeasibleError, Objective, Solution, SolverBase, SolverTimeout
from .mincut.solver import MinCutSolver
from .mip.cpsat import CpSat
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
        quick = _cut(problem, target_bytes, minimize, time_limit)
        if quick is not None and quick.status == "optimal":
            return _tag(quick, "mincut", start)
        remaining = max(0.1, time_limit - (time.perf_counter() - start))
        if not self.reduction:
            sol = _CutThenCpSat().solve(
                problem, target_bytes, minimize=minimize, time_limit=remaining, quick=quick
            )
            sol.seconds = time.perf_counter() - start
            return sol
        return _cpsat_or_cut(
            lambda: Reduced(_CutThenCpSat()).solve(
                problem, target_bytes, minimize=minimize, time_limit=remaining
            ),
            quick,
            start,
        )


class _CutThenCpSat(SolverBase):
    """The min-cut (unless given as ``quick``), then CP-SAT warm-started from its plan
    unless the cut proved it."""

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
            quick = _cut(problem, target_bytes, minimize, time_limit)
            if quick is not None and quick.status == "optimal":
                return _tag(quick, "mincut", start)
        remaining = max(0.1, time_limit - (time.perf_counter() - start))
        return _cpsat_or_cut(
            lambda: CpSat().solve(
                problem,
                target_bytes,
                minimize=minimize,
                time_limit=remaining,
                hint=quick.saved if quick is not None else None,
            ),
            quick,
            start,
        )


def _cut(
    problem: Problem, target_bytes: int | None, minimize: Objective, time_limit: float
) -> Solution | None:
    """The min-cut's plan, None when its hull has none under the target (off the hull
    something may still fit: CP-SAT decides). An optimal one is proven ties included
    (module docstring)."""
    try:
        sol = MinCutSolver().solve(problem, target_bytes, minimize=minimize, time_limit=time_limit)
    except InfeasibleError:
        return None
    if sol.status == "optimal":
        sol.info = {**sol.info, "tie_break": "optimal"}
    return sol


def _cpsat_or_cut(exact: Callable[[], Solution], quick: Solution | None, start: float) -> Solution:
    """``exact()`` (CP-SAT), or the cut's plan when CP-SAT times out; the better of both."""
    try:
        sol = exact()
    except SolverTimeout:
        if quick is None:
            raise
        return _tag(quick, "mincut (cpsat timed out)", start)
    return _tag(*_better(sol, quick), start)


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
