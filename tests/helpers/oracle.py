"""Brute force over the constraints of DESIGN.md: the reference answers of the solver tests.

It reads a Problem's arrays and calls none of its methods, so a bug in the graph API the
solvers share (``Problem.recompute_closure``, ``saved_bytes``, ``check``, ``prune_unused``)
cannot make a solver and its reference agree. For every non-input node v it enumerates
``s_v`` (saved) and ``r_v`` (recomputed) in {0, 1} and keeps the assignments where:

- ``can_save[v]`` False -> s_v = 0; ``can_recompute[v]`` False -> r_v = 0 (only such
  assignments are enumerated);
- ``needed[v]`` -> s_v or r_v;
- for each edge (u, v) with u not an input: r_v -> s_u or r_u (v an input has no r_v);
- bytes = the sum, over storages g >= 0 with at least one saved member, of
  ``storage_bytes[g]`` (each storage once; inputs are never "saved", so their storages
  count only through a non-input member);
- cost = the sum of ``cost[v] * r_v``.

A plan is a saved set; its price is (the least cost of an r that completes it, its
bytes), and it is valid when some r does. Exponential: for problems with at most about
14 non-input nodes.
"""

from __future__ import annotations

import itertools
from typing import Literal

import numpy as np

from budget.core.problem import Problem

Price = tuple[float, int]  # (cost, bytes)

_CHUNK = 1 << 22  # (saved set, recomputed set) pairs checked at once
_CACHE: dict[tuple[object, ...], dict[tuple[int, ...], Price]] = {}  # by problem content


def plans(p: Problem) -> dict[tuple[int, ...], Price]:
    """Every valid saved set (sorted node ids, unpruned) and its (least cost, bytes)."""
    key = _key(p)
    hit = _CACHE.get(key)
    if hit is None:
        hit = _CACHE[key] = _enumerate(p)
        while len(_CACHE) > 64:
            del _CACHE[next(iter(_CACHE))]
    return hit


def price(p: Problem, saved: list[int] | tuple[int, ...]) -> Price | None:
    """The (least cost, bytes) of the plan that saves ``saved``; None when it is invalid."""
    return plans(p).get(tuple(sorted(set(saved))))


def optimum(
    p: Problem, target: int | None = None, minimize: Literal["cost", "bytes"] = "cost"
) -> Price | None:
    """(cost, bytes) of the best plan with bytes <= ``target``: least cost, then fewest
    bytes (``minimize="cost"``), or fewest bytes, then least cost (``"bytes"``); None when
    no plan fits."""
    fits = [cb for cb in plans(p).values() if target is None or cb[1] <= target]
    if not fits:
        return None
    if minimize == "cost":
        return min(fits)
    return min(fits, key=lambda cb: (cb[1], cb[0]))


def frontier(p: Problem) -> list[tuple[int, float]]:
    """The Pareto frontier as (bytes, cost): bytes ascending, cost strictly descending."""
    out: list[tuple[int, float]] = []
    for c, b in sorted(set(plans(p).values()), key=lambda cb: (cb[1], cb[0])):
        if not out or c < out[-1][1]:
            out.append((b, c))
    return out


# ---- the enumeration -------------------------------------------------------------------------


def _key(p: Problem) -> tuple[object, ...]:
    arrays = (
        p.is_input,
        p.needed,
        p.can_save,
        p.can_recompute,
        p.storage,
        p.storage_bytes,
        p.cost,
        p.edges,
    )
    return (p.n, *(np.ascontiguousarray(a).tobytes() for a in arrays))


def _subsets(bits: list[int]) -> np.ndarray:
    """Every subset of ``bits`` (bit positions) as an int64 mask, in counting order."""
    index = np.arange(1 << len(bits), dtype=np.int64)
    masks = np.zeros(len(index), np.int64)
    for j, b in enumerate(bits):
        masks |= ((index >> j) & 1) << b
    return masks


def _enumerate(p: Problem) -> dict[tuple[int, ...], Price]:
    nodes = [v for v in range(len(p.names)) if not p.is_input[v]]
    bit = {v: i for i, v in enumerate(nodes)}
    k = len(nodes)
    assert k <= 24, f"the oracle enumerates 4**{k} assignments: too many"
    S = _subsets([bit[v] for v in nodes if p.can_save[v]])
    R = _subsets([bit[v] for v in nodes if p.can_recompute[v]])

    need = 0
    for v in nodes:
        if p.needed[v]:
            need |= 1 << bit[v]
    reads = [0] * k  # per node v: the non-input nodes it reads (r_v needs them available)
    for u, v in np.asarray(p.edges).reshape(-1, 2).tolist():
        if not p.is_input[u] and not p.is_input[v]:
            reads[bit[v]] |= 1 << bit[u]

    # what each recomputed set needs available (saved or recomputed), and what it costs
    must = np.full(len(R), need, np.int64)
    cost = np.zeros(len(R), np.float64)
    for v in nodes:
        on = ((R >> bit[v]) & 1).astype(bool)
        must[on] |= reads[bit[v]]
        cost[on] += float(p.cost[v])

    # bytes of each saved set: every storage with a saved member, once
    members: dict[int, int] = {}
    for v in nodes:
        g = int(p.storage[v])
        if g >= 0:
            members[g] = members.get(g, 0) | (1 << bit[v])
    nbytes = np.zeros(len(S), np.int64)
    for g, m in members.items():
        nbytes += np.where((S & m) != 0, int(p.storage_bytes[g]), 0)

    least = np.full(len(S), np.inf)
    rows = max(1, _CHUNK // max(1, len(R)))
    for lo in range(0, len(S), rows):
        s = S[lo : lo + rows, None]
        ok = ((s | R[None, :]) & must[None, :]) == must[None, :]
        least[lo : lo + rows] = np.where(ok, cost[None, :], np.inf).min(axis=1)

    out: dict[tuple[int, ...], Price] = {}
    for i in np.flatnonzero(np.isfinite(least)).tolist():
        mask = int(S[i])
        saved = tuple(v for v in nodes if mask >> bit[v] & 1)
        out[saved] = (float(least[i]), int(nbytes[i]))
    return out


# ---- offload: a third decision (budget.core.offload), brute force over every saved set ----


def offload_plans(p: Problem) -> list[tuple[float, int, tuple[int, ...], tuple[int, ...]]]:
    """Every valid plan with offload as (cost, device bytes, saved, offloaded): each saved
    set of :func:`plans` with each subset of its offloadable members kept on the host.
    Reads ``p.offload``'s arrays and writes its price out again:
    ``sum tail + max(0, link - forward_window) + max(0, link - backward_window)``, with
    ``link`` the summed transfer times; a storage is on the device while any of its saved
    members is not offloaded. A plan offloading a value whose storage another saved value
    keeps on the device is not valid (torch's asynchronous pass frees the storage)."""
    o = p.offload
    assert o is not None
    can = [not np.isnan(o.transfer[v]) for v in range(len(p.names))]
    out = []
    for saved, (cost, _) in plans(p).items():
        movable = [v for v in saved if can[v]]
        for k in range(len(movable) + 1):
            for away in itertools.combinations(movable, k):
                if any(
                    p.storage[u] == p.storage[v] >= 0 for v in away for u in saved if u not in away
                ):
                    continue  # its storage stays on the device with u: offloads free it
                link = sum(float(o.transfer[v]) for v in away)
                price = (
                    sum(float(o.tail[v]) for v in away)
                    + max(0.0, link - o.forward_window)
                    + max(0.0, link - o.backward_window)
                )
                groups = {int(p.storage[v]) for v in saved if v not in away and p.storage[v] >= 0}
                device = sum(int(p.storage_bytes[g]) for g in groups)
                out.append((cost + price, device, saved, away))
    return out


def offload_optimum(
    p: Problem, target: int | None = None, minimize: Literal["cost", "bytes"] = "cost"
) -> tuple[float, int, int] | None:
    """(cost, device bytes, host bytes) of the best plan with offload within ``target``:
    least cost, then fewest device bytes (an offload the link hides is free and frees
    device memory), then fewest host bytes (nothing offloaded for nothing); or fewest
    device bytes first (``minimize="bytes"``). None when none fits."""
    fits = [
        (c, b, host_bytes(p, away))
        for c, b, _, away in offload_plans(p)
        if target is None or b <= target
    ]
    if not fits:
        return None
    if minimize == "cost":
        return min(fits, key=lambda x: (round(x[0], 9), x[1], x[2]))
    return min(fits, key=lambda x: (x[1], round(x[0], 9), x[2]))


def host_bytes(p: Problem, away: tuple[int, ...]) -> int:
    return sum(int(p.storage_bytes[int(p.storage[v])]) for v in away)
