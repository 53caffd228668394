"""The closure ILP in OR-Tools CP-SAT, asked for plans one by one, cheapest first: the base
of the peak searches' models (:mod:`budget.solvers.mip.rows`, :mod:`budget.solvers.mip.peak`).

Data: a :class:`~budget.core.problem.Problem` and the memory budget's cap on saved bytes.
Variables: the closure model's s, r, y booleans (:mod:`budget.solvers.mip.cpsat`; the peak
searches plan no offload). Constraints: the closure ILP's, and what a subclass adds.
Objective: the recompute cost (integer units).

:meth:`Enumerated.next` returns the cheapest saved set left; :meth:`Enumerated.exclude`
rules out a recompute set with every saved set containing a given one, and
:meth:`Enumerated.cheaper_than` keeps only plans cheaper than one found.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ...core.problem import Problem
from .cpsat import _build
from .model import integer_costs


@dataclass
class Next:
    """What :meth:`Enumerated.next` found: the cheapest saved set left, or None when no plan
    is left (``exhausted``: the enumeration is complete) or none was found in time."""

    saved: list[int] | None
    exhausted: bool


class Enumerated:
    """A CP-SAT closure model (``model``) over ``problem`` with at most ``cap_bytes`` saved;
    ``s``, ``r``, ``y``: its save, recompute and storage-kept booleans; ``cost``: the
    objective in integer units of ``units`` problem cost units each (OR-Tools objects:
    typed Any). ``workers`` and ``seed`` go to every solve."""

    LINEARIZATION: int | None = None  # CP-SAT's linearization_level, where a model needs one

    def __init__(
        self, problem: Problem, cap_bytes: int | None, *, workers: int = 1, seed: int = 0
    ) -> None:
        from ortools.sat.python import cp_model

        self._cp = cp_model
        self.problem = problem
        self.workers, self.seed = workers, seed
        self.model: Any = cp_model.CpModel()
        plain = problem if problem.offload is None else replace(problem, offload=None)
        self.s: dict[int, Any]
        self.r: dict[int, Any]
        self.y: dict[int, Any]
        self.s, self.r, self.y, _, _ = _build(self.model, plain, cap_bytes)
        w = integer_costs(problem)
        self.units = float(problem.cost.max()) / float(w.max()) if w.any() else 1.0
        self.weights = {v: int(w[v]) for v in self.r if w[v] > 0}
        self.cost: Any = sum(c * self.r[v] for v, c in self.weights.items())
        self.model.minimize(self.cost)

    def cheaper_than(self, cost: float) -> None:
        """Keep only plans whose recompute cost is below ``cost`` (problem units)."""
        units = math.ceil(cost / self.units * (1 - 1e-12)) - 1
        self.model.add(self.cost <= max(units, -1))

    def exclude(self, saved: Sequence[int], recomputed: Sequence[int]) -> None:
        """Rule out the plans that recompute ``recomputed`` and save ``saved`` or more."""
        lits = [self.s[v].Not() for v in saved if v in self.s]
        lits += [self.r[v].Not() for v in recomputed if v in self.r]
        self.model.add_bool_or(lits)

    def next(self, time_limit: float) -> Next:
        """The cheapest saved set left (within ``time_limit`` seconds)."""
        solver, status = self._solve(self.model, time_limit)
        if status == self._cp.INFEASIBLE:
            return Next(None, exhausted=True)
        if status not in (self._cp.OPTIMAL, self._cp.FEASIBLE):
            return Next(None, exhausted=False)
        return Next(self.saved_in(solver), exhausted=False)

    def saved_in(self, solver: Any, model: Any = None) -> list[int]:
        """The saved set of a solve (of ``model``, a clone of this one, when given)."""
        if model is None:
            return sorted(v for v, x in self.s.items() if solver.value(x))
        var = model.get_bool_var_from_proto_index
        return sorted(v for v, x in self.s.items() if solver.value(var(x.index)))

    def _solve(self, model: Any, time_limit: float) -> tuple[Any, Any]:
        cp = self._cp
        solver = cp.CpSolver()
        solver.parameters.max_time_in_seconds = max(0.05, float(time_limit))
        solver.parameters.num_workers = self.workers
        solver.parameters.random_seed = self.seed
        if self.LINEARIZATION is not None:
            solver.parameters.linearization_level = self.LINEARIZATION
        status = solver.solve(model)
        if status == cp.MODEL_INVALID:  # a bug of ours, never a user error
            raise RuntimeError(f"{type(self).__name__}: invalid model: {model.validate()}")
        return solver, status
