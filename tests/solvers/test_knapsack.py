"""The exact 0-1 knapsack torch's partitioner can call, against brute force."""

from __future__ import annotations

import itertools
import random

import pytest

from budget.solvers.knapsack import solve_knapsack


def brute(weights, values, capacity):
    best = 0
    for take in itertools.product((0, 1), repeat=len(weights)):
        if sum(w * t for w, t in zip(weights, take, strict=True)) <= capacity:
            best = max(best, sum(v * t for v, t in zip(values, take, strict=True)))
    return best


@pytest.mark.parametrize("seed", range(20))
def test_matches_brute_force(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 10)
    weights = [rng.randint(0, 50) for _ in range(n)]
    values = [rng.randint(0, 10**9) for _ in range(n)]
    capacity = rng.randint(0, sum(weights))
    take = solve_knapsack(weights, values, capacity)
    assert sum(weights[i] for i in take) <= capacity
    assert sum(values[i] for i in take) == brute(weights, values, capacity)


def test_negative_items_are_refused():
    with pytest.raises(ValueError, match="non-negative"):
        solve_knapsack([1, -2], [1, 1], 3)
