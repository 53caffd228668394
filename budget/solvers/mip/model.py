"""The closure model of DESIGN.md ("The optimisation, exactly") for the MIP backends.

:class:`ClosureModel` holds its rows independent of any API (``cpsat`` and the PuLP
model of ``ilp`` build from it), :class:`MipWeights` its objectives and memory row in
exact integer units, :class:`ClosureMatrix` the same rows as CSR arrays for the APIs that
take a matrix (``highs``, ``mip``). The lexicographic driver that solves them is in
:mod:`budget.solvers.mip.driver`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...core.problem import Problem
from ..base import Objective


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
    """The rows of ``problem``'s closure ILP (its feasibility is checked by the solver
    template before, :meth:`Problem.require_plannable`)."""
    free = problem.is_input
    save = [v for v in range(problem.n) if not free[v] and problem.can_save[v]]
    recompute = [v for v in range(problem.n) if not free[v] and problem.can_recompute[v]]
    need = [v for v in range(problem.n) if problem.needed[v] and not free[v]]
    rset = set(recompute)
    closure = sorted({(v, u) for u, v in problem.edges.tolist() if v in rset and not free[u]})
    store = [
        (v, int(problem.storage[v]))
        for v in save
        if problem.storage[v] >= 0 and problem.storage_bytes[problem.storage[v]] > 0
    ]
    return ClosureModel(save, recompute, need, closure, store, sorted({g for _, g in store}))


_MAX_UNITS = 10**9


def unit_scale(problem: Problem) -> float:
    """Integer objective units per cost unit: 1 when every cost is an integer of at most
    1e9 and nothing may be offloaded (exact), otherwise 1e9 over the largest cost or
    offload term (a relative error below 1e-9 per term)."""
    terms = [problem.cost]
    if problem.offload is not None:
        ok = problem.offload.offloadable
        terms += [problem.offload.transfer[ok], problem.offload.tail[ok]]
    top = max((float(t.max()) for t in terms if t.size), default=0.0)
    exact = bool(np.all(problem.cost == np.round(problem.cost)))
    if problem.offload is None and top <= _MAX_UNITS and exact:
        return 1.0
    return _MAX_UNITS / top if top > 0 else 1.0


def integer_costs(problem: Problem) -> np.ndarray:
    """Recompute costs as int64 objective units (:func:`unit_scale`)."""
    return np.round(problem.cost * unit_scale(problem)).astype(np.int64)


@dataclass
class OffloadUnits:
    """The offload terms (:mod:`budget.core.offload`) in integer objective units, for
    the offloadable nodes with a save variable."""

    transfer: dict[int, int]
    tail: dict[int, int]
    forward_window: int
    backward_window: int


def offload_units(problem: Problem, m: ClosureModel) -> OffloadUnits | None:
    o = problem.offload
    if o is None:
        return None
    k = unit_scale(problem)
    nodes = [v for v in m.save if o.offloadable[v]]
    return OffloadUnits(
        transfer={v: int(round(o.transfer[v] * k)) for v in nodes},
        tail={v: int(round(o.tail[v] * k)) for v in nodes},
        forward_window=int(round(o.forward_window * k)),
        backward_window=int(round(o.backward_window * k)),
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


def mip_weights(problem: Problem, m: ClosureModel, target_bytes: int | None) -> MipWeights:
    w = integer_costs(problem)
    top = float(problem.cost.max()) if problem.n else 0.0
    exact = bool(
        problem.n == 0 or top <= _MAX_UNITS and np.all(problem.cost == np.round(problem.cost))
    )
    g = math.gcd(*w[w > 0].tolist()) if np.any(w > 0) else 1
    cost_unit = float(g) if exact else g * top / _MAX_UNITS
    sizes = {gr: int(problem.storage_bytes[gr]) for gr in m.groups}
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

    Binary columns: ``s`` for ``ClosureModel.save``, then ``r`` for its ``recompute``, then
    ``y`` for its ``groups`` (``s_col``/``r_col``/``y_col`` map node or storage ids to
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


def closure_matrix(problem: Problem, m: ClosureModel, weights: MipWeights) -> ClosureMatrix:
    s_col = {v: i for i, v in enumerate(m.save)}
    r_col = {v: len(s_col) + i for i, v in enumerate(m.recompute)}
    y_col = {g: len(s_col) + len(r_col) + i for i, g in enumerate(m.groups)}
    num_cols = len(s_col) + len(r_col) + len(y_col)
    rows: list[list[tuple[int, float]]] = []
    lower: list[float] = []
    upper: list[float] = []
    for v in m.need:  # s_v + r_v >= 1
        rows.append([(c[v], 1.0) for c in (s_col, r_col) if v in c])
        lower.append(1.0)
        upper.append(np.inf)
    for v, u in m.closure:  # s_u + r_u - r_v >= 0
        rows.append([(r_col[v], -1.0)] + [(c[u], 1.0) for c in (s_col, r_col) if u in c])
        lower.append(0.0)
        upper.append(np.inf)
    for v, g in m.store:  # y_g - s_v >= 0
        rows.append([(y_col[g], 1.0), (s_col[v], -1.0)])
        lower.append(0.0)
        upper.append(np.inf)
    if weights.capacity is not None:
        rows.append([(y_col[g], float(weights.size[g])) for g in m.groups])
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
