"""``auto``: the parametric min-cut first, CP-SAT from its plan when it is not proven.

Measured by ``python bench/solvers.py``: the min-cut proves optimality
quickly on large random DAGs, where CP-SAT finds no plan within its time limit; on real
joint graphs with identical layers it proves only the budgets on its hull, and CP-SAT,
warm-started from its plan, proves the rest quickly. Combined: a proven optimum when
either proves one, otherwise the better plan with the better bound; never no plan when
the min-cut has one.

A plan the min-cut calls optimal is returned as it is: its proof already covers the
tie-break (``mincut._proven``: its cost meets the Lagrangian bound at the target, and the
bound one byte below its own bytes exceeds its cost, so no plan with fewer bytes is as
cheap; for ``minimize="bytes"`` the lexicographic cut). An earlier CP-SAT tie-break after
a proven cut could not improve such a plan and took most of the solve time on the large
random DAG.

Both solvers here combine other solvers' finished plans (each already checked and
priced); the template checks and prices the one they return again, which changes nothing.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import ClassVar, TypeVar

from ..core.problem import Problem
from .base import (
    InfeasibleError,
    Objective,
    Request,
    Search,
    Solution,
    SolverBase,
    SolverTimeout,
)
from .mincut.solver import MinCutSolver
from .mip.cpsat import CpSat
from .reduce import Reduced


class Auto(SolverBase):
    """Min-cut on the problem as given; what it does not prove, on the reduced problem.

    The reduction (:mod:`budget.solvers.reduce`) is skipped while the cut alone proves
    the plan (on the large random DAG of the bench the reduction takes longer than the
    cut); when the cut does not, the cut and CP-SAT run on the reduced problem (on the
    GPT bench graphs it is several times smaller, and CP-SAT proves it faster).
    """

    name: ClassVar[str] = "auto"
    exact: ClassVar[bool] = True
    requires: ClassVar[str] = "ortools"
    reduce: ClassVar[bool] = True
    plans_offload: ClassVar[bool] = True
    reduces_inside: ClassVar[bool] = True  # get_solver sets ``reduction`` instead of wrapping
    check_plannable: ClassVar[bool] = False  # the cut's and CP-SAT's own checks report it

    def __init__(self, reduction: bool = True, enough: float | None = None) -> None:
        self.reduction = reduction
        # the most a plan may cost to serve the caller (a yes-or-no question: is there one
        # that cheap?): where the min-cut's bound proves every plan costs more, its plan is
        # returned unproven, with that bound, and CP-SAT does not search for a proof
        self.enough = enough

    def _search(self, request: Request) -> Search:
        problem, target_bytes, minimize, time_limit = request
        if problem.offload is not None:  # the cut knows saves and recomputations only
            exact = Reduced(CpSat()) if self.reduction else CpSat()
            return Search.of(
                exact.solve(problem, target_bytes, minimize=minimize, time_limit=time_limit),
                auto="cpsat (offload)",
            )
        start = time.perf_counter()
        quick = _cut(problem, target_bytes, minimize, time_limit)
        if quick is not None and quick.status == "optimal":
            return Search.of(quick, auto="mincut")
        if _above(quick, self.enough) and minimize == "cost":
            return Search.of(quick, auto="mincut (its bound above what is enough)")
        remaining = max(0.1, time_limit - (time.perf_counter() - start))
        if not self.reduction:
            return Search.of(
                _CutThenCpSat(quick).solve(
                    problem, target_bytes, minimize=minimize, time_limit=remaining
                )
            )
        return _cpsat_or_cut(
            lambda: Reduced(_CutThenCpSat()).solve(
                problem, target_bytes, minimize=minimize, time_limit=remaining
            ),
            quick,
        )


S = TypeVar("S")


def asking(solver: S, enough: float) -> S:
    """``solver`` for a solve whose plan is of use only at a cost of at most ``enough``
    (:attr:`Auto.enough`): ``auto`` then spares the proof of an optimum its min-cut's
    bound puts above it; another solver as it is."""
    if not isinstance(solver, Auto):
        return solver
    told = copy.copy(solver)
    told.enough = enough
    return told


class _CutThenCpSat(SolverBase):
    """The min-cut (unless its plan is given as ``quick``), then CP-SAT warm-started from
    its plan unless the cut proved it."""

    name: ClassVar[str] = "auto"
    exact: ClassVar[bool] = True
    requires: ClassVar[str] = "ortools"
    check_plannable: ClassVar[bool] = False  # as Auto

    def __init__(self, quick: Solution | None = None) -> None:
        self.quick = quick

    def _search(self, request: Request) -> Search:
        problem, target_bytes, minimize, time_limit = request
        start = time.perf_counter()
        quick = self.quick
        if quick is None:
            quick = _cut(problem, target_bytes, minimize, time_limit)
            if quick is not None and quick.status == "optimal":
                return Search.of(quick, auto="mincut")
        remaining = max(0.1, time_limit - (time.perf_counter() - start))
        cpsat = CpSat(hint=quick.saved if quick is not None else None)
        return _cpsat_or_cut(
            lambda: cpsat.solve(problem, target_bytes, minimize=minimize, time_limit=remaining),
            quick,
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


def _above(quick: Solution | None, enough: float | None) -> bool:
    """Whether ``quick``'s proven bound puts every plan above the cost ``enough``."""
    return (
        enough is not None
        and quick is not None
        and quick.bound is not None
        and quick.bound > enough
    )


def _cpsat_or_cut(exact: Callable[[], Solution], quick: Solution | None) -> Search:
    """``exact()`` (CP-SAT), or the cut's plan when CP-SAT times out; the better of both."""
    try:
        sol = exact()
    except SolverTimeout:
        if quick is None:
            raise
        return Search.of(quick, auto="mincut (cpsat timed out)")
    best, how = _better(sol, quick)
    return Search.of(best, auto=how)


def _better(exact: Solution, quick: Solution | None) -> tuple[Solution, str]:
    """CP-SAT's plan when it is proven (or alone), else the better plan, better bound."""
    if exact.status == "optimal" or quick is None:
        return exact, exact.info.get("auto", "cpsat")  # type: ignore[return-value]
    best = exact if exact.objective <= quick.objective else quick
    bounds = [b for b in (exact.bound, quick.bound) if b is not None]
    best.bound = max(bounds) if bounds else None
    return best, "cpsat+mincut"
