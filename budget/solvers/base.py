"""The solver contract: every solver takes a Problem and a byte target, returns a Solution.

Solvers minimise recompute cost subject to saved bytes <= target (``minimize="cost"``),
or the saved bytes themselves (``minimize="bytes"``, used to find the smallest reachable
plan); ties go to fewer bytes (resp. less cost). ``status`` speaks of the primary
objective: "optimal" when it is proven; whether the tie-break was proven too is in
``info["tie_break"]``. A solver never returns a plan over the
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


class SolverBase:
    """Shared plumbing: a solver is available when the package it names is installed."""

    name: ClassVar[str]
    exact: ClassVar[bool]
    requires: ClassVar[str]  # pip package (and import name) of the backend

    @classmethod
    def available(cls) -> bool:
        import importlib.util

        return importlib.util.find_spec(cls.requires) is not None


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


@dataclass
class ClosureModel:
    """The closure ILP's rows, independent of any solver API (DESIGN.md).

    ``save``/``recompute``: nodes with an s/r variable; ``need``: nodes with s + r >= 1;
    ``closure``: (v, u) pairs, r_v <= s_u + r_u; ``store``: (v, g) pairs, y_g >= s_v.
    """

    save: list[int]
    recompute: list[int]
    need: list[int]
    closure: list[tuple[int, int]]
    store: list[tuple[int, int]]
    groups: list[int]


def closure_model(problem: Problem) -> ClosureModel:
    free = problem.is_input
    save = [v for v in range(problem.n) if not free[v] and problem.can_save[v]]
    recompute = [v for v in range(problem.n) if not free[v] and problem.can_recompute[v]]
    need = [v for v in range(problem.n) if problem.needed[v] and not free[v]]
    for v in need:
        if not problem.can_save[v] and not problem.can_recompute[v]:
            raise InfeasibleError(
                f"{problem.names[v]} is needed by the backward but can be neither saved "
                f"nor recomputed ({problem.reason[v]})"
            )
    rset = set(recompute)
    closure = sorted({(v, u) for u, v in problem.edges.tolist() if v in rset and not free[u]})
    store = [
        (v, int(problem.storage[v]))
        for v in save
        if problem.storage[v] >= 0 and problem.storage_bytes[problem.storage[v]] > 0
    ]
    return ClosureModel(save, recompute, need, closure, store, sorted({g for _, g in store}))


def finish(
    problem: Problem,
    saved: list[int],
    *,
    solver: str,
    target_bytes: int | None,
    minimize: Objective,
    optimal: bool,
    bound: float | None,
    start: float,
    info: dict[str, object],
) -> Solution:
    """Prune, verify in exact integers, and price a solver's saved set."""
    import time

    saved = problem.prune_unused(saved)
    errors = problem.check(saved)
    if errors:  # numerical trouble: never hand back an invalid plan
        raise RuntimeError(f"{solver} returned an invalid plan: {errors[:3]}")
    if target_bytes is not None and problem.saved_bytes(saved) > target_bytes:
        raise RuntimeError(f"{solver} returned a plan over its target (numerical tolerance)")
    closure = problem.recompute_closure(saved)
    objective = (
        float(problem.cost[closure].sum()) if minimize == "cost" else problem.saved_bytes(saved)
    )
    return Solution(
        saved=saved,
        status="optimal" if optimal else "feasible",
        objective=objective,
        bound=None if optimal else bound,
        seconds=time.perf_counter() - start,
        info=info,
    )
