"""The solver contract and template: every solver takes a Problem and a byte target and
returns a Solution.

Solvers minimise recompute cost subject to saved bytes <= target (``minimize="cost"``),
or the saved bytes themselves (``minimize="bytes"``, used to find the smallest reachable
plan); ties go to fewer bytes (resp. less cost). ``status`` speaks of the primary
objective: "optimal" when it is proven (where something may be offloaded: to within
``OffloadTerms.gap`` of the optimum's cost); whether the tie-break was proven too is in
``info["tie_break"]``. A solver never returns a plan over the
target: it returns an optimal or feasible plan, or raises :class:`InfeasibleError`.

The template. :meth:`SolverBase.solve` owns what every solver does around its search:
the clock, the infeasibility check (:meth:`Problem.require_plannable
<budget.core.problem.Problem.require_plannable>`, unless the class leaves it to its
search), and the final check and pricing (:func:`finish`: prune the plan, check it, refuse
one over the target, price the pruned plan). A solver implements only ``_search``, which
gets the :class:`Request` (what ``solve`` was asked) and returns a :class:`Search`: the
saved set, whether it is proven optimal, a bound, an info dict.

Words, each with one meaning in this package. A *solver* is a registered class (``name``,
:func:`budget.solvers.get_solver`) or an instance of one. A *backend* is the engine that
does a solver's search: what ``requires`` installs and ``Solution.info["backend"]`` names
(CP-SAT, CBC, SCIP or HiGHS through OR-Tools MathOpt, HiGHS from highspy, OR-Tools' max
flow; the heuristics' own Python and numpy code). A *model* is a problem written for a
backend: the closure rows and their MIP models (:mod:`budget.solvers.mip`), the cut
network (:mod:`budget.solvers.mincut`).
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Literal, NamedTuple, Protocol, TypeVar

import numpy as np

from ..core.problem import Problem
from ..errors import InfeasibleError, SolverTimeout

Objective = Literal["cost", "bytes"]

__all__ = [
    "InfeasibleError",
    "Objective",
    "Request",
    "Search",
    "Solution",
    "Solver",
    "SolverBase",
    "SolverTimeout",
    "cached_by_fingerprint",
    "finish",
    "fingerprint",
    "no_plan_in_time",
]


@dataclass
class Solution:
    saved: list[int]
    status: Literal["optimal", "feasible"]
    objective: float
    bound: float | None = None  # proven lower bound on the objective, when the solver gives one
    seconds: float = 0.0
    info: dict[str, object] = field(default_factory=dict)
    offloaded: list[int] = field(default_factory=list)  # of ``saved``, kept on the host

    @property
    def gap(self) -> float | None:
        if self.status == "optimal":
            return 0.0
        if self.bound is None:
            return None
        return max(0.0, self.objective - self.bound) / max(abs(self.objective), 1e-12)


class Request(NamedTuple):
    """What :meth:`Solver.solve` was asked, as a solver's ``_search`` gets it."""

    problem: Problem
    target_bytes: int | None
    minimize: Objective
    time_limit: float


@dataclass
class Search:
    """What a solver's search found, before :func:`finish` checks and prices it.

    ``saved``: the plan (pruned by :func:`finish`); ``offloaded``: those of ``saved`` kept
    on the host (solvers that plan offload, when ``Problem.offload`` is set); ``optimal``: proven optimal for the
    primary objective; ``bound``: a proven lower bound on it (dropped when optimal);
    ``info``: reported as ``Solution.info``; ``verify``: called with the finished
    Solution, to raise on anything else the solver promises of it (``Reduced``).
    """

    saved: list[int]
    optimal: bool
    bound: float | None = None
    info: dict[str, object] = field(default_factory=dict)
    verify: Callable[[Solution], None] | None = None
    offloaded: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, solution: Solution, **info: object) -> Search:
        """Another solver's finished Solution as a search result (``info`` added)."""
        return cls(
            solution.saved,
            solution.status == "optimal",
            solution.bound,
            {**solution.info, **info} if info else solution.info,
            offloaded=solution.offloaded,
        )


class Solver(Protocol):
    """The contract of the module docstring. :class:`SolverBase` implements it as a
    template; any object with these members may be given to ``get_solver``."""

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


class SolverBase:
    """The template of the module docstring; a solver is available when the package it
    names is installed.

    ``reduce``: whether :func:`budget.solvers.get_solver` wraps the solver in the problem
    reduction of :mod:`budget.solvers.reduce` (set where measured to help or be neutral).
    ``check_plannable``: whether :meth:`solve` runs :meth:`Problem.require_plannable`
    before the search; off for solvers whose search makes the check itself, differently
    (the min-cut, with its own message) or through another solver (auto, the reduction).
    ``plans_offload``: whether the search may offload (``Problem.offload``); a problem
    that offers offload is refused by the others rather than planned without it.
    """

    name: ClassVar[str]
    exact: ClassVar[bool]
    requires: ClassVar[str]  # pip package (and import name) of the backend
    reduce: ClassVar[bool] = False
    check_plannable: ClassVar[bool] = True
    plans_offload: ClassVar[bool] = False

    @classmethod
    def available(cls) -> bool:
        import importlib.util

        return importlib.util.find_spec(cls.requires) is not None

    def solve(
        self,
        problem: Problem,
        target_bytes: int | None,
        *,
        minimize: Objective = "cost",
        time_limit: float = 60.0,
    ) -> Solution:
        start = time.perf_counter()
        if problem.offload is not None and not self.plans_offload:
            raise ValueError(
                f"solver {self.name!r} does not plan offload; solvers that do: "
                f"{', '.join(offload_solvers())}"
            )
        if self.check_plannable:
            problem.require_plannable()
        request = Request(problem, target_bytes, minimize, time_limit)
        return finish(request, self._search(request), solver=self.name, start=start)

    def _search(self, request: Request) -> Search:
        """The plan for ``request.problem`` (see the module docstring); raises
        :class:`InfeasibleError` when none fits, :class:`SolverTimeout` when none was
        found in ``request.time_limit`` seconds."""
        raise NotImplementedError


def finish(request: Request, found: Search, *, solver: str, start: float) -> Solution:
    """Prune, verify in exact integers, and price a solver's saved set (the recompute cost
    plus the offload cost; device bytes)."""
    problem, target_bytes, minimize, _ = request
    saved = problem.prune_unused(found.saved)
    kept = set(saved)
    # an offload of a storage another saved value keeps on the device frees nothing:
    # dropped, as torch's pass would free the storage under the other value
    offloaded = problem.freeing(saved, (v for v in found.offloaded if v in kept))
    errors = problem.check(saved, offloaded)
    if errors:  # numerical trouble: never hand back an invalid plan
        raise RuntimeError(f"{solver} returned an invalid plan: {errors[:3]}")
    device = problem.saved_bytes(saved, offloaded)
    if target_bytes is not None and device > target_bytes:
        raise RuntimeError(f"{solver} returned a plan over its target (numerical tolerance)")
    objective = (
        problem.recompute_cost(saved) + problem.offload_cost(offloaded)
        if minimize == "cost"
        else device
    )
    solution = Solution(
        saved=saved,
        status="optimal" if found.optimal else "feasible",
        objective=objective,
        bound=None if found.optimal else found.bound,
        seconds=time.perf_counter() - start,
        info=found.info,
        offloaded=offloaded,
    )
    if found.verify is not None:
        found.verify(solution)
    return solution


# ---- the registry (budget.solvers.get_solver reads it) ------------------------------------

_SOLVERS: dict[str, type] = {}


def register_solver(cls: type) -> type:
    if cls.name in _SOLVERS:
        raise ValueError(f"solver {cls.name!r} is already registered")
    _SOLVERS[cls.name] = cls
    return cls


def offload_solvers() -> list[str]:
    """The registered solvers that plan offload."""
    return sorted(name for name, cls in _SOLVERS.items() if getattr(cls, "plans_offload", False))


def no_plan_in_time(solver: str, time_limit: float, problem: Problem) -> SolverTimeout:
    """The error of a solver that found no plan in time (the caller says where the time
    limit is set)."""
    return SolverTimeout(
        f"{solver} found no plan within {time_limit:.0f}s for a problem of {problem.n} "
        "nodes; raise the time limit"
    )


# ---- caches keyed on a problem's content --------------------------------------------------


def fingerprint(p: Problem) -> bytes:
    """A digest of everything a solver reads from a Problem (caches key on it)."""
    h = hashlib.blake2b(digest_size=20)
    for a in (
        p.is_input,
        p.needed,
        p.can_save,
        p.can_recompute,
        p.storage,
        p.storage_bytes,
        p.cost,
        p.edges,
    ):
        arr = np.ascontiguousarray(a)
        h.update(str((arr.dtype, arr.shape)).encode())
        h.update(arr.tobytes())
    if p.offload is not None:
        o = p.offload
        h.update(np.ascontiguousarray(o.transfer).tobytes())
        h.update(np.ascontiguousarray(o.tail).tobytes())
        h.update(str((o.forward_window, o.backward_window)).encode())
    h.update("\0".join(p.names).encode())
    h.update("\0".join(p.reason).encode())
    return h.digest()


_T = TypeVar("_T")


def cached_by_fingerprint(
    cache: OrderedDict[bytes, _T], problem: Problem, build: Callable[[Problem], _T], size: int = 4
) -> _T:
    """``build(problem)``, kept in ``cache`` (the ``size`` most recently used, keyed on
    :func:`fingerprint`) so the ends and every budget of a sweep share one."""
    key = fingerprint(problem)
    hit = cache.get(key)
    if hit is not None:
        cache.move_to_end(key)
        return hit
    hit = cache[key] = build(problem)
    while len(cache) > size:
        cache.popitem(last=False)
    return hit
