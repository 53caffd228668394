"""Solver registry: name -> solver class, with lazy backend imports.

``register_solver`` adds a class; ``get_solver(name)`` returns an instance or raises a
ValueError that lists every registered solver and what a missing backend needs.
"""

from __future__ import annotations

from collections.abc import Callable

from .base import InfeasibleError, Solution, Solver, SolverTimeout

_SOLVERS: dict[str, type] = {}


def register_solver(cls: type) -> type:
    if cls.name in _SOLVERS:
        raise ValueError(f"solver {cls.name!r} is already registered")
    _SOLVERS[cls.name] = cls
    return cls


def available_solvers() -> list[str]:
    return [name for name, cls in sorted(_SOLVERS.items()) if cls.available()]


def get_solver(name: str | Solver) -> Solver:
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
    return cls()


def _register_builtins(register: Callable[[type], type]) -> None:
    from .auto import Auto
    from .cpsat import CpSat
    from .dp import DpKnapsack
    from .greedy import Greedy
    from .ilp import PulpILP
    from .mincut import MinCutSolver

    register(Auto)
    register(PulpILP)
    register(CpSat)
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
