"""The closure model of DESIGN.md ("The optimisation, exactly") for the MIP backends.

:class:`ClosureModel` holds its rows independent of any API (``cpsat`` and the PuLP
model of ``ilp`` build from it), :class:`MipWeights` its objectives and memory row in
exact integer units; :mod:`budget.solvers.mip.matrix` writes the same rows as CSR arrays
for the APIs that take a matrix (``highs``, ``mip``). The lexicographic driver that solves them is in
:mod:`budget.solvers.mip.driver`.

Offload (:mod:`budget.core.offload`), where the problem prices it: a binary ``o_v`` per
offloadable saved node keeps its value on the host (``o_v <= s_v``; its storage row
becomes ``y_g >= s_v - o_v``), and two non-negative exposure columns ``e >= link -
window`` (``link`` the offloaded transfer units, one per pass's window) carry the link
time that compute does not hide. The cost objective gains ``sum(tail * o) + e_f + e_b``
and a third objective, ``"host"``, counts the host bytes (the last tie-break).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ...core.problem import Problem

MipObjective = Literal["cost", "bytes", "host"]
"""The MIP's objectives: cost (recompute plus offload), device bytes, host bytes."""


@dataclass
class ClosureModel:
    """The closure ILP's rows, independent of any solver API (DESIGN.md).

    ``save``/``recompute``: nodes with an s/r variable; ``need``: nodes with s + r >= 1;
    ``closure``: (v, u) pairs, r_v <= s_u + r_u; ``store``: (v, g) pairs, y_g >= s_v
    (y_g >= s_v - o_v for v in ``offload``); ``offload``: the saved nodes that may be
    offloaded (an o variable each, o_v <= s_v; empty unless ``Problem.offload`` is set).
    """

    save: list[int]
    recompute: list[int]
    need: list[int]
    closure: list[tuple[int, int]]
    store: list[tuple[int, int]]
    groups: list[int]
    offload: list[int] = field(default_factory=list)


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
    o = problem.offload
    offload = [] if o is None else [v for v in save if o.offloadable[v]]
    groups = sorted({g for _, g in store})
    return ClosureModel(save, recompute, need, closure, store, groups, offload)


_MAX_UNITS = 10**9


def _largest_term(problem: Problem) -> float:
    """The largest recompute cost or offload term (what :func:`unit_scale` scales to 1e9)."""
    terms = [problem.cost]
    if problem.offload is not None:
        ok = problem.offload.offloadable
        terms += [problem.offload.transfer[ok], problem.offload.tail[ok]]
    return max((float(t.max()) for t in terms if t.size), default=0.0)


def unit_scale(problem: Problem) -> float:
    """Integer objective units per cost unit: 1 when every cost is an integer of at most
    1e9 and nothing may be offloaded (exact), otherwise 1e9 over the largest cost or
    offload term (a relative error below 1e-9 per term)."""
    top = _largest_term(problem)
    exact = bool(np.all(problem.cost == np.round(problem.cost)))
    if problem.offload is None and top <= _MAX_UNITS and exact:
        return 1.0
    return _MAX_UNITS / top if top > 0 else 1.0


def proof_gap(problem: Problem, offloads: bool) -> float:
    """The absolute gap, in :func:`unit_scale`'s units, within which a solve of the cost
    proves it: half a unit (exact) unless the model has offload columns (``offloads``),
    then :attr:`OffloadTerms.gap <budget.core.offload.OffloadTerms.gap>` (every backend's,
    :class:`MipWeights`' ``cost_gap`` in its divided units)."""
    if not offloads or problem.offload is None:
        return 0.5
    return max(0.5, problem.offload.gap * unit_scale(problem))


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

    @property
    def windows(self) -> tuple[int, int]:
        return self.forward_window, self.backward_window

    def values(self) -> list[int]:
        """Every term, for a common divisor (:func:`mip_weights`)."""
        return [*self.transfer.values(), *self.tail.values(), *self.windows]

    def divided(self, g: int) -> OffloadUnits:
        """The terms in units of ``g`` (a divisor of every term)."""
        return OffloadUnits(
            {v: x // g for v, x in self.transfer.items()},
            {v: x // g for v, x in self.tail.items()},
            self.forward_window // g,
            self.backward_window // g,
        )

    def exposures(self, offloaded: Iterable[int]) -> list[int]:
        """The link time of ``offloaded`` that each pass's window leaves exposed."""
        link = sum(self.transfer[v] for v in set(offloaded))
        return [max(0, link - w) for w in self.windows]

    def price(self, offloaded: Iterable[int]) -> int:
        """The offload price of ``offloaded`` in units, as the MIP's cost objective has it
        (tails plus exposures; 0 for nothing offloaded)."""
        chosen = set(offloaded)
        if not chosen:
            return 0
        return sum(self.tail[v] for v in chosen) + sum(self.exposures(chosen))


def offload_units(problem: Problem, m: ClosureModel) -> OffloadUnits | None:
    """``problem``'s offload terms in the units of :func:`unit_scale` (None without)."""
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

    With offload the offload terms share the cost units (the gcd is over them too) and
    ``host`` gives each offloadable node's host bytes in byte units. Offload costs are
    always rounded (:func:`unit_scale`), so plans of equal cost may round apart by one
    unit per rounded term: ``cost_slack`` is that many units, which the cost tie-break's
    cap admits above the least cost, as ``cpsat`` does. ``cost_gap``: the absolute gap, in
    cost units, within which a solve of the cost proves it (half a unit, exact, where
    nothing may be offloaded; :attr:`OffloadTerms.gap <budget.core.offload.OffloadTerms.gap>`
    where something may).
    """

    cost: np.ndarray  # int64[n]: recompute cost units (0 for inputs)
    size: dict[int, int]  # storage -> byte units, for storages with bytes
    cost_unit: float  # problem cost of one unit (exact when ``cost_exact``)
    byte_unit: int
    cost_exact: bool
    capacity: int | None  # the memory row's right-hand side in byte units
    offload: OffloadUnits | None = None  # in cost units; None when offload is not planned
    host: dict[int, int] = field(default_factory=dict)  # offloadable node -> byte units
    cost_slack: int = 0  # see the class docstring
    cost_gap: float = 0.5  # see the class docstring

    @property
    def offloads(self) -> bool:
        """Whether the model has offload columns (some saved node may be offloaded)."""
        return self.offload is not None and bool(self.offload.transfer)

    def value(
        self,
        problem: Problem,
        saved: list[int],
        which: MipObjective,
        offloaded: Iterable[int] = (),
    ) -> int:
        """The plan's objective in units, exactly (its recompute closure and offload
        price; its device storages; its host bytes)."""
        if which == "cost":
            price = 0 if self.offload is None else self.offload.price(offloaded)
            return int(self.cost[problem.recompute_closure(saved)].sum()) + price
        if which == "host":
            return problem.host_bytes(offloaded) // self.byte_unit
        return problem.saved_bytes(saved, offloaded) // self.byte_unit

    def unscale(self, units: float | None, which: MipObjective) -> float | None:
        if units is None or not math.isfinite(units):
            return None
        return float(units) * (self.cost_unit if which == "cost" else self.byte_unit)


def mip_weights(problem: Problem, m: ClosureModel, target_bytes: int | None) -> MipWeights:
    """The integer units of ``problem``'s MIP (see :class:`MipWeights`)."""
    w = integer_costs(problem)
    units = offload_units(problem, m)
    top = _largest_term(problem)
    exact = units is None and bool(
        problem.n == 0 or top <= _MAX_UNITS and np.all(problem.cost == np.round(problem.cost))
    )
    terms = w[w > 0].tolist() + [x for x in (units.values() if units else []) if x > 0]
    g = math.gcd(*terms) if terms else 1
    cost_unit = float(g) if exact or top <= 0 else g * top / _MAX_UNITS
    sizes = {gr: int(problem.storage_bytes[gr]) for gr in m.groups}
    b = math.gcd(*sizes.values()) if sizes else 1
    b = max(b, 1)
    rounded = sum(1 for v in m.recompute if w[v] > 0) + 2 * len(m.offload)
    return MipWeights(
        cost=w // g,
        size={gr: x // b for gr, x in sizes.items()},
        cost_unit=cost_unit,
        byte_unit=b,
        cost_exact=exact,
        capacity=None if target_bytes is None else int(target_bytes) // b,
        offload=None if units is None else units.divided(g),
        host={v: problem.node_bytes(v) // b for v in m.offload},
        cost_slack=0 if units is None or exact else rounded // g,
        cost_gap=max(0.5, proof_gap(problem, bool(m.offload)) / g),
    )
