"""The solver contract: every solver takes a Problem and a byte target, returns a Solution.

Solvers minimise recompute cost subject to saved bytes <= target (``minimize="cost"``),
or the saved bytes themselves (``minimize="bytes"``, used to find the smallest reachable
plan); ties go to fewer bytes (resp. less cost). A solver never returns a plan over the
target: it returns an optimal or feasible plan, or raises :class:`InfeasibleError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal, Protocol

from ..problem import Problem

Objective = Literal["cost", "bytes"]


class InfeasibleError(ValueError):
    """No plan fits the target; ``min_bytes`` (when known) is the smallest reachable size."""

    def __init__(self, message: str, min_bytes: int | None = None) -> None:
        super().__init__(message)
        self.min_bytes = min_bytes


class SolverTimeout(RuntimeError):
    """The time limit passed before any plan was found."""


@dataclass
class Solution:
    saved: list[int]
    status: Literal["optimal", "feasible"]
    objective: float
    bound: float | None = None  # proven lower bound on the objective, when the solver gives one
    seconds: float = 0.0
    info: dict[str, object] = field(default_factory=dict)

    @property
    def gap(self) -> float | None:
        if self.status == "optimal":
            return 0.0
        if self.bound is None:
            return None
        return max(0.0, self.objective - self.bound) / max(abs(self.objective), 1e-12)


class Solver(Protocol):
    name: ClassVar[str]
    exact: ClassVar[bool]
    requires: ClassVar[str]  # pip package that provides the backend

    @classmethod
    def available(cls) -> bool: ...

    def solve(
        self,
        problem: Problem,
        target_bytes: int | None,
        *,
        minimize: Objective = "cost",
        time_limit: float = 60.0,
    ) -> Solution: ...
