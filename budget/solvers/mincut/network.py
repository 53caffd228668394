"""The cut network of the ``mincut`` solver, built from a Problem.

The network (sink side = "available in the backward"). Each non-input node v has two cut
labels: ``out_v`` on the sink side means v is available in the backward (saved or
recomputed), ``in_v`` on the sink side means v is recomputed. Arcs:

- ``in_v -> out_v``, capacity ``bytes(v)``: cut exactly when v is available but not
  recomputed, i.e. saved (infinite when v cannot be saved);
- ``source -> in_v``, capacity ``lam * cost(v)``: cut when v is recomputed;
- ``out_u -> in_v``, infinite, for each data edge u -> v with u not an input: a recomputed
  node needs its inputs available (the closure row r_v <= s_u + r_u);
- ``out_v -> sink``, infinite, for each needed node (s_v + r_v >= 1).

Graph inputs get no nodes (they are free and always available). A node that cannot be
recomputed (``can_recompute`` false, or an input that can be neither saved nor recomputed)
has no ``in_v``: its ``out_v`` hangs off the source with capacity ``bytes(v)``. Nodes no
needed node depends on (through recomputable nodes) are left out. Any finite cut is a
plan (saved = out_v sink side and in_v source side, or no in_v) whose cost is at most the
cut, and every plan is such a cut, so the minimum cut is the Lagrangian optimum. Read
from the minimal sink side, the labels are the pruned plan itself: the recomputed nodes
are exactly its recompute closure and every saved node is used.

Shared storages (views). Memory is counted per storage, and "pay a storage once if any
of its members is saved" is not submodular in these labels (``max(a_v, 1 - b_w)`` for two
members v, w), so no cut models it exactly in general. Each saved member pays its
storage's bytes (an over-count, so a cut's plan is valid and its true value is at most
the cut value). This is still exact for the usual view groups: if one member r (the base)
can be saved and every other member can be recomputed from r and graph inputs through
nodes of zero cost (view, permute, getitem, split...), any plan can swap its saved members
for r alone at the same bytes and no more cost, so some optimal plan saves at most one
member per storage, where the over-count is exact. Such groups are found up front
(``exact_groups``); for the others, plans stay valid but may be suboptimal, and the bound
comes from a second sweep where the members split their storage's bytes (a relaxation).

Numerics. OR-Tools' max flow takes int64 capacities. Bytes are kept exact (unless the
relevant bytes exceed 2**36, then they are divided by a power of two and floored), costs
are kept exact when they are integers and small enough, otherwise counted in 2**-40 of the
largest cost and floored (by a power of two more where room needs), so the weights' sums
multiply to at most 2**59 and depend on the costs' ratios only, not their unit. A query
``lam`` is a rational ``p/q`` of these integer weights, capacities ``q * bytes + p * cost``
fit int64 and the cut is exact for the integer weights. Flooring only lowers the weights
(but for float error: at most 2**-48 of the largest cost, ``_relative_weights``), so
bounds stay valid; plans are always re-priced in exact bytes and the problem's own costs. A
float ``lam`` given to :func:`lagrangian_plan` is approximated by the nearest such
rational (denominator up to ~2**59 / total weight): exact unless ``lam`` lies closer than
that to a breakpoint of the frontier, where the plan is within rounding of optimal.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ...core.problem import Problem
from ..base import InfeasibleError
from .parametric import ArcKind, _Model

_PRODUCT_BITS = 59  # sum(bytes') * sum(cost') <= 2**59: capacities stay below 2**62
_BYTES_BITS = 36  # bytes kept exact up to 64 GiB of (over-counted) savable storage
_RATIO_BITS = 40  # costs that are not integers: multiples of 2**-40 of the largest
_SNAP = 2.0**-8  # a ratio this close below a grid point (its float error: 2**-12) is on it
_GROUP_VISITS = 4096  # search effort per shared storage when proving it exact


def _build(problem: Problem) -> _Model:
    """The cut network of ``problem``: the nodes that matter, their integer weights, the
    arcs, and OR-Tools' max-flow holding them (capacities set per query)."""
    p = problem
    if np.any(p.cost < 0) or not np.all(np.isfinite(p.cost)):
        raise ValueError("mincut needs finite, non-negative recompute costs")
    recomputable = _recomputable(p)
    relevant = _relevant(p, recomputable)
    has_in = relevant & recomputable
    savable = relevant & p.can_save
    node_bytes = np.zeros(p.n, np.int64)
    has_storage = p.storage >= 0
    node_bytes[has_storage] = p.storage_bytes[p.storage[has_storage]]
    node_bytes[~savable] = 0
    model = _weights(p, node_bytes, np.where(has_in, p.cost, 0.0))
    model.exact_groups, model.w_relax = _groups(
        p, p.recompute_inputs, savable, recomputable, model.w_save
    )
    if relevant.any():
        _arcs(model, relevant, has_in)
    return model


def _recomputable(p: Problem) -> np.ndarray:
    """Nodes that can be recomputed in effect: ``can_recompute``, and no input of theirs
    can never be available (neither an input, saved nor recomputed). A needed node that
    can be neither saved nor recomputed makes the problem infeasible."""
    recomputable = p.can_recompute & ~p.is_input
    unavailable = ~p.is_input & ~p.can_save & ~recomputable
    stack = np.flatnonzero(unavailable).tolist()
    while stack:
        u = stack.pop()
        for v in p.users[u]:
            if recomputable[v]:
                recomputable[v] = False
                if not p.can_save[v]:
                    unavailable[v] = True
                    stack.append(v)
    for v in np.flatnonzero(unavailable & p.needed).tolist():
        why = p.reason[v] or "its inputs cannot be made available"
        raise InfeasibleError(
            f"{p.names[v]} is needed by the backward but can be neither saved nor recomputed "
            f"({why})"
        )
    return recomputable


def _relevant(p: Problem, recomputable: np.ndarray) -> np.ndarray:
    """Needed nodes and what recomputing them may read."""
    relevant = np.zeros(p.n, bool)
    stack = np.flatnonzero(p.needed & ~p.is_input).tolist()
    while stack:
        v = stack.pop()
        if relevant[v]:
            continue
        relevant[v] = True
        if recomputable[v]:
            stack.extend(u for u in p.recompute_inputs[v] if not relevant[u])
    return relevant


def _weights(p: Problem, node_bytes: np.ndarray, cost: np.ndarray) -> _Model:
    """The model with its integer weights: bytes exact up to 2**_BYTES_BITS, costs in what
    is left of the product (module docstring, Numerics)."""
    total_bytes = int(node_bytes.sum())
    shift = max(0, total_bytes.bit_length() - _BYTES_BITS)
    w_save = node_bytes >> shift
    sum_save = int(w_save.sum())
    total_cost = float(cost.sum())
    room = min((1 << _PRODUCT_BITS) // max(sum_save, 1), 1 << _PRODUCT_BITS)
    if total_cost <= room and np.all(cost == np.floor(cost)):
        cost_scale = 1.0
        w_cost = cost.astype(np.int64)
    elif total_cost > 0:
        cost_scale, w_cost = _relative_weights(cost, room)
    else:
        cost_scale, w_cost = 1.0, np.zeros(len(cost), np.int64)
    return _Model(
        problem=p,
        byte_unit=1 << shift,
        cost_scale=cost_scale,
        bytes_exact=shift == 0,
        cost_exact=_exact(cost, cost_scale, w_cost),
        exact_groups=False,
        w_save=w_save,
        w_relax=w_save,
        w_cost=w_cost,
        sum_cost=int(w_cost.sum()),
    )


def _exact(cost: np.ndarray, scale: float, weights: np.ndarray) -> bool:
    """Whether ``weights`` are ``cost * scale`` exactly, in rational arithmetic (a float
    product can round onto an integer the rational one is not)."""
    if not np.all(weights.astype(np.float64) == cost * scale):
        return False
    s = Fraction(scale)
    return all(
        Fraction(c) * s == int(w) for c, w in zip(cost.tolist(), weights.tolist(), strict=True)
    )


def _relative_weights(cost: np.ndarray, room: int) -> tuple[float, np.ndarray]:
    """Integer weights for costs that are not small integers, and their scale (weights
    per cost unit): each cost as a multiple of ``2**-_RATIO_BITS`` of the largest, floored
    to what ``room`` allows. The weights depend on the costs' ratios alone, so costs in
    another unit (seconds at another measured rate of the host) give the same weights, and
    the same cut among equally cheap ones. Snapping the ratio to its grid first takes off
    the last-bit differences of dividing by two rates; it raises a weight by at most
    ``2**-48`` of the largest cost (not a bound's concern)."""
    top = float(cost.max())
    grid = 2.0**_RATIO_BITS
    ratio = np.floor(cost / top * grid + _SNAP)  # integers up to 2**_RATIO_BITS
    shift = 2.0 ** min(0, math.floor(math.log2(room / float(ratio.sum()))))
    return shift * grid / top, np.floor(ratio * shift).astype(np.int64)


def _arcs(model: _Model, relevant: np.ndarray, has_in: np.ndarray) -> None:
    """The network's nodes and arcs (module docstring) into ``model``, with the max-flow
    object that holds them."""
    from ortools.graph.python import max_flow

    p = model.problem
    # Node ids: 0 source, 1 sink, then out_v for relevant v, then in_v for has_in v.
    out_id = np.full(p.n, -1, np.int64)
    in_id = np.full(p.n, -1, np.int64)
    rel = np.flatnonzero(relevant)
    out_id[rel] = 2 + np.arange(len(rel))
    hin = np.flatnonzero(has_in)
    in_id[hin] = 2 + len(rel) + np.arange(len(hin))
    tails, heads, kinds, nodes = [], [], [], []

    def arcs(t: np.ndarray, h: np.ndarray, kind: ArcKind, node: np.ndarray) -> None:
        tails.append(t)
        heads.append(h)
        kinds.append(np.full(len(t), kind, np.int8))
        nodes.append(node)

    # Saving: in_v -> out_v (recomputable), source -> out_v (not recomputable).
    sv = np.flatnonzero(has_in & p.can_save)
    arcs(in_id[sv], out_id[sv], ArcKind.SAVE, sv)
    sv = np.flatnonzero(relevant & ~has_in)  # all savable: unavailable ones are not relevant
    arcs(np.zeros(len(sv), np.int64), out_id[sv], ArcKind.SAVE, sv)
    # Forbidden saving: in_v -> out_v infinite.
    ns = np.flatnonzero(has_in & ~p.can_save)
    arcs(in_id[ns], out_id[ns], ArcKind.INFINITE, ns)
    # Recomputing: source -> in_v.
    arcs(np.zeros(len(hin), np.int64), in_id[hin], ArcKind.RECOMPUTE, hin)
    # Closure: out_u -> in_v for data edges into recomputable nodes.
    ins = p.recompute_inputs
    eu = np.asarray([u for v in hin.tolist() for u in ins[v]], np.int64)
    ev = np.asarray([v for v in hin.tolist() for _ in ins[v]], np.int64)
    arcs(out_id[eu], in_id[ev], ArcKind.INFINITE, ev)
    # Needed: out_v -> sink.
    nd = np.flatnonzero(relevant & p.needed)
    arcs(out_id[nd], np.ones(len(nd), np.int64), ArcKind.INFINITE, nd)

    model.num_nodes = 2 + len(rel) + len(hin)
    model.tails = np.concatenate(tails).astype(np.int64)
    model.heads = np.concatenate(heads).astype(np.int64)
    model.arc_kind = np.concatenate(kinds)
    model.arc_node = np.concatenate(nodes).astype(np.int64)
    model.rel_idx, model.rel_out = rel, out_id[rel]
    model.rel_in = np.maximum(in_id[rel], 0)  # 0: the source, never on the sink side
    model.rel_storage = p.storage[rel]
    model.net_rel = np.full(model.num_nodes, -1, np.int64)
    model.net_rel[model.rel_out] = np.arange(len(rel))
    model.net_rel[in_id[hin]] = np.searchsorted(rel, hin)
    flow = max_flow.SimpleMaxFlow()
    flow.add_arcs_with_capacity(
        model.tails.astype(np.int32),
        model.heads.astype(np.int32),
        np.zeros(len(model.tails), np.int64),
    )
    model.flow = flow


def _groups(
    p: Problem,
    ins: list[list[int]],
    savable: np.ndarray,
    recomputable: np.ndarray,
    w_save: np.ndarray,
) -> tuple[bool, np.ndarray]:
    """Whether every shared storage is exact (see module docstring), and relaxed weights."""
    members: dict[int, list[int]] = {}
    for v in np.flatnonzero(savable & (w_save > 0) & (p.storage >= 0)).tolist():
        members.setdefault(int(p.storage[v]), []).append(v)
    w_relax = w_save.copy()
    all_exact = True
    for group in members.values():
        if len(group) < 2 or _exact_group(p, ins, recomputable, group):
            continue
        all_exact = False
        w_relax[group] = w_save[group[0]] // len(group)
    return all_exact, w_relax


def _exact_group(
    p: Problem, ins: list[list[int]], recomputable: np.ndarray, group: list[int]
) -> bool:
    """Is there a member r from which every other member is recomputable at zero cost?"""
    budget = _GROUP_VISITS
    for r in group:
        ok = True
        for m in group:
            if m == r:
                continue
            seen = {m}
            stack = [m]
            while stack and ok:
                z = stack.pop()
                budget -= 1
                if budget < 0:
                    return False
                if not recomputable[z] or p.cost[z] != 0:
                    ok = False
                    break
                for u in ins[z]:
                    if u != r and u not in seen:
                        seen.add(u)
                        stack.append(u)
            if not ok:
                break
        if ok:
            return True
    return False
