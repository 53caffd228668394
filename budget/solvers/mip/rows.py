"""Plans cheapest first under rows of saved storages: the closure ILP in OR-Tools CP-SAT
with one row per moment of a step, for the eager path's peak search
(:mod:`budget.eager.peak_rows`).

Data: a :class:`~budget.core.problem.Problem`, the memory budget's cap on saved bytes, and
rows ``(groups, room)``: at that moment the saved storages of ``groups`` are alive, and
together they may take at most ``room`` bytes. Variables: the closure model's
(:class:`~budget.solvers.mip.enumerated.Enumerated`). Constraints: the closure ILP's, and
each row. Objective: the recompute cost (integer units).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...core.problem import Problem
from .enumerated import Enumerated

Row = tuple[Sequence[int], int]  # (storage groups alive, bytes they may take)


class RowModel(Enumerated):
    def __init__(self, problem: Problem, cap_bytes: int | None, rows: Sequence[Row]) -> None:
        super().__init__(problem, cap_bytes)
        for groups, room in rows:
            terms = [int(problem.storage_bytes[g]) * self.y[g] for g in groups if g in self.y]
            if terms:
                self.model.add(sum(terms) <= int(room))
            elif room < 0:  # over the limit whatever is saved: no plan
                self.model.add_bool_or([])
