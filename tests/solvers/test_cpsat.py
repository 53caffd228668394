"""CP-SAT on the symmetric problems identical layers make (pure data, no torch.fx)."""

from __future__ import annotations

from helpers.problems import make

from budget.solvers.mip.cpsat import CpSat

# One ALBERT layer's choices after the reduction (budget.solvers.reduce), twelve layers
# deep: (bytes, recompute cost, layers' worth of copies). Independent of one another
# (no edges): save each value, or pay for its recomputation. The 4096-byte items are the
# last layer norm's mean and deviation (its output is the next layer's input, kept anyway);
# the 266240-byte ones the first layer norm's output with its mean and deviation.
_LAYER = [
    (262144, 32, 5),
    (1048576, 32, 1),
    (266240, 1, 1),
    (1048576, 128, 1),
    (262144, 128, 1),
    (4096, 1, 1),
]
_TARGET = 24388800  # bytes: a budget between the min-cut's hull points


def _least_cost(items: list[tuple[int, int]], target: int, unit: int) -> int:
    """The least recompute cost of saving at most ``target`` bytes: a 0-1 knapsack by
    dynamic programming over byte units (every size a multiple of ``unit``)."""
    cap = target // unit
    best = [0] * (cap + 1)  # the most cost saved by keeping at most c units
    for size, cost in items:
        w = size // unit
        for c in range(cap, w - 1, -1):
            best[c] = max(best[c], best[c - w] + cost)
    return sum(cost for _, cost in items) - best[cap]


def test_identical_layers_knapsack_is_proven_optimal():
    """Twelve identical layers of independent choices: CP-SAT's one deterministic worker
    proves the optimum, the one a dynamic program over the bytes finds (it needs the LP's
    symmetries: without them the worker finds the plan but no proof)."""
    items = [(b, c) for _ in range(12) for b, c, k in _LAYER for _ in range(k)]
    p = make(0, [{"bytes": b, "cost": c} for b, c in items], [])
    sol = CpSat().solve(p, _TARGET, time_limit=60)
    assert sol.status == "optimal"
    assert sol.objective == _least_cost(items, _TARGET, 4096)
    assert p.saved_bytes(sol.saved) <= _TARGET
