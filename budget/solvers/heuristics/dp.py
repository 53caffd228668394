"""Knapsack baseline: PyTorch's pseudo-polynomial 0-1 knapsack, on our Problem.

Mirrors ``dp_knapsack`` in ``torch/_functorch/_activation_checkpointing/knapsack.py``,
the solver behind ``torch._functorch.config.activation_memory_budget``: every value the
backward reads is an item, saved or recomputed, and recompute costs are taken to be
*independent*. That assumption is what this baseline is for (DESIGN.md): the exact
solvers price the recompute closure, this one does not.

- Values that cannot be recomputed are saved first; their bytes reduce the capacity.
  Values that cannot be saved are recomputed. Values with no bytes of their own (no
  storage, a graph input's storage, or a storage the forced saves already hold) are
  saved for free.
- The items are the remaining needed values, grouped by storage (a value and its views
  are freed only together): weight = the storage's bytes, value = the summed recompute
  cost of every value in that storage, the base of a needed view included (in traced
  graphs the backward often reads a free view of a costly matmul; pricing the view alone
  at zero would recompute everything). Nothing outside the storage is counted: costs are
  independent. Items of zero value are never saved (ties go to fewer bytes), even when
  recomputing them pulls costly inputs into the closure.
- Quantisation: the capacity is cut into at most ``buckets`` (default 10,000, as torch's
  scale factor) buckets of ``q = ceil(capacity / buckets)`` bytes. Weights are rounded
  *up* to whole buckets and the capacity *down*, so the items chosen always fit in the
  real capacity; the price is up to ``q`` bytes per chosen item left unused. With a
  capacity below ``buckets`` bytes the DP is exact in bytes.
- The DP table is a numpy row of best values per bucket, plus one bit per (item,
  bucket) for the backtrack; among equal values it backtracks from the fewest buckets.

The real plan is the chosen saved set; what the backward recomputes is its closure
(``Problem.recompute_closure``), which may cost more than the knapsack believed: a
recomputed value needs its unsaved inputs recomputed too (``info["believed_cost"]`` is
what the knapsack thought its unsaved items cost). If that closure needs a value that
cannot be recomputed, the plan is repaired by saving it (or, when it cannot be saved
either, the closest recomputed values that read it). If the repair pushes the plan over
the target, the knapsack is solved again with less capacity: first the overflow taken
off, then bisection between zero and the last capacity that overflowed (at most
``_PROBES`` knapsacks in all), keeping the cheapest repaired plan that fits; capacity zero
is the ``minimize="bytes"`` plan, so a target at or above that always succeeds.

Guarantees: a valid plan, never over the target, or :class:`InfeasibleError`. Not
guaranteed: optimality, even of the knapsack itself once quantised; ``minimize="bytes"``
saves only what is forced, free or needed by the repair, a heuristic floor.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from ...core.problem import Problem
from ..base import InfeasibleError, Request, Search, SolverBase
from .greedy import check_chains

_PROBES = 12  # knapsacks solved in all when repairs push plans over the target


def knapsack(
    weights: np.ndarray, values: np.ndarray, capacity: int | None, buckets: int = 10_000
) -> np.ndarray:
    """Items (bool mask) of the most value within ``capacity`` bytes; never over it.

    Only items of positive value are taken; items of zero weight always are. With
    ``capacity`` None every item of positive value is taken.
    """
    weights = np.asarray(weights, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    take = values > 0
    if capacity is None or int(weights[take].sum()) <= capacity:
        return take
    chosen = take & (weights == 0)
    if capacity <= 0:
        return chosen
    q = max(1, math.ceil(capacity / buckets))
    cap = capacity // q
    qw = -(-weights // q)  # rounded up: whole buckets
    idx = np.flatnonzero(take & (weights > 0) & (qw <= cap))
    if not len(idx):
        return chosen
    dp = np.zeros(cap + 1)
    bits = np.zeros((len(idx), (cap + 8) // 8), dtype=np.uint8)
    row = np.zeros(cap + 1, dtype=bool)
    for k, i in enumerate(idx.tolist()):
        w, val = int(qw[i]), float(values[i])
        candidate = dp[: cap + 1 - w] + val
        better = candidate > dp[w:]
        row[:w] = False
        row[w:] = better
        bits[k] = np.packbits(row)
        dp[w:] = np.where(better, candidate, dp[w:])
    best = dp[cap]
    c = int(np.argmax(dp >= best - 1e-9 * max(1.0, abs(best))))  # fewest buckets, same value
    for k in range(len(idx) - 1, -1, -1):
        if (bits[k, c >> 3] >> (7 - (c & 7))) & 1:
            chosen[idx[k]] = True
            c -= int(qw[idx[k]])
    return chosen


class DpKnapsack(SolverBase):
    name: ClassVar[str] = "dp"
    exact: ClassVar[bool] = False
    requires: ClassVar[str] = "numpy"

    def __init__(self, buckets: int = 10_000) -> None:
        self.buckets = buckets

    def _search(self, request: Request) -> Search:
        problem, target_bytes, minimize, time_limit = request
        start = time.perf_counter()
        p = problem
        check_chains(p)
        target = None if target_bytes is None else int(target_bytes)
        need = p.needed & ~p.is_input
        forced = np.flatnonzero(need & ~p.can_recompute).tolist()  # all can be saved
        base = p.saved_bytes(forced)
        if target is not None and base > target:
            raise InfeasibleError(
                f"no plan saves at most {target} bytes: the values that cannot be recomputed "
                f"alone take {base} bytes"
            )
        gratis, groups = _items(p, need, forced)
        keys = sorted(groups)
        weights = np.array([int(p.storage_bytes[g]) for g in keys], dtype=np.int64)
        # a storage's cost: every value in it (a needed view's base too), nothing upstream
        made = (p.storage >= 0) & ~p.is_input
        own = np.bincount(p.storage[made], weights=p.cost[made], minlength=len(p.storage_bytes))
        values = np.array([float(own[g]) for g in keys])

        def attempt(capacity: int | None) -> _Result:
            mask = knapsack(weights, values, capacity, self.buckets)
            chosen = [v for g, m in zip(keys, mask.tolist(), strict=True) if m for v in groups[g]]
            saved, repaired = _repair(p, forced + gratis + chosen)
            saved = p.prune_unused(saved)
            cost = p.recompute_cost(saved)
            info = {
                "capacity": capacity,
                "repaired": repaired,
                "believed_cost": float(values[~mask].sum()),  # items only, independent
            }
            return cost, p.saved_bytes(saved), saved, info

        if minimize == "bytes":
            capacity: int | None = 0
        else:
            capacity = None if target is None else target - base
        result, probes = attempt(capacity), 1
        if target is not None and result[1] > target:
            assert capacity is not None
            deadline = start + 0.5 * time_limit
            result, probes = self._fit(attempt, capacity, target, result[1], deadline)
        _, _, saved, info = result
        return Search(
            saved,
            optimal=False,
            info={"backend": "numpy knapsack", "items": len(keys), "probes": probes, **info},
        )

    def _fit(
        self,
        attempt: Callable[[int | None], _Result],
        capacity: int,
        target: int,
        nbytes: int,
        deadline: float,
    ) -> tuple[_Result, int]:
        """The repair overflowed the target: find a capacity whose repaired plan fits, first
        by taking the overflow off, then by bisection; the cheapest plan that fits, and the
        knapsacks solved in all."""
        best = None
        probes = 1
        lo, hi = 0, capacity
        probe = max(0, capacity - (nbytes - target))
        while True:
            result = attempt(probe)
            probes += 1
            if result[1] <= target:
                lo = probe
                if best is None or result[:2] < best[:2]:
                    best = result
            else:
                hi = probe
            late = time.perf_counter() > deadline
            if hi - lo <= max(1, hi // self.buckets) or probes > _PROBES or late:
                break
            probe = (lo + hi) // 2
        if best is None and lo == 0 and hi > 0:
            result = attempt(0)
            probes += 1
            best = result if result[1] <= target else None
        if best is None:
            raise InfeasibleError(
                f"dp found no plan that saves at most {target} bytes: the smallest plan it "
                f"reaches saves {min(nbytes, result[1])} bytes (a heuristic; an exact "
                "solver such as 'cpsat' may reach less)"
            )
        return best, probes


_Result = tuple[float, int, list[int], dict[str, object]]  # cost, bytes, saved, info


def _items(
    p: Problem, need: np.ndarray, forced: list[int]
) -> tuple[list[int], dict[int, list[int]]]:
    """The knapsack's items: needed values that may be saved or recomputed, grouped by
    storage; those whose storage costs nothing or is held anyway are saved for free."""
    held = {int(p.storage[v]) for v in forced if p.storage[v] >= 0}
    gratis: list[int] = []
    groups: dict[int, list[int]] = {}
    for v in np.flatnonzero(need & p.can_save & p.can_recompute).tolist():
        g = int(p.storage[v])
        if g < 0 or p.storage_bytes[g] == 0 or g in held:
            gratis.append(v)
        else:
            groups.setdefault(g, []).append(v)
    return gratis, groups


def _repair(p: Problem, saved: list[int]) -> tuple[list[int], int]:
    """Save what the closure would recompute but cannot (or, for a value that cannot be
    saved either, the recomputed values that read it), until nothing is left to repair;
    returns the saved set and the number of values added. Feasibility was checked."""
    kept = set(saved)
    added = 0
    while True:
        closure = p.recompute_closure(kept)
        bad = [v for v in closure if not p.can_recompute[v]]
        if not bad:
            return sorted(kept), added
        recomputed = set(closure)
        seen = set(bad)
        before = len(kept)
        while bad:  # what is saved does not depend on the order: reachability
            v = bad.pop()
            if p.can_save[v]:
                kept.add(v)
                added += 1
                continue
            for w in p.users[v]:
                if w in recomputed and w not in seen:
                    seen.add(w)
                    bad.append(w)
        if len(kept) == before:  # cannot happen after check_chains; never loop forever
            raise InfeasibleError(f"dp cannot repair its plan: {p.check(kept)[:3]}")
