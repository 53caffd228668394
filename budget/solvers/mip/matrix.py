"""The closure model (:mod:`budget.solvers.mip.model`) as CSR arrays, for the MIP APIs that
take a matrix (``highs``, ``mip``): columns with their bounds and types, the rows, and
the objectives in :class:`~budget.solvers.mip.model.MipWeights`' integer units.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from ...core.problem import Problem
from .model import ClosureModel, MipObjective, MipWeights, OffloadUnits


@dataclass
class ClosureMatrix:
    """The closure ILP as arrays, for MIP APIs that take a matrix (``highs``, ``mip``).

    Columns: ``s`` for ``ClosureModel.save``, then ``r`` for its ``recompute``, then ``y``
    for its ``groups``, then ``o`` for its ``offload`` and, with offload, the two exposure
    columns ``e`` (``s_col``/``r_col``/``y_col``/``o_col`` map node or storage ids to
    columns, ``e_col`` lists the exposures). Every column is ``0 <= x <= col_upper``,
    integer where ``integer`` (s, r, y, o: binary) and continuous elsewhere (e: at an
    optimum it equals ``max(0, link - window)``, an integer, so the exactness argument
    of :class:`MipWeights` holds). Rows ``row_lower <= A x <= row_upper`` in CSR form
    (``start``, ``index``, ``value``): the need, closure, storage, offload and memory rows
    of :class:`ClosureModel`, and any cap rows added by :meth:`cap`.
    ``objective[which]``: dense coefficients in units.
    """

    s_col: dict[int, int]
    r_col: dict[int, int]
    y_col: dict[int, int]
    o_col: dict[int, int]
    e_col: list[int]
    num_cols: int
    col_upper: np.ndarray  # float64[num_cols]
    integer: np.ndarray  # bool[num_cols]
    offload: OffloadUnits | None  # the weights' offload units, with columns (:meth:`point`)
    objective: dict[str, np.ndarray] = field(default_factory=dict)
    start: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))  # int64[rows + 1]
    index: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # int32[nnz]
    value: np.ndarray = field(default_factory=lambda: np.zeros(0))  # float64[nnz]
    row_lower: np.ndarray = field(default_factory=lambda: np.zeros(0))
    row_upper: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def cap(self, which: MipObjective, units: int) -> None:
        """Append the row: objective ``which`` <= ``units`` + 0.5 (exact in integer units)."""
        c = self.objective[which]
        cols = np.flatnonzero(c)
        self.start = np.append(self.start, self.start[-1] + len(cols))
        self.index = np.concatenate([self.index, cols.astype(np.int32)])
        self.value = np.concatenate([self.value, c[cols]])
        self.row_lower = np.append(self.row_lower, -np.inf)
        self.row_upper = np.append(self.row_upper, units + 0.5)

    def point(
        self, problem: Problem, saved: list[int], offloaded: Iterable[int] = ()
    ) -> np.ndarray:
        """The column values of a plan: its saves, its recompute closure, its device
        storages, its offloads and their exposures."""
        x = np.zeros(self.num_cols)
        kept, away = set(saved), set(offloaded)
        for v in kept:
            if v in self.s_col:
                x[self.s_col[v]] = 1.0
        for v in problem.recompute_closure(kept):
            if v in self.r_col:
                x[self.r_col[v]] = 1.0
        for v in kept - away:
            g = int(problem.storage[v])
            if g in self.y_col:
                x[self.y_col[g]] = 1.0
        for v in away:
            x[self.o_col[v]] = 1.0
        if self.offload is not None and self.e_col:
            x[self.e_col] = self.offload.exposures(away)
        return x

    def saved(self, x: np.ndarray) -> list[int]:
        return sorted(v for v, c in self.s_col.items() if x[c] > 0.5)

    def offloaded(self, x: np.ndarray) -> list[int]:
        return sorted(v for v, c in self.o_col.items() if x[c] > 0.5)

    def weighted(self, objective: dict[MipObjective, float]) -> np.ndarray:
        return sum((w * self.objective[k] for k, w in objective.items()), np.zeros(self.num_cols))


class _Rows:
    """CSR rows under construction: ``lower <= sum(coefficient * column) <= upper``."""

    def __init__(self) -> None:
        self.rows: list[list[tuple[int, float]]] = []
        self.lower: list[float] = []
        self.upper: list[float] = []

    def add(self, entries: list[tuple[int, float]], lower: float, upper: float) -> None:
        self.rows.append(entries)
        self.lower.append(lower)
        self.upper.append(upper)


def _closure_rows(m: ClosureModel, weights: MipWeights, cols: ClosureMatrix) -> _Rows:
    """The need, closure, storage, offload and memory rows over ``cols``' columns."""
    s_col, r_col, y_col, o_col = cols.s_col, cols.r_col, cols.y_col, cols.o_col
    rows = _Rows()
    for v in m.need:  # s_v + r_v >= 1
        rows.add([(c[v], 1.0) for c in (s_col, r_col) if v in c], 1.0, np.inf)
    for v, u in m.closure:  # s_u + r_u - r_v >= 0
        rows.add([(r_col[v], -1.0)] + [(c[u], 1.0) for c in (s_col, r_col) if u in c], 0.0, np.inf)
    for v, g in m.store:  # y_g - s_v >= 0, or y_g + o_v - s_v >= 0 where v may be offloaded
        away = [(o_col[v], 1.0)] if v in o_col else []
        rows.add([(y_col[g], 1.0), (s_col[v], -1.0), *away], 0.0, np.inf)
    _offload_rows(rows, weights, cols)
    if weights.capacity is not None:
        rows.add([(y_col[g], float(weights.size[g])) for g in m.groups], -np.inf, weights.capacity)
    return rows


def _offload_rows(rows: _Rows, weights: MipWeights, cols: ClosureMatrix) -> None:
    """o_v - s_v <= 0, and per window: e - sum(transfer * o) >= -window."""
    units = weights.offload
    for v, c in cols.o_col.items():
        rows.add([(c, 1.0), (cols.s_col[v], -1.0)], -np.inf, 0.0)
    if units is None or not cols.e_col:
        return
    link = [(cols.o_col[v], -float(t)) for v, t in units.transfer.items() if t]
    for e, window in zip(cols.e_col, units.windows, strict=True):
        rows.add([(e, 1.0), *link], -float(window), np.inf)


def _columns(m: ClosureModel, weights: MipWeights) -> ClosureMatrix:
    """The matrix's columns, bounds and objectives (no rows yet)."""
    parts = (m.save, m.recompute, m.groups, m.offload)
    first = np.cumsum([0, *(len(p) for p in parts)]).tolist()
    s_col, r_col, y_col, o_col = (
        {v: first[k] + i for i, v in enumerate(p)} for k, p in enumerate(parts)
    )
    units = weights.offload if weights.offloads else None
    e_col = [first[-1], first[-1] + 1] if units is not None else []
    num_cols = first[-1] + len(e_col)
    upper = np.ones(num_cols)
    if units is not None:
        total = sum(units.transfer.values())
        upper[e_col] = [max(0, total - w) for w in units.windows]
    integer = np.ones(num_cols, bool)
    integer[e_col] = False
    cols = ClosureMatrix(
        s_col=s_col,
        r_col=r_col,
        y_col=y_col,
        o_col=o_col,
        e_col=e_col,
        num_cols=num_cols,
        col_upper=upper,
        integer=integer,
        offload=units,
    )
    cols.objective = _objectives(weights, cols)
    return cols


def _objectives(weights: MipWeights, cols: ClosureMatrix) -> dict[str, np.ndarray]:
    """Dense cost (recompute, tails, exposures), bytes (device) and host objectives."""
    cost, size, host = (np.zeros(cols.num_cols) for _ in range(3))
    for v, c in cols.r_col.items():
        cost[c] = float(weights.cost[v])
    for g, c in cols.y_col.items():
        size[c] = float(weights.size[g])
    if cols.offload is not None:
        for v, c in cols.o_col.items():
            cost[c] = float(cols.offload.tail[v])
            host[c] = float(weights.host[v])
        cost[cols.e_col] = 1.0
    return {"cost": cost, "bytes": size, "host": host}


def closure_matrix(problem: Problem, m: ClosureModel, weights: MipWeights) -> ClosureMatrix:
    """``problem``'s closure ILP (:class:`ClosureModel` in the units of ``weights``) as
    arrays."""
    cols = _columns(m, weights)
    rows = _closure_rows(m, weights, cols)
    cols.start = np.zeros(len(rows.rows) + 1, np.int64)
    cols.start[1:] = np.cumsum([len(r) for r in rows.rows])
    flat = [e for r in rows.rows for e in r]
    cols.index = np.asarray([c for c, _ in flat], np.int32)
    cols.value = np.asarray([x for _, x in flat], np.float64)
    cols.row_lower = np.asarray(rows.lower, np.float64)
    cols.row_upper = np.asarray(rows.upper, np.float64)
    return cols
