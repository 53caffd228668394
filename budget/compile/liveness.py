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

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import torch.fx as fx

from ..core.liveness import BoundRow, Event, Literal, LivenessBound, RecomputeRow
from ..runtime import _torch_private as T
from ..runtime.values import storage_of
from .peak import node_storages

Interval = tuple[int, int, int]  # (raw storage, first step, last step), both ends included


def liveness_bound(
    graph: fx.Graph, node_info: T.NodeInfo, nodes: list[fx.Node], num_fwd_outputs: int
) -> LivenessBound:
    """The bound for ``graph``'s plans; ``nodes``: the fx node of each problem index
    (:func:`budget.compile.graph.build_problem`)."""
    index = {n: i for i, n in enumerate(nodes)}
    inputs = set(node_info.inputs)
    free = {st[0] for n in inputs if (st := storage_of(n.meta.get("val"))) is not None}
    sizes: dict[int, int] = {}

    def raws(node: fx.Node) -> list[int]:
        """The storages ``node`` makes or views, each once, graph inputs' left out."""
        out = []
        for raw, nbytes in node_storages(node):
            if raw not in free and raw not in out:
                sizes[raw] = nbytes
                out.append(raw)
        return out

    # forward values (the problem's nodes, inputs aside) in the graph's order
    forward = [n for n in graph.nodes if n in index and n not in inputs]
    fpos = {n: i for i, n in enumerate(forward)}
    end = len(forward)
    output = next(iter(graph.find_nodes(op="output")))
    outs = output.args[0] if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    user = [a for a in outs[:num_fwd_outputs] if isinstance(a, fx.Node) and a in fpos]
    # the new values of mutated inputs are copied into them as the forward returns: they
    # run in every forward but are not held into the backward (compile/peak.py)
    dropped = T.input_mutation_outputs(output)
    held = [
        a
        for j, a in enumerate(outs[:num_fwd_outputs])
        if isinstance(a, fx.Node) and a in fpos and j not in dropped
    ]

    # storages of the values a plan may save: their bytes, members, first forward step
    key: dict[int, int] = {}
    members: list[list[int]] = []  # per storage, its values' problem indices
    enters: list[int] = []
    for n in forward:
        for raw in raws(n):
            if raw not in key:
                key[raw] = len(members)
                members.append([])
                enters.append(fpos[n])
            members[key[raw]].append(index[n])

    # forward: what the user's outputs are computed from runs in every plan's forward
    always: set[fx.Node] = set()
    stack = list(user)
    while stack:
        n = stack.pop()
        if n in always:
            continue
        always.add(n)
        stack.extend(a for a in n.all_input_nodes if a in fpos)
    events: list[list[tuple[int, Literal]]] = [[] for _ in members]
    readers: dict[int, list[int]] = {}
    for n in forward:
        ks = [key[raw] for raw in raws(n)]
        users = [u for u in n.users if u in fpos]
        readers[index[n]] = [index[u] for u in users]
        for k in ks:
            events[k] += [(fpos[u], ("1", 0) if u in always else ("x", index[u])) for u in users]
            events[k].append((end, ("1", 0) if n in user else ("s", index[n])))
    # backward: its nodes from the first reader of a tangent on, in the graph's order
    bw_nodes = node_info.required_bw_nodes
    tangents = [n for n in graph.find_nodes(op="placeholder") if n not in inputs]
    order = {n: i for i, n in enumerate(graph.nodes)}
    first_reads = [u for t in tangents for u in t.users if u.op != "output"]
    bw_events: list[list[Event]] = [[] for _ in members]
    storage_bytes = [sizes[raw] for raw in sorted(key, key=key.__getitem__)]
    copies: dict[int, int] = {}  # storage -> the backward's copy of its recomputed owner
    first_read: dict[fx.Node, int] = {}
    last_read: dict[fx.Node, int] = {}
    holders: dict[int, list[tuple[int, int, tuple[int, ...] | None]]] = {}
    rows: list[BoundRow] = []
    recompute_rows: list[RecomputeRow] = []
    walk: list[fx.Node] = []
    if first_reads:
        first = min(order[u] for u in first_reads)
        walk = [n for n in graph.nodes if order[n] >= first and n in bw_nodes and n.op != "output"]
        bpos = {n: i for i, n in enumerate(walk)}
        bend = len(walk)

        def last_of(n: fx.Node, default: int) -> int:
            if output in n.users:
                return bend  # a gradient: to the end
            return max((bpos[u] for u in n.users if u in bpos), default=default)

        # what is alive as the backward starts (before its first node) starts at -1
        bw_live = [(raw, -1, bend) for n in held for raw in raws(n)]
        for t in tangents:  # autograd holds them until the backward returns
            bw_live += [(raw, -1, bend) for raw in raws(t)]
        for n in walk:
            bw_live += [(raw, bpos[n], last_of(n, bpos[n])) for raw in raws(n)]
            for a in n.all_input_nodes:
                if a in fpos:
                    bw_live += [(raw, bpos[n], bpos[n]) for raw in raws(a)]
                    first_read.setdefault(a, bpos[n])
                    last_read[a] = bpos[n]
        # A recomputed value runs no earlier than just before the first backward node
        # that reads it or a value computed from it (needed_at), and a plan first needs
        # it at its home unless it recomputes a value made from it that an earlier node
        # reads.
        needed_at: dict[fx.Node, int] = {}
        home: dict[fx.Node, int] = {}
        for n in reversed(forward):
            times = [needed_at[u] for u in n.users if u in needed_at]
            homes = [home[u] for u in n.users if u in home]
            if n in first_read:
                times.append(first_read[n])
            if times:
                needed_at[n] = min(times)
                home[n] = first_read[n] if n in first_read else min(homes)

        def copy_of(k: int) -> int:
            if k not in copies:
                copies[k] = len(storage_bytes)
                storage_bytes.append(storage_bytes[k])
                enters.append(end + 1)  # never in the forward
                events.append([])
                bw_events.append([])
            return copies[k]

        for n in forward:
            for raw in raws(n):
                k = key[raw]
                chain = _view_chain(n, raw, members[k][0], index, raws)
                copy = copy_of(k) if chain is not None else -1
                holders.setdefault(index[n], []).append((k, copy, chain))
                for use in _uses(n, index, first_read, last_read, needed_at, home):
                    # Alive in the storage that holds n: the forward's when n, or a value
                    # n is a view of (every view between recomputed), is saved, from the
                    # backward's start; else, all recomputed, the backward's copy.
                    for j, held in enumerate(chain or (index[n],)):
                        lit = ("AND", (held,), (chain or ())[:j] + use.feeds, (), use.later)
                        bw_events[k].append((-1, use.last, lit))
                    if chain is not None and use.first is not None:
                        lit = ("AND", (), chain + use.feeds, use.sooner, use.later)
                        bw_events[copy_of(k)].append((use.first, use.last, lit))
        rows = _rows(bw_live, bend, sizes, key, copies)
        recompute_rows = _recompute_rows(forward, home, bw_live, sizes, key, raws, index)
    return LivenessBound(
        storage_bytes=storage_bytes,
        storage_names=[nodes[m[0]].name for m in members]
        + [nodes[members[k][0]].name + " (recomputed)" for k in copies],
        enters=enters,
        forward_steps=end + 1,
        events=events,
        readers=readers,
        always={index[n] for n in always},
        bw_events=bw_events,
        copies=set(copies.values()),
        first_read={index[n]: t for n, t in first_read.items()},
        last_read={index[n]: t for n, t in last_read.items()},
        holders=holders,
        step={index[n]: t for n, t in fpos.items()},
        backward_nodes=[n.name for n in walk],
        rows=rows,
        recompute_rows=recompute_rows,
    )


def _rows(
    live: list[Interval],
    steps: int,
    sizes: dict[int, int],
    key: dict[int, int],
    copies: dict[int, int],
) -> list[BoundRow]:
    """One row per step: the bytes of the storages alive there (each storage once), and
    which of them are storages a plan may save or their copies (counted here already)."""
    spans: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for raw, a, b in live:
        if b >= 0:
            spans[raw].append((max(a, 0), min(b, steps - 1)))
    delta = [0] * (steps + 1)
    excluded: list[list[int]] = [[] for _ in range(steps)]
    for raw, intervals in spans.items():
        for a, b in _merge(intervals):
            delta[a] += sizes[raw]
            delta[b + 1] -= sizes[raw]
            if raw in key:
                for t in range(a, b + 1):
                    excluded[t].append(key[raw])
                    if key[raw] in copies:
                        excluded[t].append(copies[key[raw]])
    rows, const = [], 0
    for t in range(steps):
        const += delta[t]
        rows.append(BoundRow(t, const, tuple(sorted(excluded[t]))))
    return rows


def _merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _recompute_rows(
    forward: list[fx.Node],
    home: dict[fx.Node, int],
    live: list[Interval],
    sizes: dict[int, int],
    key: dict[int, int],
    raws: Callable[[fx.Node], list[int]],
    index: dict[fx.Node, int],
) -> list[RecomputeRow]:
    """A row for the moment a value is recomputed, when a plan first needs it at its home
    (it runs just before that node then): what is alive across that moment (before the
    home node and after it) is alive then, with the value and its inputs."""
    out = []
    for n in forward:
        if n not in home or not raws(n):
            continue
        at = home[n]
        across = {raw for raw, lo, hi in live if lo <= at - 1 and hi >= at}
        keys = {key[raw] for raw in across if raw in key}
        extra: list[tuple[int, Literal]] = [
            (key[raw], ("AND", (), (index[n],), (), ())) for raw in raws(n)
        ]
        for u in n.all_input_nodes:  # forward values (graph inputs have no storage here)
            for raw in raws(u):
                if raw in key and u in index:
                    extra.append((key[raw], ("AND", (), (index[u],), (), ())))
                    extra.append((key[raw], ("AND", (index[u],), (index[n],), (), ())))
        out.append(
            RecomputeRow(
                value=index[n],
                through=at,
                const=sum(sizes[raw] for raw in across),
                excluded=tuple(sorted(keys)),
                extra=tuple(e for e in extra if e[0] not in keys),
            )
        )
    return out


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
