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

The solvers and the planner read the graph and price plans through this class: the
adjacency lists (:attr:`Problem.inputs`, :attr:`Problem.users`,
:attr:`Problem.recompute_inputs`, built once and cached), a plan's recompute closure, its
cost and bytes (:meth:`~Problem.recompute_closure`, :meth:`~Problem.recompute_cost`,
:meth:`~Problem.saved_bytes`), its pruning and validity (:meth:`~Problem.prune_unused`,
:meth:`~Problem.check`), and the one infeasibility check (:meth:`~Problem.unplannable`,
:meth:`~Problem.require_plannable`).

The graph is fixed once a Problem is built: ``edges`` and ``is_input`` are read-only
views of the arrays given (assigning a new array to either drops the cached adjacency
lists). Nothing cached depends on the other arrays, which may be changed in place; a
variant of a Problem is best made with ``dataclasses.replace``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import InfeasibleError
from .offload import OffloadTerms

_CLOSURES_KEPT = 16  # recompute closures a Problem keeps (its latest saved sets)


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
    # Bytes every plan saves outside its decisions (Inductor's layout copies of graph
    # inputs: budget.compile.layout; the generator states of random ops a user's
    # checkpoint recomputes: budget.compile.rng_states). The planner adds them to every
    # plan's figures and takes them off the solvers' target; solvers never read them.
    fixed_bytes: int = 0
    rng_state_bytes: int = 0  # the generator states' part of fixed_bytes
    # What offloading each value to host memory costs (budget.core.offload), or None when
    # offload is not planned: solvers that plan it may then keep a saved value on the host.
    offload: OffloadTerms | None = None
    # names of the nodes whose sizes depend on tensor values (data-dependent ops such as
    # nonzero), which the graph does not know: priced at their upper bounds from torch's
    # value ranges (bounded), or where some symbol has none at a guess (guessed;
    # budget.runtime.values.data_dependent)
    bounded_sizes: list[str] = field(default_factory=list)
    guessed_sizes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.names)
        self.edges = _read_only(np.asarray(self.edges, dtype=np.int64).reshape(-1, 2))
        for name in ("is_input", "needed", "can_save", "can_recompute"):
            setattr(self, name, np.asarray(getattr(self, name), dtype=bool))
        self.is_input = _read_only(self.is_input)
        self.needed = _read_only(self.needed)
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
        if self.offload is not None:
            if len(self.offload.transfer) != n:
                raise ValueError(
                    f"Problem.offload has {len(self.offload.transfer)} entries, expected {n}"
                )
            owners = self.storage[self.offload.offloadable]
            if np.any(owners < 0) or len(set(owners.tolist())) != len(owners):
                raise ValueError(
                    "Problem.offload: an offloadable value needs a storage of its own among "
                    "the offloadable ones (one per storage)"
                )

    def __setattr__(self, name: str, value: object) -> None:
        super().__setattr__(name, value)
        if name in _GRAPH_FIELDS:  # a new graph: the cached lists and closures are stale
            for cached in _ADJACENCY:
                self.__dict__.pop(cached, None)

    @property
    def n(self) -> int:
        return len(self.names)

    # ---- the graph: adjacency lists, built once -----------------------------------------------

    @functools.cached_property
    def inputs(self) -> list[list[int]]:
        """For each node, the nodes it reads (sorted, without repeats)."""
        ins: list[list[int]] = [[] for _ in range(self.n)]
        for u, v in self.edges.tolist():
            ins[v].append(u)
        return [sorted(set(x)) for x in ins]

    @functools.cached_property
    def users(self) -> list[list[int]]:
        """For each node, the nodes that read it (sorted, without repeats)."""
        outs: list[list[int]] = [[] for _ in range(self.n)]
        for v, ins in enumerate(self.inputs):
            for u in ins:
                outs[u].append(v)
        return outs

    @functools.cached_property
    def recompute_inputs(self) -> list[list[int]]:
        """For each node, its inputs that are not graph inputs: what recomputing it needs
        saved or recomputed (sorted, without repeats)."""
        free = self.is_input.tolist()
        return [[u for u in ins if not free[u]] for ins in self.inputs]

    # ---- plans: a saved set, its recompute closure, its price ---------------------------------

    def node_bytes(self, v: int) -> int:
        g = int(self.storage[v])
        return int(self.storage_bytes[g]) if g >= 0 else 0

    def saved_bytes(self, saved: Iterable[int], offloaded: Iterable[int] = ()) -> int:
        """Device bytes held by saving ``saved`` of which ``offloaded`` is kept on the host:
        each storage counted once, input storages free, a storage on the device while any
        of its saved values is not offloaded."""
        away = set(offloaded)
        groups = {int(self.storage[v]) for v in saved if self.storage[v] >= 0 and v not in away}
        return int(sum(int(self.storage_bytes[g]) for g in groups))

    def kept_beside(self, saved: Iterable[int], offloaded: Iterable[int]) -> list[tuple[int, int]]:
        """The offloaded values ``v`` whose storage another saved value ``u`` keeps on the
        device, as ``(v, u)``: such an offload frees nothing, and torch's asynchronous pass
        frees the storage (``resize_(0)``) under ``u``."""
        away = set(offloaded)
        kept = {int(self.storage[u]): u for u in sorted(set(saved) - away) if self.storage[u] >= 0}
        return [
            (v, kept[int(self.storage[v])])
            for v in sorted(away)
            if self.storage[v] >= 0 and int(self.storage[v]) in kept
        ]

    def freeing(self, saved: Iterable[int], offloaded: Iterable[int]) -> list[int]:
        """``offloaded`` (sorted) without those :meth:`kept_beside` another saved value:
        the offloads that free device memory (a solver may pick a useless one whose copy
        is hidden, at no cost)."""
        saved, offloaded = list(saved), set(offloaded)
        beside = {v for v, _ in self.kept_beside(saved, offloaded)}
        return sorted(offloaded - beside)

    def host_bytes(self, offloaded: Iterable[int]) -> int:
        """Host bytes the offloaded values take (each storage once)."""
        groups = {int(self.storage[v]) for v in offloaded if self.storage[v] >= 0}
        return int(sum(int(self.storage_bytes[g]) for g in groups))

    def offload_cost(self, offloaded: Iterable[int]) -> float:
        """The exposed transfer time of offloading ``offloaded`` (0 when none is)."""
        chosen = list(offloaded)
        if not chosen:
            return 0.0
        if self.offload is None:
            raise ValueError("this problem does not plan offload (Problem.offload is None)")
        return self.offload.price(chosen)

    def recompute_closure(self, saved: Iterable[int]) -> list[int]:
        """Nodes the backward must recompute when exactly ``saved`` (plus inputs) is kept
        (sorted): every needed node not saved, then every input of a recomputed node that
        is neither saved nor a graph input, transitively.

        This is what the partitioner will do with the saved set, so plans report it rather
        than whatever a solver's ``r`` variables said. The last few are kept: a plan's
        check, pruning and price each ask for the same saved set.
        """
        kept = frozenset(saved)
        known = self._closures.get(kept)
        if known is not None:
            return list(known)
        ins = self.recompute_inputs
        out: set[int] = set()
        stack = [v for v in self._roots if v not in kept]
        while stack:
            v = stack.pop()
            if v in out:
                continue
            out.add(v)
            stack.extend(u for u in ins[v] if u not in kept and u not in out)
        if len(self._closures) >= _CLOSURES_KEPT:
            del self._closures[next(iter(self._closures))]  # the oldest
        closure = self._closures[kept] = sorted(out)
        return list(closure)

    @functools.cached_property
    def _roots(self) -> list[int]:
        """The nodes the backward reads that are not graph inputs."""
        return np.flatnonzero(self.needed & ~self.is_input).tolist()

    @functools.cached_property
    def _closures(self) -> dict[frozenset[int], list[int]]:
        """Recompute closures asked for lately, by saved set (:meth:`recompute_closure`)."""
        return {}

    def recompute_cost(self, saved: Iterable[int]) -> float:
        """The plan's recompute cost: the summed ``cost`` of its recompute closure."""
        return float(self.cost[self.recompute_closure(saved)].sum())

    def recompute_flops(self, saved: Iterable[int]) -> float:
        """The FLOPs of the plan's recompute closure (shown beside its cost)."""
        return float(self.flops[self.recompute_closure(saved)].sum())

    def prune_unused(self, saved: Iterable[int], closure: Sequence[int] | None = None) -> list[int]:
        """``saved`` without the nodes neither the backward nor any recomputation reads
        (sorted). ``closure``: the recompute closure of ``saved``, when the caller has it."""
        keep = set(saved)
        if closure is None:
            closure = self.recompute_closure(keep)
        ins = self.inputs
        used = {v for v in keep if self.needed[v]}
        for v in closure:
            used.update(u for u in ins[v] if u in keep)
        return sorted(used)

    def check(self, saved: Iterable[int], offloaded: Iterable[int] = ()) -> list[str]:
        """Reasons ``saved`` (``offloaded`` of it kept on the host) is not a valid plan
        (empty when valid). Memory is not checked; offloadability only where the problem
        prices offload."""
        saved = set(saved)
        # where offload is not priced (a plan file applied), what torch's offload pass can
        # move is its own check (budget.compile.split)
        can_offload = (
            self.offload.offloadable if self.offload is not None else np.ones(self.n, bool)
        )
        errors = [
            f"{self.names[v]} offloaded but "
            + ("not saved" if v not in saved else "cannot be offloaded")
            for v in sorted(set(offloaded))
            if v not in saved or not can_offload[v]
        ]
        errors += [
            f"{self.names[v]} offloaded but {self.names[u]}, a view of its storage, is saved "
            "on the device (the offload would free the storage under it)"
            for v, u in self.kept_beside(saved, offloaded)
        ]
        errors += [
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

    # ---- infeasibility -----------------------------------------------------------------------

    def unplannable(self) -> list[int]:
        """The needed nodes (not graph inputs) that can be neither saved nor recomputed:
        when there is one, no plan exists at any memory size."""
        stuck = self.needed & ~self.is_input & ~self.can_save & ~self.can_recompute
        return np.flatnonzero(stuck).tolist()

    def require_plannable(self) -> None:
        """Raise :class:`~budget.errors.InfeasibleError` naming the first
        :meth:`unplannable` node, if there is one."""
        stuck = self.unplannable()
        if stuck:
            v = stuck[0]
            raise InfeasibleError(
                f"{self.names[v]} is needed by the backward but can be neither saved "
                f"nor recomputed ({self.reason[v]})"
            )


# what the adjacency lists and recompute closures are built from
_GRAPH_FIELDS = frozenset({"edges", "is_input", "needed"})
_ADJACENCY = ("inputs", "users", "recompute_inputs", "_roots", "_closures")


def _read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (the caller's array itself stays writable)."""
    view = a.view()
    view.flags.writeable = False
    return view
