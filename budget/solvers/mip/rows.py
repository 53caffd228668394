"""Plans cheapest first under rows of saved storages: the closure ILP in OR-Tools CP-SAT
with one row per moment of a step, for the eager path's peak search
(:mod:`budget.eager.peak_rows`).

Data: a :class:`~budget.core.problem.Problem`, the memory budget's cap on saved bytes, and
rows ``(groups, room)``: at that moment the saved storages of ``groups`` are alive, and
together they may take at most ``room`` bytes. Variables: the closure model's s, r, y
booleans (:mod:`budget.solvers.mip.cpsat`). Constraints: the closure ILP's, and each row.
Objective: the recompute cost (integer units).

:meth:`RowModel.next` returns the cheapest saved set left; :meth:`RowModel.exclude` rules
out a recompute set with every saved set containing a given one, and
:meth:`RowModel.cheaper_than` keeps only plans cheaper than one found.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ...core.problem import Problem
from .cpsat import _build
from .model import integer_costs

Row = tuple[Sequence[int], int]  # (storage groups alive, bytes they may take)


class Enumerated:
    """A CP-SAT closure model asked for plans one by one: ``model``, the save and recompute
    booleans ``s`` and ``r``, the objective ``cost`` in integer units of ``_units``
    problem cost units each (OR-Tools objects: typed Any)."""

    model: Any
    s: dict[int, Any]
    r: dict[int, Any]
    cost: Any
    _units: float

    def cheaper_than(self, cost: float) -> None:
        """Keep only plans whose recompute cost is below ``cost`` (problem units)."""
        units = math.ceil(cost / self._units * (1 - 1e-12)) - 1
        self.model.add(self.cost <= max(units, -1))

    def exclude(self, saved: Sequence[int], recomputed: Sequence[int]) -> None:
        """Rule out the plans that recompute ``recomputed`` and save ``saved`` or more."""
        lits = [self.s[v].Not() for v in saved if v in self.s]
        lits += [self.r[v].Not() for v in recomputed if v in self.r]
        self.model.add_bool_or(lits)


class RowModel(Enumerated):
    def __init__(self, problem: Problem, cap_bytes: int | None, rows: Sequence[Row]) -> None:
        from ortools.sat.python import cp_model

        self._cp = cp_model
        self.model = model = cp_model.CpModel()
        plain = problem if problem.offload is None else replace(problem, offload=None)
        self.s, self.r, y, _, _ = _build(model, plain, cap_bytes)
        for groups, room in rows:
            terms = [int(problem.storage_bytes[g]) * y[g] for g in groups if g in y]
            if terms:
                model.add(sum(terms) <= int(room))
            elif room < 0:  # over the limit whatever is saved: no plan
                model.add_bool_or([])
        w = integer_costs(problem)
        self._units = float(problem.cost.max()) / float(w.max()) if w.any() else 1.0
        self.cost = sum(int(w[v]) * x for v, x in self.r.items() if w[v] > 0)
        model.minimize(self.cost)

    def next(self, time_limit: float) -> list[int] | None:
        """The cheapest saved set left, or None (none is left, or none found in time)."""
        solver = self._cp.CpSolver()
        solver.parameters.max_time_in_seconds = max(0.05, float(time_limit))
        solver.parameters.num_workers = 1
        status = solver.solve(self.model)
        if status == self._cp.MODEL_INVALID:  # a bug of ours, never a user error
            raise RuntimeError(f"rows model: invalid: {self.model.validate()}")
        if status not in (self._cp.OPTIMAL, self._cp.FEASIBLE):
            return None
        return sorted(v for v, x in self.s.items() if solver.value(x))
