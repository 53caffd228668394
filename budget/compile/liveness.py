"""Joint fx graph -> :class:`~budget.core.liveness.LivenessBound`: the rows of a bound below
every plan's predicted peak, for the exact peak search.

The order the bound follows is the one the partitioned graphs run in, whatever the plan:
the forward runs the joint graph's forward nodes in their order (those it needs), and the
backward runs the joint graph's backward nodes from the first reader of a tangent on, in
their order, with recomputations inserted before their readers (torch's
``reordering_to_mimic_autograd_engine``, which keeps the backward nodes' relative order, and
:mod:`budget.compile.schedule`, which only adds recomputations). Backward nodes before the
first reader of a tangent move to where they are first needed; the bound leaves them out.
Storages are counted as :func:`budget.compile.peak.predict_peak` counts them: once per
storage (views share it), the storages of the graph inputs resident and free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch.fx as fx

from ..core.liveness import BoundRow, Event, Literal, LivenessBound, RecomputeRow
from ..runtime import _torch_private as T
from ..runtime.values import storage_of
from .bound_rows import Interval, recompute_rows, rows
from .peak import node_storages


def liveness_bound(
    graph: fx.Graph,
    node_info: T.NodeInfo,
    nodes: list[fx.Node],
    num_fwd_outputs: int,
    outputs_held: bool = True,
) -> LivenessBound:
    """The bound for ``graph``'s plans; ``nodes``: the fx node of each problem index
    (:func:`budget.compile.graph.build_problem`); ``outputs_held``: the user's outputs live
    to the step's end (not where the graph ends at a graph break: compile/peak.py)."""
    f = _Forward(graph, node_info, nodes, num_fwd_outputs, outputs_held)
    b = _Backward(f, graph, node_info)
    return LivenessBound(
        storage_bytes=f.storage_bytes,
        storage_names=[nodes[m[0]].name for m in f.members]
        + [nodes[f.members[k][0]].name + " (recomputed)" for k in b.copies],
        enters=f.enters,
        forward_steps=f.end + 1,
        events=f.events,
        readers=f.readers,
        always={f.index[n] for n in f.always},
        bw_events=b.bw_events,
        copies=set(b.copies.values()),
        first_read={f.index[n]: t for n, t in b.first_read.items()},
        last_read={f.index[n]: t for n, t in b.last_read.items()},
        holders=b.holders,
        step={f.index[n]: t for n, t in f.fpos.items()},
        backward_nodes=[n.name for n in b.walk],
        rows=b.rows,
        recompute_rows=b.recompute_rows,
    )


class _Forward:
    """The forward's side of the bound: the storages a plan may save (their bytes, values
    and first step) and, per storage, the forward steps that read it under which plans."""

    def __init__(
        self,
        graph: fx.Graph,
        node_info: T.NodeInfo,
        nodes: list[fx.Node],
        num_fwd_outputs: int,
        outputs_held: bool = True,
    ) -> None:
        self.index = {n: i for i, n in enumerate(nodes)}
        self.inputs = set(node_info.inputs)
        self.free = {st[0] for n in self.inputs if (st := storage_of(n.meta.get("val")))}
        self.sizes: dict[int, int] = {}
        # forward values (the problem's nodes, inputs aside) in the graph's order
        self.forward = [n for n in graph.nodes if n in self.index and n not in self.inputs]
        self.fpos = {n: i for i, n in enumerate(self.forward)}
        self.end = len(self.forward)
        self.output = next(iter(graph.find_nodes(op="output")))
        out = self.output.args[0]
        outs = (out if isinstance(out, (list, tuple)) else [out])[:num_fwd_outputs]
        self.user = [a for a in outs if isinstance(a, fx.Node) and a in self.fpos]
        # the new values of mutated inputs are copied into them as the forward returns:
        # they run in every forward but are not held into the backward (compile/peak.py)
        dropped = T.input_mutation_outputs(self.output)
        held = outs if outputs_held else []
        self.held = [a for j, a in enumerate(held) if a in self.user and j not in dropped]
        self._storages()
        self._events()

    def raws(self, node: fx.Node) -> list[int]:
        """The storages ``node`` makes or views, each once, graph inputs' left out."""
        out = []
        for raw, nbytes in node_storages(node):
            if raw not in self.free and raw not in out:
                self.sizes[raw] = nbytes
                out.append(raw)
        return out

    def _storages(self) -> None:
        """Storages of the values a plan may save: their bytes, members, first step."""
        self.key: dict[int, int] = {}
        self.members: list[list[int]] = []  # per storage, its values' problem indices
        self.enters: list[int] = []
        for n in self.forward:
            for raw in self.raws(n):
                if raw not in self.key:
                    self.key[raw] = len(self.members)
                    self.members.append([])
                    self.enters.append(self.fpos[n])
                self.members[self.key[raw]].append(self.index[n])
        self.storage_bytes = [self.sizes[raw] for raw in sorted(self.key, key=self.key.get)]

    def _events(self) -> None:
        """Per storage, the forward steps that read it, under which plans: what the user's
        outputs are computed from runs in every plan's forward (``always``)."""
        self.always: set[fx.Node] = set()
        stack = list(self.user)
        while stack:
            n = stack.pop()
            if n in self.always:
                continue
            self.always.add(n)
            stack.extend(a for a in n.all_input_nodes if a in self.fpos)
        self.events: list[list[tuple[int, Literal]]] = [[] for _ in self.members]
        self.readers: dict[int, list[int]] = {}
        fpos, index = self.fpos, self.index
        for n in self.forward:
            users = [u for u in n.users if u in fpos]
            self.readers[index[n]] = [index[u] for u in users]
            for k in (self.key[raw] for raw in self.raws(n)):
                self.events[k] += [
                    (fpos[u], ("1", 0) if u in self.always else ("x", index[u])) for u in users
                ]
                self.events[k].append((self.end, ("1", 0) if n in self.user else ("s", index[n])))


class _Backward:
    """The backward's side: its nodes from the first reader of a tangent on, in the
    graph's order; what is alive at each of its steps under which plans, recomputed
    values in a storage of their own (``copies``)."""

    def __init__(self, f: _Forward, graph: fx.Graph, node_info: T.NodeInfo) -> None:
        self.f = f
        self.bw_events: list[list[Event]] = [[] for _ in f.members]
        self.copies: dict[int, int] = {}  # storage -> the backward's copy of its owner
        self.first_read: dict[fx.Node, int] = {}
        self.last_read: dict[fx.Node, int] = {}
        self.holders: dict[int, list[tuple[int, int, tuple[int, ...] | None]]] = {}
        self.rows: list[BoundRow] = []
        self.recompute_rows: list[RecomputeRow] = []
        self.walk: list[fx.Node] = []
        tangents = [n for n in graph.find_nodes(op="placeholder") if n not in f.inputs]
        order = {n: i for i, n in enumerate(graph.nodes)}
        first_reads = [u for t in tangents for u in t.users if u.op != "output"]
        if not first_reads:
            return
        first = min(order[u] for u in first_reads)
        bw_nodes = node_info.required_bw_nodes
        self.walk = [
            n for n in graph.nodes if order[n] >= first and n in bw_nodes and n.op != "output"
        ]
        bw_live = self._live(tangents)
        needed_at, home = self._needed_at_and_home()
        for n in f.forward:
            self._uses_of(n, needed_at, home)
        self.rows = rows(bw_live, len(self.walk), f.sizes, f.key, self.copies)
        self.recompute_rows = recompute_rows(
            f.forward, home, bw_live, f.sizes, f.key, f.raws, f.index
        )

    def _live(self, tangents: list[fx.Node]) -> list[Interval]:
        """What is alive in the backward, from when to when; what is alive as it starts
        (before its first node) starts at -1."""
        f, bpos = self.f, {n: i for i, n in enumerate(self.walk)}
        bend = len(self.walk)

        def last_of(n: fx.Node, default: int) -> int:
            if f.output in n.users:
                return bend  # a gradient: to the end
            return max((bpos[u] for u in n.users if u in bpos), default=default)

        live = [(raw, -1, bend) for n in f.held for raw in f.raws(n)]
        for t in tangents:  # the loss's gradient until the backward returns (peak.py)
            last = bend if T.tangent_held(t.meta.get("val")) else last_of(t, -1)
            live += [(raw, -1, last) for raw in f.raws(t)]
        for n in self.walk:
            live += [(raw, bpos[n], last_of(n, bpos[n])) for raw in f.raws(n)]
            for a in n.all_input_nodes:
                if a in f.fpos:
                    live += [(raw, bpos[n], bpos[n]) for raw in f.raws(a)]
                    self.first_read.setdefault(a, bpos[n])
                    self.last_read[a] = bpos[n]
        return live

    def _needed_at_and_home(self) -> tuple[dict[fx.Node, int], dict[fx.Node, int]]:
        """A recomputed value runs no earlier than just before the first backward node
        that reads it or a value computed from it (``needed_at``), and a plan first needs
        it at its ``home`` unless it recomputes a value made from it that an earlier node
        reads."""
        needed_at: dict[fx.Node, int] = {}
        home: dict[fx.Node, int] = {}
        for n in reversed(self.f.forward):
            times = [needed_at[u] for u in n.users if u in needed_at]
            homes = [home[u] for u in n.users if u in home]
            if n in self.first_read:
                times.append(self.first_read[n])
            if times:
                needed_at[n] = min(times)
                home[n] = self.first_read[n] if n in self.first_read else min(homes)
        return needed_at, home

    def _copy_of(self, k: int) -> int:
        f = self.f
        if k not in self.copies:
            self.copies[k] = len(f.storage_bytes)
            f.storage_bytes.append(f.storage_bytes[k])
            f.enters.append(f.end + 1)  # never in the forward
            f.events.append([])
            self.bw_events.append([])
        return self.copies[k]

    def _uses_of(self, n: fx.Node, needed_at: dict[fx.Node, int], home: dict[fx.Node, int]) -> None:
        f = self.f
        for raw in f.raws(n):
            k = f.key[raw]
            chain = _view_chain(n, raw, f.members[k][0], f.index, f.raws)
            copy = self._copy_of(k) if chain is not None else -1
            self.holders.setdefault(f.index[n], []).append((k, copy, chain))
            for use in _uses(n, f.index, self.first_read, self.last_read, needed_at, home):
                # Alive in the storage that holds n: the forward's when n, or a value n
                # is a view of (every view between recomputed), is saved, from the
                # backward's start; else, all recomputed, the backward's copy.
                for j, held in enumerate(chain or (f.index[n],)):
                    lit = ("AND", (held,), (chain or ())[:j] + use.feeds, (), use.later)
                    self.bw_events[k].append((-1, use.last, lit))
                if chain is not None and use.first is not None:
                    lit = ("AND", (), chain + use.feeds, use.sooner, use.later)
                    self.bw_events[self._copy_of(k)].append((use.first, use.last, lit))


def _view_chain(
    n: fx.Node,
    raw: int,
    owner: int,
    index: dict[fx.Node, int],
    raws: Callable[[fx.Node], list[int]],
) -> tuple[int, ...] | None:
    """``n`` and the values of its storage it is a view of, back to the one that made the
    storage (``owner``), as problem indices; None when the chain does not lead there."""
    chain = [index[n]]
    while chain[-1] != owner:
        base = next((a for a in n.all_input_nodes if a in index and raw in raws(a)), None)
        if base is None or len(chain) > 64:
            return None
        chain.append(index[base])
        n = base
    return tuple(chain)


@dataclass
class _Use:
    """The backward uses a value from row ``first`` (None: only known when saved) to row
    ``last``, when the values ``feeds`` are recomputed, each ``(v, t)`` of ``sooner`` is
    first needed at row t or earlier, and each of ``later`` at row t or later."""

    first: int | None
    last: int
    feeds: tuple[int, ...] = ()
    sooner: tuple[tuple[int, int], ...] = ()
    later: tuple[tuple[int, int], ...] = ()


def _uses(
    n: fx.Node,
    index: dict[fx.Node, int],
    first_read: dict[fx.Node, int],
    last_read: dict[fx.Node, int],
    needed_at: dict[fx.Node, int],
    home: dict[fx.Node, int],
) -> list[_Use]:
    """When the backward uses ``n``'s value, saved or recomputed once. Read by backward
    nodes: from its first reader (first needed earliest: from then) to its last. Feeding
    the recomputation of a value ``w``: until just before ``w`` is first needed, which is
    no earlier than ``w``'s earliest need (and at its home when not needed sooner); from
    ``n``'s home when ``n`` is first needed by then."""
    v = index[n]
    out: list[_Use] = []
    if n in first_read:
        first, last = first_read[n], last_read[n]
        out.append(_Use(first, last))
        if needed_at[n] < first:
            out.append(_Use(needed_at[n], last, sooner=((v, needed_at[n]),)))
    for w in n.users:
        if w not in home:
            continue
        u = index[w]
        for t in _need_times(w, first_read, needed_at, home):
            if t < 1:
                continue
            later = ((u, t),) if t > needed_at[w] else ()
            start = home.get(n, t)
            if start <= t - 1:
                out.append(_Use(start, t - 1, (u,), ((v, start),), later))
            else:  # recomputed in the same batch as w: not alive at a node before it
                out.append(_Use(None, t - 1, (u,), (), later))
    return out


NEED_DEPTH = 4  # how far down its readers a value's possible first needs are looked for


def _need_times(
    w: fx.Node,
    first_read: dict[fx.Node, int],
    needed_at: dict[fx.Node, int],
    home: dict[fx.Node, int],
) -> list[int]:
    """Backward nodes at which a plan may first need ``w``: its earliest need, its home,
    and the first readers of the values computed from it, a few readers deep."""
    times = {needed_at[w], home[w]}
    level = {w}
    for _ in range(NEED_DEPTH):
        level = {u for n in level for u in n.users if u in home}
        times |= {first_read[u] for u in level if u in first_read}
    return sorted(t for t in times if t >= needed_at[w])
