"""The solver-agnostic problem: which values of a training step to save or recompute.

``Problem`` is pure data (lists and numpy arrays, no torch.fx), so solvers can be tested
and cross-checked on hand-made or random problems. It holds the graph inputs (free, always
available) and the forward values the backward may need. See DESIGN.md, "The optimisation,
exactly": for every non-input node v, ``s_v`` (saved) and ``r_v`` (recomputed in backward):

- ``needed[v]``           -> s_v + r_v >= 1
- edge (u, v), u not input -> r_v <= s_u + r_u
- ``can_save[v]`` False   -> s_v = 0;  ``can_recompute[v]`` False -> r_v = 0
- memory: sum over storages g of ``storage_bytes[g] * max(s_v for v in g)`` <= target
- minimise sum ``cost[v] * r_v``; among equal costs, the fewest saved bytes.

``cost`` is in ``cost_unit`` (seconds for the time estimators, ``"op"`` for ``unit``);
``flops`` and ``moved`` (bytes read + written) are kept beside it for display and totals.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Problem:
    names: list[str]
    ops: list[str]
    is_input: np.ndarray  # bool[n]: graph inputs (parameters, user inputs, seeds)
    needed: np.ndarray  # bool[n]: used directly by the backward
    can_save: np.ndarray  # bool[n]
    can_recompute: np.ndarray  # bool[n]
    storage: np.ndarray  # int[n]: storage id, -1 for values that occupy no memory
    storage_bytes: np.ndarray  # int64[num_storages]: 0 for storages of graph inputs
    cost: np.ndarray  # float[n]: cost of recomputing the node, in ``cost_unit``
    flops: np.ndarray  # float[n]: FLOPs of the node (for display and totals)
    edges: np.ndarray  # int[E, 2]: (u, v) means u is an input of v
    cost_unit: str = "flop"
    modules: list[str] = field(default_factory=list)  # module path per node ("" if none)
    reason: list[str] = field(default_factory=list)  # why a decision is forbidden ("" if not)
    reference_saved: list[int] = field(default_factory=list)  # torch's b=1.0 choice
    graph_hash: str = ""
    # float[n]: bytes each node reads + writes (display, roofline); zeros when not given
    moved: np.ndarray | None = None
    # how a node's cost was found when not the estimator's usual way ("" if it was), e.g.
    # the profile estimator's roofline fallback for an op it did not run, and why
    cost_notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.names)
        self.edges = np.asarray(self.edges, dtype=np.int64).reshape(-1, 2)
        for name in ("is_input", "needed", "can_save", "can_recompute"):
            setattr(self, name, np.asarray(getattr(self, name), dtype=bool))
        self.storage = np.asarray(self.storage, dtype=np.int64)
        self.storage_bytes = np.asarray(self.storage_bytes, dtype=np.int64)
        self.cost = np.asarray(self.cost, dtype=np.float64)
        self.flops = np.asarray(self.flops, dtype=np.float64)
        self.moved = (
            np.zeros(n, dtype=np.float64)
            if self.moved is None
            else np.asarray(self.moved, dtype=np.float64)
        )
        if not self.modules:
            self.modules = [""] * n
        if not self.reason:
            self.reason = [""] * n
        if not self.cost_notes:
            self.cost_notes = [""] * n
        for name in (
            "ops",
            "is_input",
            "needed",
            "can_save",
            "can_recompute",
            "storage",
            "cost_notes",
        ):
            if len(getattr(self, name)) != n:
                raise ValueError(
                    f"Problem.{name} has {len(getattr(self, name))} entries, expected {n}"
                )
        if len(self.cost) != n or len(self.flops) != n or len(self.moved) != n:
            raise ValueError(
                "Problem.cost, Problem.flops and Problem.moved need one entry per node"
            )

    @property
    def n(self) -> int:
        return len(self.names)

    def inputs_of(self) -> list[list[int]]:
        """For each node, the nodes it reads (sorted, deterministic)."""
        ins: list[list[int]] = [[] for _ in range(self.n)]
        for u, v in self.edges.tolist():
            ins[v].append(u)
        return [sorted(set(x)) for x in ins]

    def node_bytes(self, v: int) -> int:
        g = int(self.storage[v])
        return int(self.storage_bytes[g]) if g >= 0 else 0

    def saved_bytes(self, saved: Iterable[int]) -> int:
        """Bytes held by saving ``saved``: each storage counted once, input storages free."""
        groups = {int(self.storage[v]) for v in saved if self.storage[v] >= 0}
        return int(sum(int(self.storage_bytes[g]) for g in groups))

    def recompute_closure(self, saved: Iterable[int]) -> list[int]:
        """Nodes the backward must recompute when exactly ``saved`` (plus inputs) is kept.

        This is what the partitioner will do with the saved set, so plans report it rather
        than whatever a solver's ``r`` variables said.
        """
        kept = set(saved)
        ins = self.inputs_of()
        out: set[int] = set()
        stack = [
            v for v in range(self.n) if self.needed[v] and not self.is_input[v] and v not in kept
        ]
        while stack:
            v = stack.pop()
            if v in out:
                continue
            out.add(v)
            stack.extend(
                u for u in ins[v] if not self.is_input[u] and u not in kept and u not in out
            )
        return sorted(out)

    def prune_unused(self, saved: Iterable[int]) -> list[int]:
        """``saved`` without the nodes neither the backward nor any recomputation reads."""
        keep = set(saved)
        ins = self.inputs_of()
        used = {v for v in keep if self.needed[v]}
        for v in self.recompute_closure(keep):
            used.update(u for u in ins[v] if u in keep)
        return sorted(used)

    def check(self, saved: Iterable[int]) -> list[str]:
        """Reasons ``saved`` is not a valid plan (empty when valid). Memory is not checked."""
        saved = set(saved)
        errors = [
            f"{self.names[v]} saved but cannot be saved ({self.reason[v]})"
            for v in sorted(saved)
            if not self.can_save[v] and not self.is_input[v]
        ]
        for v in self.recompute_closure(saved):
            if not self.can_recompute[v]:
                errors.append(
                    f"{self.names[v]} must be recomputed but cannot be ({self.reason[v]})"
                )
        return errors
