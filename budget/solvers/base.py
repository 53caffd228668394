"""The solver contract: every solver takes a Problem and a byte target, returns a Solution.

Solvers minimise recompute cost subject to saved bytes <= target (``minimize="cost"``),
or the saved bytes themselves (``minimize="bytes"``, used to find the smallest reachable
plan); ties go to fewer bytes (resp. less cost). ``status`` speaks of the primary
objective: "optimal" when it is proven; whether the tie-break was proven too is in
``info["tie_break"]``. A solver never returns a plan over the
target: it returns an optimal or feasible plan, or raises :class:`InfeasibleError`.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Literal, Protocol, TypeVar

import numpy as np

from ..core.problem import Problem
from ..errors import InfeasibleError, SolverTimeout

Objective = Literal["cost", "bytes"]


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
    """Shared plumbing: a solver is available when the package it names is installed.

    ``reduce``: whether :func:`budget.solvers.get_solver` wraps the solver in the problem
    reduction of :mod:`budget.solvers.reduce` (set where measured to help or be neutral).
    """

    name: ClassVar[str]
    exact: ClassVar[bool]
    requires: ClassVar[str]  # pip package (and import name) of the backend
    reduce: ClassVar[bool] = False

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


# ---- MIP backends (ilp, highs, mip) ----------------------------------------------------------

_MAX_UNITS = 10**9


def integer_costs(problem: Problem) -> np.ndarray:
    """Costs as int64, exact when they are already integers of moderate size (<= 1e9),
    otherwise rounded so the largest is 1e9 (a relative error below 1e-9 per cost)."""
    cost = problem.cost
    top = float(cost.max()) if problem.n else 0.0
    if top <= _MAX_UNITS and np.all(cost == np.round(cost)):
        return cost.astype(np.int64)
    return (
        np.round(cost * (_MAX_UNITS / top)).astype(np.int64)
        if top > 0
        else np.zeros(problem.n, np.int64)
    )


@dataclass
class MipWeights:
    """Integer objective and memory coefficients for the MIP backends.

    Costs are :func:`integer_costs` divided by their gcd, bytes are storage bytes divided
    by theirs, so distinct plans differ by at least one unit in either objective. That
    makes exactness checkable with floating-point solvers: an absolute gap below one unit
    proves the optimum, and a tie-break may fix the first objective at ``value + 0.5``
    units without admitting a worse plan. The memory row is exact too:
    ``sum bytes * y <= target`` is ``sum units * y <= target // byte_unit`` for integer y.
    """

    cost: np.ndarray  # int64[n]: recompute cost units (0 for inputs)
    size: dict[int, int]  # storage -> byte units, for storages with bytes
    cost_unit: float  # problem cost of one unit (exact when ``cost_exact``)
    byte_unit: int
    cost_exact: bool
    capacity: int | None  # the memory row's right-hand side in byte units

    def value(self, problem: Problem, saved: list[int], which: Objective) -> int:
        """The plan's objective in units, exactly (its recompute closure, its storages)."""
        if which == "cost":
            return int(self.cost[problem.recompute_closure(saved)].sum())
        return problem.saved_bytes(saved) // self.byte_unit

    def unscale(self, units: float | None, which: Objective) -> float | None:
        if units is None or not math.isfinite(units):
            return None
        return float(units) * (self.cost_unit if which == "cost" else self.byte_unit)


def mip_weights(problem: Problem, model: ClosureModel, target_bytes: int | None) -> MipWeights:
    w = integer_costs(problem)
    top = float(problem.cost.max()) if problem.n else 0.0
    exact = bool(
        problem.n == 0 or top <= _MAX_UNITS and np.all(problem.cost == np.round(problem.cost))
    )
    g = math.gcd(*w[w > 0].tolist()) if np.any(w > 0) else 1
    cost_unit = float(g) if exact else g * top / _MAX_UNITS
    sizes = {gr: int(problem.storage_bytes[gr]) for gr in model.groups}
    b = math.gcd(*sizes.values()) if sizes else 1
    b = max(b, 1)
    return MipWeights(
        cost=w // g,
        size={gr: x // b for gr, x in sizes.items()},
        cost_unit=cost_unit,
        byte_unit=b,
        cost_exact=exact,
        capacity=None if target_bytes is None else int(target_bytes) // b,
    )


@dataclass
class ClosureMatrix:
    """The closure ILP as arrays, for MIP APIs that take a matrix (``highs``, ``mip``).

    Binary columns: ``s`` for ``model.save``, then ``r`` for ``model.recompute``, then
    ``y`` for ``model.groups`` (``s_col``/``r_col``/``y_col`` map node or storage ids to
    columns). Rows ``row_lower <= A x <= row_upper`` in CSR form (``start``, ``index``,
    ``value``): the need, closure, storage and memory rows of :class:`ClosureModel`, and
    any cap rows added by :meth:`cap`. ``objective[which]``: dense coefficients in units.
    """

    s_col: dict[int, int]
    r_col: dict[int, int]
    y_col: dict[int, int]
    num_cols: int
    start: np.ndarray  # int64[rows + 1]
    index: np.ndarray  # int32[nnz]
    value: np.ndarray  # float64[nnz]
    row_lower: np.ndarray
    row_upper: np.ndarray
    objective: dict[str, np.ndarray]

    def cap(self, which: Objective, units: int) -> None:
        """Append the row: objective ``which`` <= ``units`` + 0.5 (exact in integer units)."""
        c = self.objective[which]
        cols = np.flatnonzero(c)
        self.start = np.append(self.start, self.start[-1] + len(cols))
        self.index = np.concatenate([self.index, cols.astype(np.int32)])
        self.value = np.concatenate([self.value, c[cols]])
        self.row_lower = np.append(self.row_lower, -np.inf)
        self.row_upper = np.append(self.row_upper, units + 0.5)

    def point(self, problem: Problem, saved: list[int]) -> np.ndarray:
        """The column values of a plan: its saves, its recompute closure, its storages."""
        x = np.zeros(self.num_cols)
        kept = set(saved)
        for v in kept:
            if v in self.s_col:
                x[self.s_col[v]] = 1.0
        for v in problem.recompute_closure(kept):
            if v in self.r_col:
                x[self.r_col[v]] = 1.0
        for v in kept:
            g = int(problem.storage[v])
            if g in self.y_col:
                x[self.y_col[g]] = 1.0
        return x

    def saved(self, x: np.ndarray) -> list[int]:
        return sorted(v for v, c in self.s_col.items() if x[c] > 0.5)

    def weighted(self, objective: dict[Objective, float]) -> np.ndarray:
        return sum((w * self.objective[k] for k, w in objective.items()), np.zeros(self.num_cols))


def closure_matrix(problem: Problem, model: ClosureModel, weights: MipWeights) -> ClosureMatrix:
    s_col = {v: i for i, v in enumerate(model.save)}
    r_col = {v: len(s_col) + i for i, v in enumerate(model.recompute)}
    y_col = {g: len(s_col) + len(r_col) + i for i, g in enumerate(model.groups)}
    num_cols = len(s_col) + len(r_col) + len(y_col)
    rows: list[list[tuple[int, float]]] = []
    lower: list[float] = []
    upper: list[float] = []
    for v in model.need:  # s_v + r_v >= 1
        rows.append([(c[v], 1.0) for c in (s_col, r_col) if v in c])
        lower.append(1.0)
        upper.append(np.inf)
    for v, u in model.closure:  # s_u + r_u - r_v >= 0
        rows.append([(r_col[v], -1.0)] + [(c[u], 1.0) for c in (s_col, r_col) if u in c])
        lower.append(0.0)
        upper.append(np.inf)
    for v, g in model.store:  # y_g - s_v >= 0
        rows.append([(y_col[g], 1.0), (s_col[v], -1.0)])
        lower.append(0.0)
        upper.append(np.inf)
    if weights.capacity is not None:
        rows.append([(y_col[g], float(weights.size[g])) for g in model.groups])
        lower.append(-np.inf)
        upper.append(float(weights.capacity))
    start = np.zeros(len(rows) + 1, np.int64)
    start[1:] = np.cumsum([len(r) for r in rows])
    flat = [e for r in rows for e in r]
    cost = np.zeros(num_cols)
    for v, c in r_col.items():
        cost[c] = float(weights.cost[v])
    size = np.zeros(num_cols)
    for g, c in y_col.items():
        size[c] = float(weights.size[g])
    return ClosureMatrix(
        s_col=s_col,
        r_col=r_col,
        y_col=y_col,
        num_cols=num_cols,
        start=start,
        index=np.asarray([c for c, _ in flat], np.int32),
        value=np.asarray([x for _, x in flat], np.float64),
        row_lower=np.asarray(lower, np.float64),
        row_upper=np.asarray(upper, np.float64),
        objective={"cost": cost, "bytes": size},
    )


@dataclass
class MipResult:
    """One MIP solve: ``status`` optimal | feasible | infeasible | none (no plan found in
    time); ``saved`` the nodes whose s is 1; ``bound`` the solver's dual bound in units."""

    status: Literal["optimal", "feasible", "infeasible", "none"]
    saved: list[int]
    bound: float | None = None


class MipBackend(Protocol):
    """A built closure model in some MIP API (see ``ilp``, ``highs``, ``mip``)."""

    def minimize(
        self, objective: dict[Objective, float], time_limit: float, hint: list[int] | None
    ) -> MipResult:
        """Minimise ``sum(weight * objective)`` over the cost and bytes objectives (in
        units), warm-started from the plan ``hint`` where the API takes one."""
        ...

    def cap(self, which: Objective, units: int) -> None:
        """Add the row: objective ``which`` <= ``units`` (+ half a unit of tolerance)."""
        ...


def solve_lexicographic(
    problem: Problem,
    backend: MipBackend,
    weights: MipWeights,
    *,
    solver: str,
    target_bytes: int | None,
    minimize: Objective,
    time_limit: float,
    start: float,
    info: dict[str, object],
    one_solve: bool = True,
) -> Solution:
    """The lexicographic solve shared by the MIP backends (first ``minimize``, then the
    other objective).

    In integer units both objectives are bounded, so one solve of ``first * M + second``
    with ``M`` above the largest possible ``second`` is exactly lexicographic; it is used
    when its largest coefficient stays below 1e9 (numerically as safe as the objectives
    alone; always so on the bench graphs). Otherwise two solves: the first objective,
    then (when it is proven and time is left) the other with the first capped at its
    optimum (``one_solve=False`` forces this: CBC proves the weighted objective of the
    reduced GPT-24 at b=0.5 in no time limit, the two stages in 0.5 s; SCIP and HiGHS
    are fastest with one solve). Every value compared is recomputed exactly from the plans (``MipWeights.value``), so
    solver tolerances can never trade a unit of the first objective for the second.
    """
    first: Objective = minimize
    second: Objective = "bytes" if minimize == "cost" else "cost"
    totals = {"cost": int(weights.cost.sum()), "bytes": sum(weights.size.values())}
    top = {
        "cost": int(weights.cost.max()) if len(weights.cost) else 0,
        "bytes": max(weights.size.values(), default=0),
    }
    scale = totals[second] + 1
    single = one_solve and scale * top[first] + top[second] <= _MAX_UNITS
    objective = {first: float(scale), second: 1.0} if single else {first: 1.0}
    res = backend.minimize(objective, time_limit, None)
    if res.status == "infeasible":
        raise InfeasibleError(f"no plan saves at most {target_bytes} bytes")
    if res.status == "none":
        raise SolverTimeout(
            f"{solver} found no plan within {time_limit:.0f}s for a problem of {problem.n} "
            "nodes; raise budget.config.time_limit"
        )
    saved = problem.prune_unused(res.saved)
    bound = res.bound
    if single:
        tie_break = "optimal" if res.status == "optimal" else "not proven"
        if bound is not None:  # first >= (bound - second) / scale for every plan
            bound = max(0.0, (bound - totals[second]) / scale)
    else:
        tie_break = "not run"
        remaining = time_limit - (time.perf_counter() - start)
        if res.status == "optimal" and remaining > 0:
            best = weights.value(problem, saved, first)
            backend.cap(first, best)
            res2 = backend.minimize({second: 1.0}, remaining, saved)
            if res2.status in ("optimal", "feasible"):
                other = problem.prune_unused(res2.saved)
                if not problem.check(other) and (
                    weights.value(problem, other, first) <= best
                    and weights.value(problem, other, second)
                    < weights.value(problem, saved, second)
                    and (target_bytes is None or problem.saved_bytes(other) <= target_bytes)
                ):
                    saved = other
            tie_break = "optimal" if res2.status == "optimal" else "not proven"
    return finish(
        problem,
        saved,
        solver=solver,
        target_bytes=target_bytes,
        minimize=minimize,
        optimal=res.status == "optimal",
        bound=weights.unscale(bound, first),
        start=start,
        info={**info, "tie_break": tie_break, "lexicographic": "one solve" if single else "two"},
    )


class MipSolver(SolverBase):
    """A MIP backend as a solver: the closure model in integer units, a backend built on
    it (:meth:`build`), then :func:`solve_lexicographic` (``ilp``, ``highs``, ``mip``)."""

    exact: ClassVar[bool] = True
    reduce: ClassVar[bool] = True  # measured: 2-6x faster on the bench graphs
    one_solve: ClassVar[bool] = True  # see solve_lexicographic

    def build(
        self, problem: Problem, model: ClosureModel, weights: MipWeights
    ) -> tuple[MipBackend, dict[str, object]]:
        """The built model, and the ``info`` to report (backend name, variables)."""
        raise NotImplementedError

    def solve(
        self,
        problem: Problem,
        target_bytes: int | None,
        *,
        minimize: Objective = "cost",
        time_limit: float = 60.0,
    ) -> Solution:
        start = time.perf_counter()
        model = closure_model(problem)
        weights = mip_weights(problem, model, target_bytes)
        backend, info = self.build(problem, model, weights)
        return solve_lexicographic(
            problem,
            backend,
            weights,
            solver=self.name,
            target_bytes=target_bytes,
            minimize=minimize,
            time_limit=time_limit - (time.perf_counter() - start),
            start=start,
            info=info,
            one_solve=self.one_solve,
        )
