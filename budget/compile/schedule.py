"""Recompute a value again rather than hold it: lower the peak of a partitioned backward.

A plan recomputes each value it does not save once, in the backward, just before its first
reader (torch's ``reordering_to_mimic_autograd_engine``). With little saved that is not
enough to keep the peak down: at b=0 (only the inputs saved) the last layer's gradient
needs the whole forward recomputed, and each recomputed value then stays alive until its
own layer's gradient reads it, so the backward holds the whole forward again and the step
peaks as high as saving everything, or higher (``python bench/peak.py``).
Checkmate's answer is to recompute a value more than once: free it after its early
readers and recompute it, from what is alive then, just before its late ones.

:func:`lower_peak` does that greedily on the backward graph, against the peak model of
:mod:`budget.compile.peak`: at the step where the predicted peak is, it takes a recomputed
value that is alive there but not read there, rewires its readers after that step to a
fresh recomputation placed just before the first of them (recomputing, in turn, whatever
that needs and would no longer be alive), and keeps the change when the peak (or, at
equal peak, the bytes above the limit summed over the steps) went down. Cheapest
recomputation per byte first, but values too small to matter last (a batch norm's
statistics: under 1/64 of the way to the limit; first, the rescheduler spent its rounds
shaving 256 bytes at a time off the peak, and stopped higher); it stops at the limit,
when none of the 8 first candidates helps, or after ``max_rounds`` changes. Only pure
ops are recomputed again (no random, mutating or communicating op, no higher-order op),
so the values, and the gradients, are unchanged.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch.fx as fx

from ..core.plan import LivePoint
from ..estimators.ops import is_collective, is_mutating, is_random
from ..runtime._torch_private import OpOverload
from ..runtime.values import tensors
from .clone_values import fresh_val
from .peak import Memo, PeakPrediction, node_storages

Predict = Callable[[fx.GraphModule, frozenset[str]], PeakPrediction]


@dataclass
class Lowered:
    """What :func:`lower_peak` did to the backward."""

    prediction: PeakPrediction
    # the forward value behind each extra recomputation (one name per new node)
    again: list[str] = field(default_factory=list)
    # the new nodes' names in the backward, in the order of ``again``
    nodes: list[str] = field(default_factory=list)


def _clonable(node: fx.Node) -> bool:
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return True
    return (
        isinstance(node.target, OpOverload)
        and not is_mutating(node)
        and not is_random(node)
        and not is_collective(node)
    )


def _freed_at(
    value: fx.Node,
    at: int,
    late: set[fx.Node],
    pos: dict[fx.Node, int],
    holders: dict[int, list[fx.Node]],
    storages: dict[fx.Node, list[tuple[int, int]]],
) -> int:
    """Bytes of ``value``'s storages that no node reads at or after position ``at`` once
    its ``late`` readers read a recomputation instead (what the change frees there).

    A late reader that is a view of ``value`` (``alias``, which the joint graph puts
    between a ReLU and its backward's ``le``) takes the recomputation's storage with it,
    and so do the views of it: their readers no longer read ``value``'s."""
    freed = 0
    for s in storages[value]:
        moved = set(late)
        for h in holders.get(s[0], []):  # in graph order: a view after its base
            if any(a in moved and a in holders[s[0]] for a in h.all_input_nodes):
                moved.add(h)
        readers = (u for h in holders.get(s[0], []) if h not in moved for u in h.users)
        if not any(pos[u] >= at and u not in moved for u in readers):
            freed += s[1]
    return freed


class _Unrunnable(Exception):
    """A clone whose op fake tensors cannot run: its candidate is skipped."""


class _Rewrite:
    """One candidate change, applied to the graph and undoable."""

    def __init__(self) -> None:
        self.inserted: list[fx.Node] = []
        self.rewired: list[tuple[fx.Node, fx.Node, fx.Node]] = []  # user, old, new
        self.revalued: list[tuple[fx.Node, object]] = []  # view, its value before

    def undo(self, graph: fx.Graph) -> None:
        for view, val in reversed(self.revalued):
            view.meta["val"] = val
        for user, old, new in reversed(self.rewired):
            user.replace_input_with(new, old)
        for node in reversed(self.inserted):
            graph.erase_node(node)


def _plan_clones(
    value: fx.Node,
    start: int,
    late: set[fx.Node],
    pos: dict[fx.Node, int],
    recomputed: frozenset[str],
    holders: dict[int, list[fx.Node]],
    storages: dict[fx.Node, list[tuple[int, int]]],
) -> list[fx.Node] | None:
    """The nodes to recompute again (in graph order) so that ``value`` can be had at
    position ``start`` for the readers ``late``; None when one of them cannot be."""

    def alive(node: fx.Node) -> bool:
        if node.op == "placeholder" or node.name not in recomputed:
            return True  # inputs and backward values: reading them later only extends them
        if node is value:
            return False
        readers = [u for u in node.users if u not in late]
        readers += [u for s in storages[node] for h in holders.get(s[0], []) for u in h.users]
        return any(pos[u] >= start and u not in late for u in readers)

    need: dict[fx.Node, None] = {}
    stack = [value]
    while stack:
        node = stack.pop()
        if node in need:
            continue
        if not _clonable(node):
            return None
        need[node] = None
        stack += [a for a in node.all_input_nodes if not alive(a)]
    return sorted(need, key=lambda n: pos[n])


def _apply(
    graph: fx.Graph,
    clones: list[fx.Node],
    value: fx.Node,
    late: list[fx.Node],
    origin: dict[str, str],
) -> _Rewrite:
    rewrite = _Rewrite()
    env: dict[fx.Node, fx.Node] = {}
    with graph.inserting_before(late[0]):
        for node in clones:
            new = graph.node_copy(node, lambda a: env.get(a, a))
            rewrite.inserted.append(new)
            try:
                new.meta = {**node.meta, "val": fresh_val(new, node)}
            except Exception as e:  # an op fake tensors cannot run: not this candidate
                rewrite.undo(graph)
                raise _Unrunnable(f"{node.name}: {e}") from e
            env[node] = new
            origin[new.name] = origin.get(node.name, node.name)
    for user in late:
        user.replace_input_with(value, env[value])
        rewrite.rewired.append((user, value, env[value]))
    try:
        _revalue_views(value, late, rewrite)
    except _Unrunnable:
        rewrite.undo(graph)
        raise
    return rewrite


def _revalue_views(value: fx.Node, late: list[fx.Node], rewrite: _Rewrite) -> None:
    """A late reader that is a view of ``value`` (the ``alias`` the joint graph puts between
    a ReLU and its backward's ``le``) now views the recomputation, and so do the views of
    it: their fake values are made again from their new arguments, so that they share the
    recomputation's storage, not ``value``'s, as they will when the graph runs."""
    raws = {raw for raw, _ in node_storages(value)}
    stale = [u for u in late if any(raw in raws for raw, _ in node_storages(u))]
    seen: set[fx.Node] = set()
    while stale:
        view = stale.pop(0)
        if view in seen:
            continue
        seen.add(view)
        try:
            val = fresh_val(view)
        except Exception as e:  # an op fake tensors cannot run: not this candidate
            raise _Unrunnable(f"{view.name}: {e}") from e
        rewrite.revalued.append((view, view.meta.get("val")))
        view.meta["val"] = val
        stale += [u for u in view.users if any(raw in raws for raw, _ in node_storages(u))]


def _excess(prediction: PeakPrediction, limit: int) -> int:
    return sum(max(0, b - limit) for b in prediction.live or [])


def lower_peak(
    bw: fx.GraphModule,
    recomputed: frozenset[str],
    limit: int,
    predict: Predict,
    cost: Mapping[str, float],
    *,
    fw_steps: int,
    max_rounds: int = 500,
    aim: int | None = None,
) -> Lowered | None:
    """Recompute values of ``bw`` again until the predicted peak is at most ``limit``.

    ``recomputed``: the names of ``bw``'s nodes that recompute forward values (the only
    ones recomputed again). ``predict(bw, recomputed)``: the step's peak with this backward.
    ``cost``: each recomputed node's cost (by its name in ``bw``). ``fw_steps``: how many of
    the prediction's steps are the forward's. ``aim``: the level the rewrites are ranked
    and judged by (by default ``limit``): a change that keeps the peak is taken where it
    lowers the bytes held above that level over the whole backward, and what is small
    beside the excess over it ranks last; aimed lower, the path goes deeper. Changes ``bw``
    in place and returns what it did, or returns None with ``bw`` unchanged when no change
    lowered the peak.
    """
    graph = bw.graph
    origin: dict[str, str] = {}
    kept: list[_Rewrite] = []
    memo = Memo()  # each node's storages, read once per value
    best = predict(bw, recomputed)
    start_peak = best.peak_bytes
    level = limit if aim is None else aim
    for _ in range(max_rounds):
        if best.peak_bytes <= limit or best.peak_step < fw_steps:
            break  # low enough, or the peak is in the forward, which this cannot lower
        at = list(graph.nodes)[best.peak_step - fw_steps]
        options = _options(graph, at, recomputed, memo, origin, cost, best.peak_bytes - level)
        for value, clones, late in options[:8]:
            try:
                rewrite = _apply(graph, clones, value, late, origin)
            except _Unrunnable:
                continue
            names = recomputed | {n.name for n in rewrite.inserted}
            trial = predict(bw, names)
            if (trial.peak_bytes, _excess(trial, level)) < (best.peak_bytes, _excess(best, level)):
                best, recomputed = trial, names
                kept.append(rewrite)
                break
            rewrite.undo(graph)
        else:
            break  # no change helps
    if best.peak_bytes >= start_peak:  # at best spread the same peak thinner: not worth it
        for rewrite in reversed(kept):
            rewrite.undo(graph)
        return None
    bw.recompile()
    new = [n.name for rewrite in kept for n in rewrite.inserted]
    # the timeline names each recomputation by the forward value it makes again
    names = set(new)  # a clone's name can be a forward node's too: only its own points
    best.timeline = [
        LivePoint(origin[p.node], p.phase, p.live_bytes)
        if p.phase == "recompute" and p.node in names
        else p
        for p in best.timeline
    ]
    return Lowered(best, [origin[n] for n in new], new)


def _options(
    graph: fx.Graph,
    at: fx.Node,
    recomputed: frozenset[str],
    memo: Memo,
    origin: Mapping[str, str],
    cost: Mapping[str, float],
    excess: int,
) -> list[tuple[fx.Node, list[fx.Node], list[fx.Node]]]:
    """The rewrites that may lower the peak at ``at`` (``excess`` bytes over the limit),
    best first: each a recomputed value alive there but not read there, the clones that
    would make it again, and its readers after ``at`` that would read them. Values whose
    storage is freed through the peak rank first, then by price per byte freed (a value
    under 1/64 of the excess last), then by place."""
    nodes = list(graph.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    storages = {n: node_storages(n, memo) for n in nodes}
    holders: dict[int, list[fx.Node]] = {}
    for n in nodes:
        for raw, _ in storages[n]:
            holders.setdefault(raw, []).append(n)
    options = []
    for value in nodes[: pos[at]]:
        if value.name not in recomputed or at in value.users:
            continue
        late = sorted((u for u in value.users if pos[u] > pos[at]), key=pos.__getitem__)
        if not late:
            continue
        size = _freed_at(value, pos[at], set(late), pos, holders, storages)
        if size == 0:  # another reader keeps its storage alive through the peak
            continue
        clones = _plan_clones(value, pos[late[0]], set(late), pos, recomputed, holders, storages)
        if clones is not None:
            price = sum(cost.get(origin.get(c.name, c.name), 0.0) for c in clones)
            small = size * 64 < excess
            options.append((small, price / size, pos[value], value, clones, late))
    options.sort(key=lambda o: (o[0], o[1], o[2]))
    return [(value, clones, late) for *_, value, clones, late in options]


PIN_AFTER = "budget_pin_after"
"""Node meta: the names of the nodes this one may be made to wait for in the code Inductor
makes, nearest first (:mod:`budget.compile.pins` takes the nearest its rewrites kept; a
node its rewrites replace goes unpinned: the replacement carries no meta of it)."""
_ANCHORS = 4  # how many, in case Inductor's rewrites replace the nearest (mm + add: addmm)


def pin_order(bw: fx.GraphModule, again: set[str]) -> int:
    """Mark the extra recomputations ``again`` (node names of ``bw``) to be kept where they
    are under Inductor (``PIN_AFTER``, which :mod:`budget.compile.pins` turns into
    ordering edges in the graph Inductor lowers); returns how many nodes it marked.

    Inductor schedules a backward by its data dependencies, not its order: it fused an
    extra recomputation with the first one (they read the same batch-norm statistics, so
    the fusion scores well), and so ran it early, with the convolutions it needs: both
    copies were then alive together, and the step peaked higher than with none (the bench
    convnet at a 30 MiB target: 42.05 MiB compiled against 29.94 MiB predicted). Each
    extra recomputation is to wait, with Inductor's ``control_deps`` (what Inductor
    uses to keep random ops in program order), for the last node before it that computes a
    tensor of its own. That binds the ops Inductor lowers to operations of their own
    (convolutions, matmuls and other extern kernels): a pointwise op that Inductor inlines
    into a fused kernel gets no operation, so the dependency attaches to nothing, and it
    can still run early, though never before the pinned kernels it reads. With the pins
    the same plan compiled to 35.43 MiB, and the plan that met the target to 28.46 MiB
    against 23.99 predicted: better, not the prediction. The values are unchanged."""
    marked = 0
    anchors: list[str] = []  # the latest last
    for node in bw.graph.nodes:
        if node.name in again:
            if node.target is operator.getitem or not tensors(node.meta.get("val")):
                continue  # a view of a pinned node, or a size: nothing to allocate early
            if anchors:
                node.meta[PIN_AFTER] = tuple(reversed(anchors[-_ANCHORS:]))
                marked += 1
        elif _anchor(node):
            anchors.append(node.name)
    return marked


def _anchor(node: fx.Node) -> bool:
    """A node an extra recomputation can wait for: an op that makes a tensor and is not a
    view of another. Inductor computes a node that is waited for into a buffer of its own
    (``control_deps`` realizes it), which a pointwise op fused into its reader would not
    have had, alive until its readers have run (in a backward, usually the next nodes), and a
    fusion fewer; the compiled peak (:mod:`budget.compile.compiled_peak`) counts it."""
    if node.op != "call_function" or not tensors(node.meta.get("val")):
        return False
    if node.target is operator.getitem:
        return True
    return isinstance(node.target, OpOverload) and not node.target.is_view
