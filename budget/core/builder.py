"""The one way a :class:`~budget.core.problem.Problem` is built, row by row.

Both front ends feed it: the compiled path a joint graph's nodes
(:mod:`budget.compile.graph`), the eager path a traced step's op calls for a set of
checkpointed regions (:mod:`budget.eager.problem`). Each decides what a node is; the
builder keeps the Problem's parallel columns in step, numbers the storage groups and
counts each storage's bytes once.

Pure data: no torch. A node's price is anything with ``cost``, ``flops``,
``bytes_moved`` and ``note`` (:class:`budget.estimators.NodeCost`).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Protocol

from .problem import Problem


class Priced(Protocol):
    cost: float
    flops: float
    bytes_moved: float
    note: str


class ProblemBuilder:
    """Rows of a Problem, added one node at a time, in the Problem's node order."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._columns: dict[str, list] = {
            c: []
            for c in (
                "ops",
                "modules",
                "is_input",
                "needed",
                "can_save",
                "can_recompute",
                "reason",
                "storage",
                "cost",
                "flops",
                "moved",
                "cost_notes",
            )
        }
        self.storage_bytes: list[int] = []
        self._groups: dict[Hashable, int] = {}
        self._members: set[Hashable] = set()

    @property
    def n(self) -> int:
        return len(self.names)

    # ---- storages -------------------------------------------------------------------------

    def storage(self, group: Hashable, nbytes: int, *, member: Hashable | None = None) -> int:
        """The id of storage group ``group`` (made on first use). The group's bytes are the
        sum of its member storages' (``member``, by default the group itself), each
        counted once, at the ``nbytes`` given when it is first seen (0: memory no plan
        frees, such as a graph input's)."""
        if group not in self._groups:
            self._groups[group] = len(self.storage_bytes)
            self.storage_bytes.append(0)
        gid = self._groups[group]
        key = (group, group if member is None else member)
        if key[1] not in self._members:
            self._members.add(key[1])
            self.storage_bytes[gid] += int(nbytes)
        return gid

    def new_storage(self, nbytes: int) -> int:
        """A storage group of its own (a value no other shares, such as an RNG state)."""
        return self.storage(("new", len(self.storage_bytes)), nbytes)

    # ---- rows -----------------------------------------------------------------------------

    def add_kept(
        self,
        name: str,
        *,
        op: str,
        storage: int,
        needed: bool,
        reason: str,
        module: str = "",
        is_input: bool = False,
    ) -> int:
        """A node every plan has as it is and never recomputes, at no cost: a graph input
        (``is_input``), or a value made without an op to run again. Returns its index."""
        free = _Free()
        return self._add(name, op, module, is_input, needed, True, False, reason, storage, free)

    def add_value(
        self,
        name: str,
        *,
        op: str,
        storage: int,
        needed: bool,
        can_save: bool,
        can_recompute: bool,
        reason: str,
        priced: Priced,
        module: str = "",
    ) -> int:
        """A value the plan decides on: saved, recomputed at ``priced.cost``, or (when the
        backward does not need it) neither. ``reason``: why a decision is forbidden."""
        return self._add(
            name, op, module, False, needed, can_save, can_recompute, reason, storage, priced
        )

    def _add(
        self,
        name: str,
        op: str,
        module: str,
        is_input: bool,
        needed: bool,
        can_save: bool,
        can_recompute: bool,
        reason: str,
        storage: int,
        priced: Priced,
    ) -> int:
        row = {
            "ops": op,
            "modules": module,
            "is_input": is_input,
            "needed": needed,
            "can_save": can_save,
            "can_recompute": can_recompute,
            "reason": reason,
            "storage": storage,
            "cost": priced.cost,
            "flops": priced.flops,
            "moved": priced.bytes_moved,
            "cost_notes": priced.note,
        }
        for column, value in row.items():
            self._columns[column].append(value)
        self.names.append(name)
        return self.n - 1

    # ---- the Problem ----------------------------------------------------------------------

    def build(
        self,
        edges: Iterable[tuple[int, int]],
        *,
        cost_unit: str,
        reference_saved: Iterable[int] = (),
        graph_hash: str = "",
        data_dependent: dict[str, str] | None = None,
    ) -> Problem:
        """The Problem of the rows added; ``edges``: (u, v) where u is an input of v;
        ``data_dependent``: how the rows whose sizes depend on tensor values are priced,
        by name, ``"bounded"`` or ``"guessed"`` (Problem.bounded_sizes, guessed_sizes)."""
        how = data_dependent or {}
        return Problem(
            names=list(self.names),
            edges=list(edges),
            storage_bytes=list(self.storage_bytes),
            cost_unit=cost_unit,
            reference_saved=sorted(set(reference_saved)),
            graph_hash=graph_hash,
            bounded_sizes=[n for n, h in how.items() if h == "bounded"],
            guessed_sizes=[n for n, h in how.items() if h == "guessed"],
            **{column: list(values) for column, values in self._columns.items()},
        )


class _Free:
    cost = 0.0
    flops = 0.0
    bytes_moved = 0.0
    note = ""
