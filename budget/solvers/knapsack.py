"""An exact 0-1 knapsack, for torch's own memory-budget partitioner.

torch's partitioner reduces the choice of saved values to a knapsack over its "banned"
nodes (recompute costs taken as independent) and solves it with a DP over memory
quantised to 1/10000 of the range. :func:`solve_knapsack` solves the same knapsack
exactly (integers, CP-SAT), so that users who keep torch's partitioner can still take an
exact solver through its hook (:mod:`budget.compile.torch_hooks`). The closure-aware
model of :mod:`budget.solvers` needs budget's own partitioner.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import SolverTimeout


def solve_knapsack(
    weights: Sequence[int], values: Sequence[int], capacity: int, time_limit: float = 60.0
) -> list[int]:
    """Indices of the items to take: the largest total value whose total weight is at most
    ``capacity``. Weights and values are non-negative integers (keep values below ~1e12:
    CP-SAT works in 64-bit integers)."""
    if any(w < 0 for w in weights) or any(v < 0 for v in values):
        raise ValueError("knapsack weights and values must be non-negative integers")
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    take = [model.new_bool_var(f"x{i}") for i in range(len(weights))]
    model.add(sum(w * x for w, x in zip(weights, take, strict=True)) <= capacity)
    model.maximize(sum(v * x for v, x in zip(values, take, strict=True)))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = 1
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise SolverTimeout(f"no knapsack solution in {time_limit:g} s; raise the time limit")
    return [i for i, x in enumerate(take) if solver.value(x)]
