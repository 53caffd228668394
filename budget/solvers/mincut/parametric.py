"""The parametric cut model behind the ``mincut`` solver: cuts, the lam sweep, hull edges.

``_Model`` holds one network built by :mod:`budget.solvers.mincut.network` and answers min cuts
for rational ``lam = p/q`` exactly in int64, sweeps lam for the lower convex hull of the
(bytes, cost) frontier (contracting between known cuts: minimal sink sides shrink as lam
grows), fills hull edges with the other minimum cuts at an edge's lam, and evaluates the
Lagrangian bound. See :mod:`budget.solvers.mincut.solver` for the whole story.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import IntEnum
from fractions import Fraction

import numpy as np

from ...core.problem import Problem
from ..base import InfeasibleError


class ArcKind(IntEnum):
    """What an arc of the cut network charges when it is cut (``_Model.arc_kind``)."""

    SAVE = 0  # q * the node's bytes: the node is saved
    RECOMPUTE = 1  # p * the node's cost: the node is recomputed
    INFINITE = 2  # never cut: a closure, needed or forbidden-save arc


@dataclass
class _Cut:
    """One minimum cut read as a plan.

    The sink side is the minimal one, so the labels are already the pruned plan: ``saved``
    holds only what is used and the recomputed nodes are exactly its recompute closure
    (the pruned plan's labelling is also a minimum cut, with a sink side no larger).
    """

    saved_idx: np.ndarray
    bytes_q: int  # quantised bytes of the saved nodes (each member pays its storage)
    cost_q: int  # quantised cost of the recomputed nodes
    bytes: int  # exact bytes (each storage once)
    cost: float  # the problem's cost of the recompute closure

    @property
    def saved(self) -> list[int]:
        return self.saved_idx.tolist()


@dataclass
class _Model:
    problem: Problem
    byte_unit: int  # true bytes >= byte_unit * quantised bytes
    cost_scale: float  # quantised cost <= cost_scale * true cost
    bytes_exact: bool
    cost_exact: bool
    exact_groups: bool  # every shared storage proven exact (see module docstring)
    w_save: np.ndarray  # int64[n]: quantised bytes a saved node pays (member over-count)
    w_relax: np.ndarray  # int64[n]: the same with inexact groups split among members
    w_cost: np.ndarray  # int64[n]: quantised recompute cost
    sum_cost: int
    # The network: node 0 source, 1 sink; out_v for relevant v, in_v for recomputable v.
    num_nodes: int = 2
    tails: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    heads: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    arc_kind: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))  # ArcKind
    arc_node: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rel_idx: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rel_out: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rel_in: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rel_storage: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    net_rel: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # node -> rel
    flow: object = None  # SimpleMaxFlow over every arc, reused by full cuts
    cuts: int = 0
    _sweeps: dict[str, list[_Cut]] = field(default_factory=dict)

    def weights(self, which: str) -> np.ndarray:
        return self.w_save if which == "save" else self.w_relax

    # ---- cuts ----------------------------------------------------------------------------

    def _caps(self, arcs: np.ndarray | None, p: int, q: int, which: str) -> np.ndarray:
        kind = self.arc_kind if arcs is None else self.arc_kind[arcs]
        node = self.arc_node if arcs is None else self.arc_node[arcs]
        w = self.weights(which)
        inf = q * int(w.sum()) + p * self.sum_cost + 1
        if inf >= 2**62:
            raise OverflowError(f"mincut capacities overflow int64 (p={p}, q={q})")
        caps = np.full(len(kind), inf, dtype=np.int64)
        save, recompute = kind == ArcKind.SAVE, kind == ArcKind.RECOMPUTE
        caps[save] = q * w[node[save]]
        caps[recompute] = p * self.w_cost[node[recompute]]
        return caps

    def _read(self, sink: np.ndarray, which: str) -> _Cut:
        """The plan of a cut given its sink side (bool over network nodes)."""
        p = self.problem
        rec = sink[self.rel_in]  # rel_in is 0 (the source) for nodes without in_v
        saved = sink[self.rel_out] & ~rec
        mark = np.zeros(len(p.storage_bytes) + 1, bool)
        mark[self.rel_storage[saved]] = True  # index -1: the extra slot, no bytes
        return _Cut(
            saved_idx=self.rel_idx[saved],
            bytes_q=int(self.weights(which)[self.rel_idx[saved]].sum()),
            cost_q=int(self.w_cost[self.rel_idx[rec]].sum()),
            bytes=int(p.storage_bytes[mark[:-1]].sum()),
            cost=float(p.cost[self.rel_idx[rec]].sum()),
        )

    def cut(self, p: int, q: int, which: str = "save") -> tuple[_Cut, np.ndarray]:
        """Minimise ``q * bytes + p * cost`` (integer weights) with one max flow."""
        sink = np.zeros(self.num_nodes, bool)
        sink[1] = True
        if self.flow is None:  # nothing relevant: the empty plan is the only one
            return self._read(sink, which), sink
        caps = self._caps(None, p, q, which)
        self.flow.set_arcs_capacity(np.arange(len(caps), dtype=np.int32), caps)
        status = self.flow.solve(0, 1)
        self.cuts += 1
        if status != self.flow.OPTIMAL:
            raise RuntimeError(f"OR-Tools max flow failed with status {status}")
        value = int(self.flow.optimal_flow())
        if value > q * int(self.weights(which).sum()) + p * self.sum_cost:
            raise InfeasibleError("no plan satisfies the needed, closure and forbidden rows")
        sink[np.asarray(self.flow.get_sink_side_min_cut(), dtype=np.int64)] = True
        c = self._read(sink, which)
        if q * c.bytes_q + p * c.cost_q != value:  # the construction's own proof, checked
            raise RuntimeError("mincut labelling does not price at the flow value")
        return c, sink

    def lex(self, first: str, which: str = "save") -> tuple[_Cut, np.ndarray]:
        """Fewest bytes then least cost (``first="bytes"``), or the reverse, in one cut."""
        if first == "bytes":
            return self.cut(1, self.sum_cost + 1, which)
        return self.cut(int(self.weights(which).sum()) + 1, 1, which)

    def _between(
        self,
        p: int,
        q: int,
        which: str,
        ta: np.ndarray,
        tb: np.ndarray,
        b: _Cut,
        arcs: np.ndarray,
    ) -> tuple[int, int, np.ndarray]:
        """The cut at a lam between those of two cuts with sink sides ``ta`` >= ``tb``.

        Minimal sink sides shrink as lam grows (Gallo-Grigoriadis-Tarjan: source arcs grow
        with lam, the others are constant), so the one at lam lies between: ``tb`` joins
        the sink, everything outside ``ta`` the source, and only ``ta - tb`` is solved.
        ``arcs`` holds the arcs touching ``ta - tb``. Returns the cut's quantised bytes and
        cost (as ``b``'s plus the change on ``ta - tb``) and its sink side.
        """
        sub = ta & ~tb
        nodes = np.flatnonzero(sub)
        sink = tb.copy()
        if len(nodes) == 0:
            return b.bytes_q, b.cost_q, sink
        from ortools.graph.python import max_flow

        t, h = self.tails[arcs], self.heads[arcs]
        keep = (sub[t] & ta[h]) | (~ta[t] & sub[h])  # arcs that can cross the cut
        arcs, t, h = arcs[keep], t[keep], h[keep]
        local = np.zeros(self.num_nodes, np.int64)
        local[nodes] = 2 + np.arange(len(nodes))
        lt = np.where(sub[t], local[t], 0)
        lh = np.where(sub[h], local[h], 1)
        flow = max_flow.SimpleMaxFlow()
        flow.add_arcs_with_capacity(
            np.append(lt, 0).astype(np.int32),
            np.append(lh, 1).astype(np.int32),
            np.append(self._caps(arcs, p, q, which), 0),
        )
        status = flow.solve(0, 1)
        self.cuts += 1
        if status != flow.OPTIMAL:
            raise RuntimeError(f"OR-Tools max flow failed with status {status}")
        side = np.asarray(flow.get_sink_side_min_cut(), dtype=np.int64)
        sink[nodes[side[side >= 2] - 2]] = True
        aff = np.unique(self.net_rel[nodes])
        w, wc = self.weights(which)[self.rel_idx[aff]], self.w_cost[self.rel_idx[aff]]
        out, inn = self.rel_out[aff], self.rel_in[aff]
        rec_b, rec_c = tb[inn], sink[inn]
        bq = b.bytes_q + int(w[sink[out] & ~rec_c].sum()) - int(w[tb[out] & ~rec_b].sum())
        cq = b.cost_q + int(wc[rec_c].sum()) - int(wc[rec_b].sum())
        return bq, cq, sink

    # ---- the sweep -----------------------------------------------------------------------

    def sweep(self, which: str = "save") -> list[_Cut]:
        """Every cut of the parametric search, sorted by bytes (hull vertices among them)."""
        if which == "relax" and self.exact_groups:
            which = "save"
        if which in self._sweeps:
            return self._sweeps[which]
        n_net = self.num_nodes
        left, tl = self.lex("bytes", which)
        right, tr = self.lex("cost", which)
        found = [left, right]
        stack = []
        if right.cost_q < left.cost_q:
            sub = tl & ~tr
            arcs = np.flatnonzero(sub[self.tails] | sub[self.heads])
            stack.append((left, np.packbits(tl), right, np.packbits(tr), arcs))
        while stack:
            a, pa, b, pb, arcs = stack.pop()  # a: fewer bytes, more cost
            p, q = b.bytes_q - a.bytes_q, a.cost_q - b.cost_q
            g = math.gcd(p, q)
            p, q = p // g, q // g
            ta = np.unpackbits(pa, count=n_net).astype(bool)
            tb = np.unpackbits(pb, count=n_net).astype(bool)
            bq, cq, tc = self._between(p, q, which, ta, tb, b, arcs)
            if q * bq + p * cq < q * a.bytes_q + p * a.cost_q:
                c = self._read(tc, which)
                if (c.bytes_q, c.cost_q) != (bq, cq):  # bookkeeping of the contraction
                    raise RuntimeError("mincut sweep lost track of a cut's value")
                found.append(c)
                pc = np.packbits(tc)
                t, h = self.tails[arcs], self.heads[arcs]
                s1, s2 = ta & ~tc, tc & ~tb
                stack.append((c, pc, b, pb, arcs[s2[t] | s2[h]]))
                stack.append((a, pa, c, pc, arcs[s1[t] | s1[h]]))
        found.sort(key=lambda c: (c.bytes_q, c.cost_q))
        self._sweeps[which] = found
        return found

    def points(self) -> list[_Cut]:
        """The sweep's plans, one per (bytes, cost), sorted by exact bytes then cost."""
        seen: dict[tuple[int, float], _Cut] = {}
        for c in self.sweep("save"):
            seen.setdefault((c.bytes, c.cost), c)
        return sorted(seen.values(), key=lambda c: (c.bytes, c.cost))

    def edge_after(self, a: _Cut) -> tuple[_Cut, _Cut] | None:
        """``a`` and the next vertex of the (quantised) hull, if ``a`` is a vertex."""
        cuts = {(c.bytes_q, c.cost_q): c for c in self.sweep("save")}
        hull = _lower_hull(list(cuts))
        key = (a.bytes_q, a.cost_q)
        if key not in hull or key == hull[-1]:
            return None
        return cuts[key], cuts[hull[hull.index(key) + 1]]

    def fill(self, a: _Cut, b: _Cut, target_bytes: int) -> _Cut | None:
        """The best plan under the target among the minimum cuts where ``a`` and ``b`` tie.

        ``a`` and ``b`` are neighbouring hull vertices (a: fewer bytes). At the lam of
        their edge every minimum cut lies on that edge, so one with more bytes than ``a``
        that still fits costs less than ``a``. Repetitive models (identical layers) put
        many such plans on one edge, all skipped by the sweep. The minimum cuts' sink
        sides are the sets between the minimal and the maximal one closed under residual
        predecessors (Picard-Queyranne); they are grown from the minimal one (``b``'s
        end) one strongly connected component at a time, in topological order, keeping
        the state with the most bytes that fits.
        """
        p, q = b.bytes_q - a.bytes_q, a.cost_q - b.cost_q
        g = math.gcd(p, q)
        p, q = p // g, q // g
        _, t_min = self.cut(p, q)
        src = np.zeros(self.num_nodes, bool)
        src[np.asarray(self.flow.get_source_side_min_cut(), dtype=np.int64)] = True
        region = ~src & ~t_min
        if not region.any():
            return None
        flows = np.asarray(self.flow.flows(np.arange(len(self.tails), dtype=np.int32)))
        caps = self._caps(None, p, q, "save")
        t, h = self.tails, self.heads
        inside = region[t] & region[h]
        fwd, bwd = inside & (flows < caps), inside & (flows > 0)
        # residual arc u -> v: a sink side holding v must hold u
        ru = np.concatenate([t[fwd], h[bwd]])
        rv = np.concatenate([h[fwd], t[bwd]])
        comps = _components_in_order(np.flatnonzero(region), ru, rv)
        sink = t_min.copy()
        w, unit = self.w_save, self.byte_unit
        bq, cq = b.bytes_q, b.cost_q
        best_k, best = -1, None
        for k, nodes in enumerate(comps):
            aff = np.unique(self.net_rel[nodes])
            out, inn, idx = self.rel_out[aff], self.rel_in[aff], self.rel_idx[aff]
            before_rec = sink[inn]
            before = int(w[idx[sink[out] & ~before_rec]].sum())
            before_c = int(self.w_cost[idx[before_rec]].sum())
            sink[nodes] = True
            rec = sink[inn]
            bq += int(w[idx[sink[out] & ~rec]].sum()) - before
            cq += int(self.w_cost[idx[rec]].sum()) - before_c
            if bq * unit <= target_bytes and (best is None or (bq, -cq) > best):
                best_k, best = k, (bq, -cq)
        if best is None:
            return None
        sink = t_min.copy()
        for nodes in comps[: best_k + 1]:
            sink[nodes] = True
        c = self._read(sink, "save")
        if q * c.bytes_q + p * c.cost_q != q * a.bytes_q + p * a.cost_q:
            raise RuntimeError("mincut fill left the hull edge")
        return c if c.bytes <= target_bytes else None

    # ---- bounds --------------------------------------------------------------------------

    def cost_bound_q(self, target_bytes: int | None) -> Fraction | None:
        """Lower bound on quantised cost under the target (None: no plan can fit)."""
        hull = _lower_hull([(c.bytes_q, c.cost_q) for c in self.sweep("relax")])
        if target_bytes is None:
            return Fraction(hull[-1][1])
        t = target_bytes // self.byte_unit  # true <= target implies quantised <= t
        if t < hull[0][0]:
            return None
        for (b0, c0), (b1, c1) in zip(hull, hull[1:], strict=False):
            if t < b1:
                return Fraction(c0) + Fraction((c1 - c0) * (t - b0), b1 - b0)
        return Fraction(hull[-1][1])

    def cost_bound(self, target_bytes: int | None) -> float:
        b = self.cost_bound_q(target_bytes)
        return math.inf if b is None else float(b / Fraction(self.cost_scale))

    def bytes_bound(self) -> int:
        which = "save" if self.exact_groups else "relax"
        return self.byte_unit * self.lex("bytes", which)[0].bytes_q


# ---- model construction ----------------------------------------------------------------------


def _components_in_order(
    nodes: np.ndarray, tails: np.ndarray, heads: np.ndarray
) -> list[np.ndarray]:
    """Strongly connected components of the graph (nodes, tails -> heads), each after
    every component with an arc into it (Tarjan emits them in reverse of that order)."""
    local = {v: i for i, v in enumerate(nodes.tolist())}
    adj: list[list[int]] = [[] for _ in range(len(nodes))]
    for u, v in zip(tails.tolist(), heads.tolist(), strict=True):
        adj[local[u]].append(local[v])
    index = [-1] * len(nodes)
    low = [0] * len(nodes)
    on_stack = [False] * len(nodes)
    stack: list[int] = []
    out: list[np.ndarray] = []
    counter = 0
    for root in range(len(nodes)):
        if index[root] >= 0:
            continue
        work = [(root, 0)]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            v, i = work[-1]
            if i < len(adj[v]):
                work[-1] = (v, i + 1)
                u = adj[v][i]
                if index[u] < 0:
                    index[u] = low[u] = counter
                    counter += 1
                    stack.append(u)
                    on_stack[u] = True
                    work.append((u, 0))
                elif on_stack[u]:
                    low[v] = min(low[v], index[u])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                members = []
                while True:
                    x = stack.pop()
                    on_stack[x] = False
                    members.append(x)
                    if x == v:
                        break
                out.append(nodes[np.asarray(members, dtype=np.int64)])
    out.reverse()
    return out


def _lower_hull(points: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Vertices of the lower-left convex hull (bytes ascending, cost strictly descending)."""
    hull: list[tuple[int, int]] = []
    for pt in sorted(set(points)):
        if hull and pt[1] >= hull[-1][1]:
            continue  # dominated: no fewer cost for more bytes
        while len(hull) >= 2:
            (x0, y0), (x1, y1) = hull[-2], hull[-1]
            # drop hull[-1] unless it lies strictly below the segment hull[-2] -> pt
            if (y1 - y0) * (pt[0] - x0) >= (pt[1] - y0) * (x1 - x0):
                hull.pop()
            else:
                break
        hull.append(pt)
    return hull
