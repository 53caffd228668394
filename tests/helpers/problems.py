"""Problems for the solver tests: random generators and small builders (pure data).

Each generator is deterministic in its ``seed``. Sizes default to what the brute-force
oracle (:mod:`helpers.oracle`) enumerates quickly.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from budget.core.offload import OffloadTerms
from budget.core.problem import Problem


def random_problem(seed: int, n: int = 10) -> Problem:
    """Two free inputs, then nodes reading one or two earlier nodes; half needed, 15%
    unrecomputable, node 5 sharing node 4's storage (not as a view: it reads what it
    likes)."""
    rng = np.random.default_rng(seed)
    n_in = 2
    edges = []
    for v in range(n_in, n):
        for u in rng.choice(v, size=min(v, int(rng.integers(1, 3))), replace=False):
            edges.append((int(u), v))
    storage = np.arange(n)
    if n > 5:
        storage[5] = storage[4]  # node 5 shares node 4's storage
    return Problem(
        names=[f"n{i}" for i in range(n)],
        ops=["op"] * n,
        is_input=[i < n_in for i in range(n)],
        needed=[i >= n_in and rng.random() < 0.5 for i in range(n)],
        can_save=[True] * n,
        can_recompute=[i >= n_in and rng.random() < 0.85 for i in range(n)],
        storage=storage,
        storage_bytes=[0] * n_in + [int(b) for b in rng.integers(1, 9, size=n - n_in) * 100],
        cost=[0.0] * n_in + [float(c) for c in rng.integers(0, 5, size=n - n_in)],
        flops=[0.0] * n,
        edges=edges,
    )


def distinct_storage(seed: int, n: int = 10) -> Problem:
    """random_problem without shared storages (the min-cut is exact on it)."""
    p = random_problem(seed, n)
    rng = np.random.default_rng(seed + 1000)
    sizes = [0, 0] + [int(b) for b in rng.integers(1, 9, size=n - 2) * 100]
    return dataclasses.replace(p, storage=np.arange(n), storage_bytes=sizes)


def view_group(seed: int, n: int = 10) -> Problem:
    """random_problem where the node sharing node 4's storage is a free view of it."""
    p = random_problem(seed, n)
    edges = [(u, v) for u, v in p.edges.tolist() if v != 5] + [(4, 5)]
    cost = p.cost.copy()
    cost[5] = 0.0
    can_recompute = p.can_recompute.copy()
    can_recompute[5] = True
    return dataclasses.replace(p, edges=edges, cost=cost, can_recompute=can_recompute)


def rich_problem(seed: int, n: int = 12) -> Problem:
    """Random problems with what the reduction rules look for: shared storages (views and
    twins), zero-byte storages, no-storage nodes, unsavable and unrecomputable nodes,
    zero costs, chains and fan-outs."""
    rng = np.random.default_rng(seed)
    n_in = 2
    edges = []
    for v in range(n_in, n):
        k = int(rng.choice([1, 1, 1, 2, 3]))
        lo = max(0, v - 4) if rng.random() < 0.7 else 0
        for u in rng.choice(np.arange(lo, v), size=min(k, v - lo), replace=False):
            edges.append((int(u), v))
    storage = np.arange(n)
    for v in range(n_in, n):  # views share an earlier node's storage
        if rng.random() < 0.35:
            storage[v] = storage[int(rng.integers(n_in, v))] if v > n_in else storage[v]
    storage_bytes = [0] * n_in + [int(b) for b in rng.choice([0, 100, 200, 400, 800], n - n_in)]
    storage_bytes = [b if b or rng.random() < 0.3 else 100 for b in storage_bytes]
    no_storage = rng.random(n) < 0.08
    storage = np.where(no_storage & (np.arange(n) >= n_in), -1, storage)
    return Problem(
        names=[f"n{i}" for i in range(n)],
        ops=["op"] * n,
        is_input=[i < n_in for i in range(n)],
        needed=[i >= n_in and rng.random() < 0.45 for i in range(n)],
        can_save=[i < n_in or rng.random() < 0.85 for i in range(n)],
        can_recompute=[i >= n_in and rng.random() < 0.9 for i in range(n)],
        storage=storage,
        storage_bytes=storage_bytes,
        cost=[0.0] * n_in + [float(c) for c in rng.choice([0, 0, 1, 2, 5], n - n_in)],
        flops=[0.0] * n,
        edges=edges,
    )


def make(n_in: int, nodes: list[dict], edges: list[tuple[int, int]]) -> Problem:
    """A problem from ``n_in`` free inputs and per-node dicts (``name``, ``needed``,
    ``save``, ``recompute``, ``storage``, ``bytes``, ``cost``, ``reason``): by default a
    needed node of 100 bytes in its own storage, costing 1, that can be saved and
    recomputed."""
    n = n_in + len(nodes)
    get = lambda key, default: [default] * n_in + [d.get(key, default) for d in nodes]  # noqa: E731
    return Problem(
        names=[f"x{i}" for i in range(n_in)]
        + [d.get("name", f"n{i}") for i, d in enumerate(nodes)],
        ops=["op"] * n,
        is_input=[True] * n_in + [False] * len(nodes),
        needed=[False] * n_in + [d.get("needed", True) for d in nodes],
        can_save=get("save", True),
        can_recompute=[False] * n_in + [d.get("recompute", True) for d in nodes],
        storage=list(range(n_in)) + [d.get("storage", n_in + i) for i, d in enumerate(nodes)],
        storage_bytes=[0] * n_in + [d.get("bytes", 100) for d in nodes],
        cost=[0.0] * n_in + [float(d.get("cost", 1)) for d in nodes],
        flops=[0.0] * n,
        edges=edges,
        reason=[""] * n_in + [d.get("reason", "") for d in nodes],
    )


def independent_problem(seed: int, equal_bytes: bool) -> Problem:
    """Needed values that read only graph inputs: recompute costs really are independent."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(3, 10))
    nodes = [
        {
            "bytes": 400 if equal_bytes else int(rng.integers(1, 9)) * 100,
            "cost": int(rng.integers(0, 6)),
            "recompute": bool(rng.random() < 0.85),
        }
        for _ in range(k)
    ]
    edges = [(int(rng.integers(0, 2)), 2 + i) for i in range(k)]
    return make(2, nodes, edges)


def copies(p: Problem, k: int) -> Problem:
    """k disjoint copies of p, like the identical layers of a model."""
    n, g = p.n, len(p.storage_bytes)
    storage = np.concatenate([np.where(p.storage >= 0, p.storage + i * g, -1) for i in range(k)])
    return Problem(
        names=[f"{name}_{i}" for i in range(k) for name in p.names],
        ops=p.ops * k,
        is_input=np.tile(p.is_input, k),
        needed=np.tile(p.needed, k),
        can_save=np.tile(p.can_save, k),
        can_recompute=np.tile(p.can_recompute, k),
        storage=storage,
        storage_bytes=np.tile(p.storage_bytes, k),
        cost=np.tile(p.cost, k),
        flops=np.tile(p.flops, k),
        edges=np.concatenate([p.edges + i * n for i in range(k)]),
    )


def empty_problem() -> Problem:
    """No nodes at all."""
    return Problem(
        names=[],
        ops=[],
        is_input=[],
        needed=[],
        can_save=[],
        can_recompute=[],
        storage=[],
        storage_bytes=[],
        cost=[],
        flops=[],
        edges=[],
    )


def with_offload(p: Problem, seed: int) -> Problem:
    """``p`` where about 60% of the storages' first members may be offloaded, with random
    transfer times (about bytes / 100), tails and windows small enough that the link's
    contention matters."""
    rng = np.random.default_rng(seed + 7)
    first = {}
    for v in range(p.n):
        if not p.is_input[v] and p.storage[v] >= 0:
            first.setdefault(int(p.storage[v]), v)
    transfer = np.full(p.n, np.nan)
    tail = np.full(p.n, np.nan)
    for g, v in first.items():
        if p.storage_bytes[g] > 0 and rng.random() < 0.6:
            transfer[v] = float(p.storage_bytes[g]) / 100 * float(rng.choice([0.5, 1.0, 1.5]))
            tail[v] = float(rng.choice([0.0, 0.0, 0.5, 2.0]))
    window = float(rng.integers(0, 8))
    return dataclasses.replace(
        p,
        offload=OffloadTerms(transfer, tail, forward_window=window, backward_window=2 * window),
    )
