"""Solver registry: name -> solver class, with lazy backend imports.

``register_solver`` adds a class; ``get_solver(name)`` returns an instance or raises a
ValueError that lists every registered solver and what a missing backend needs. Exact
solvers come wrapped in the problem reduction (:mod:`.reduce`: same optimum, smaller
problem) where it was measured to help; ``get_solver(name, reduce=False)`` or
``BUDGET_REDUCE=0`` gives them unreduced.

Exact: ``auto`` (min-cut, then CP-SAT), ``cpsat`` (OR-Tools CP-SAT), ``mip`` (OR-Tools
MathOpt with SCIP), ``ilp`` (PuLP + CBC), ``highs`` (HiGHS from highspy, in a worker
process). Not exact: ``mincut``, ``greedy``, ``dp``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .base import _SOLVERS, InfeasibleError, Solution, Solver, SolverTimeout, register_solver


def available_solvers() -> list[str]:
    return [name for name, cls in sorted(_SOLVERS.items()) if cls.available()]


def get_solver(name: str | Solver, *, reduce: bool | None = None) -> Solver:
    """The solver called ``name``, wrapped in the problem reduction (:mod:`.reduce`) when
    its class sets ``reduce`` (by measurement) or ``reduce=True``; ``reduce=False``, or the
    environment variable ``BUDGET_REDUCE=0`` when ``reduce`` is not given, turns it off
    (for tests and debugging). A solver instance is returned as it is."""
    if not isinstance(name, str):
        return name
    cls = _SOLVERS.get(name)
    if cls is None:
        raise ValueError(
            f"unknown solver {name!r}; available: {', '.join(available_solvers()) or 'none'}"
        )
    if not cls.available():
        raise ValueError(
            f"solver {name!r} needs the package {cls.requires!r} (pip install {cls.requires}); "
            f"available: {', '.join(available_solvers()) or 'none'}"
        )
    solver = cls()
    if reduce is None:
        reduce = bool(getattr(cls, "reduce", False)) and os.environ.get("BUDGET_REDUCE") != "0"
    if getattr(cls, "reduces_inside", False):  # auto: reduces only what the cut leaves
        solver.reduction = reduce
        return solver
    if reduce:
        from .reduce import Reduced

        return Reduced(solver)
    return solver


def _register_builtins(register: Callable[[type], type]) -> None:
    from .auto import Auto
    from .heuristics.dp import DpKnapsack
    from .heuristics.greedy import Greedy
    from .mincut.solver import MinCutSolver
    from .mip.cpsat import CpSat
    from .mip.highs import HiGHS
    from .mip.mathopt import OrToolsMIP
    from .mip.pulp_cbc import PulpILP

    register(Auto)
    register(PulpILP)
    register(HiGHS)
    register(CpSat)
    register(OrToolsMIP)
    register(MinCutSolver)
    register(Greedy)
    register(DpKnapsack)


_register_builtins(register_solver)

__all__ = [
    "InfeasibleError",
    "Solution",
    "Solver",
    "SolverTimeout",
    "available_solvers",
    "get_solver",
    "register_solver",
]
