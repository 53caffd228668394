"""Problem reduction: a smaller Problem with the same optimum, and the way back.

The rules and their engine; :mod:`budget.solvers.reduce` caches reductions and wraps a
solver in one (``Reduced``).

:func:`reduce_problem` applies, until none applies any more, rules that each keep the
optimum exactly: every plan of the reduced problem expands to a plan of the original
one with ``cost + cost_offset`` and ``bytes + bytes_offset``, and every plan of the
original one has a plan of the reduced one at least as good in both (so lexicographic
optima, ties included, and proven bounds carry over). The semantics are those of
DESIGN.md ("The optimisation, exactly"), with recompute costs >= 0 (otherwise nothing is
reduced). "Available" means saved or recomputed; "deleting" a node makes it behave like a
graph input for its users, which is sound whenever the node is available in every plan
at no extra cost. Each rule, for a non-input node v:

1. unavailable: v can be neither saved nor recomputed. Its users can never be
   recomputed (their ``can_recompute`` is cleared); v is deleted. A needed one makes the
   problem infeasible: then nothing is reduced, and the solver raises its usual error.
2. irrelevant: v is not needed and none of its users can be recomputed: no valid plan
   reads it, saving it only costs bytes. Deleted.
3. forced save: v is needed and cannot be recomputed: every plan saves it. It is saved
   (``forced``), its storage's bytes go to ``bytes_offset`` and the storage becomes free
   for its other members; deleted.
4. free: v can be recomputed at zero cost and each of its inputs is needed (available
   in every plan) or deleted: recomputing it is always possible and free, so some
   optimal plan never saves it. Deleted (not saved; the full plan recomputes it).
5. zero bytes: v can be saved and its storage holds no bytes (no storage, a graph
   input's, or one a forced save holds): saving it costs nothing and shrinks the
   recompute closure. Saved (``forced``) and deleted.
6. forced recompute: v is needed and cannot be saved: every plan recomputes it. Its
   cost goes to ``cost_offset``, its inputs become needed; deleted.
7. zero-cost pass-through: v is not needed, cannot be saved, costs nothing to
   recompute (split, var_mean, getitem chains after rule 9): it is available exactly when
   its inputs are. Deleted, its users read its inputs instead (only where that does not
   add edges).
8. single user: v is not needed, cannot be saved, and has one user w: v is recomputed
   exactly when w is. Merged into w (w's cost += v's, w reads v's inputs).
9. save the users instead: v is not needed and every user of v can be saved, and either
   they share v's storage (views), or v is its storage's only savable member and the
   users' storages hold no more bytes than v's: a plan saving v can save the users it
   recomputes instead, with no more bytes and no more cost. ``can_save`` of v is cleared.
10. save the inputs instead: v costs nothing to recompute and every input of v can be
    saved, with the same condition on storages: a plan saving v can save its inputs
    instead and recompute v for free. ``can_save`` of v is cleared.
11. twins: v and w are needed, can be saved and share a storage: a plan saving one
    may save the other at no extra bytes and no more cost, so both are saved or both
    recomputed. Merged (costs added, inputs and users joined, both saved together).

Rules 9 and 10 turn view chains (mm -> view -> split -> getitem -> view -> permute) and
zero-cost pointwise chains (a GELU after its matmul) into nodes that cannot be saved,
which rules 6-8 then remove; rule 11 joins the q/k/v views of one projection. What is
not done: identical layers are not solved once (the memory row couples them; the solvers'
own symmetry handling and the min-cut's hull walk are what handles them).

Offload (``Problem.offload``): the reduced problem keeps the offload terms of the nodes it
keeps, and a plan's price (cost with the offload price, device bytes, host bytes) is kept
the same way. A value that may be offloaded is never saved for the solver (rule 3), never
replaced by its users or inputs (9, 10) and never joined to a twin (11): each of those
would take its offload away. The other rules hold as they are: a value they delete is one
some optimal plan does not save (2, 4) or cannot save (1, 6-8), and dropping an offload
lowers its price (tails and the link's exposure grow with what is offloaded) and the host
bytes; a value rule 5 saves holds no bytes of its own, so offloading it frees nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core.problem import Problem


@dataclass
class Reduction:
    """A reduced problem and how to take its plans back to the original problem."""

    original: Problem
    problem: Problem
    saves: list[list[int]]  # per reduced node: the original nodes saved when it is saved
    forced: list[int]  # original nodes every plan saves (rules 3 and 5)
    cost_offset: float = 0.0  # recompute cost every plan pays (rule 6)
    bytes_offset: int = 0  # bytes every plan holds (rule 3)
    rules: dict[str, int] = field(default_factory=dict)  # nodes each rule removed or changed

    @property
    def identity(self) -> bool:
        return self.problem is self.original

    def expand(self, saved: list[int]) -> list[int]:
        """The original problem's saved set for a plan of the reduced problem."""
        out = set(self.forced)
        for i in saved:
            out.update(self.saves[i])
        return sorted(out)

    def expand_offloaded(self, offloaded: list[int]) -> list[int]:
        """The original problem's offloaded values for those of a reduced plan (a value that
        may be offloaded is never joined to another, so each is one original node)."""
        return sorted(v for i in offloaded for v in self.saves[i])

    def summary(self) -> dict[str, object]:
        p, q = self.original, self.problem
        return {
            "nodes": (p.n, q.n),
            "edges": (len(p.edges), len(q.edges)),
            "rules": dict(self.rules),
        }


def identity(problem: Problem) -> Reduction:
    return Reduction(problem, problem, [[v] for v in range(problem.n)], [])


_RULES = (
    "unavailable",
    "irrelevant",
    "forced save",
    "free",
    "zero bytes",
    "forced recompute",
    "pass-through",
    "single user",
    "views instead",
    "inputs instead",
    "twins",
)


class _Reducer:
    """The rules of the module docstring on a mutable copy of the graph."""

    def __init__(self, p: Problem) -> None:
        n = p.n
        self.p = p
        self.alive = ~p.is_input.copy()
        self.needed = p.needed & self.alive
        self.can_save = p.can_save.copy()
        self.can_recompute = p.can_recompute.copy()
        # values the solver may offload: kept for it to decide (module docstring)
        self.movable = np.zeros(n, bool) if p.offload is None else p.offload.offloadable
        self.cost = p.cost.astype(np.float64).copy()
        self.flops = p.flops.astype(np.float64).copy()
        self.storage = p.storage.copy()
        self.storage_bytes = p.storage_bytes.copy()
        # A working copy the rules rewrite, not Problem.inputs/users: sets filled in edge
        # order, because the order the rules visit nodes (and so the reduced problem)
        # follows the sets' iteration order, which depends on insertion order.
        self.ins: list[set[int]] = [set() for _ in range(n)]
        self.outs: list[set[int]] = [set() for _ in range(n)]
        for u, v in p.edges.tolist():
            if self.alive[u] and self.alive[v] and u != v:
                self.ins[v].add(u)
                self.outs[u].add(v)
        self.saves: list[list[int]] = [[v] for v in range(n)]
        self.members: dict[int, set[int]] = {}  # storage -> alive nodes in it
        for v in np.flatnonzero(self.alive & (self.storage >= 0)).tolist():
            self.members.setdefault(int(self.storage[v]), set()).add(v)
        self.forced: list[int] = []
        self.cost_offset = 0.0
        self.bytes_offset = 0
        self.rules = dict.fromkeys(_RULES, 0)
        self.infeasible = False
        self.work: list[int] = []
        self.queued = np.zeros(n, bool)

    # ---- bookkeeping -------------------------------------------------------------------------

    def push(self, *nodes: int) -> None:
        for v in nodes:
            if self.alive[v] and not self.queued[v]:
                self.queued[v] = True
                self.work.append(v)

    def push_around(self, v: int) -> None:
        self.push(v, *self.ins[v], *self.outs[v])
        g = int(self.storage[v])
        if g >= 0:
            self.push(*self.members.get(g, ()))

    def instead(self, v: int, others: set[int]) -> bool:
        """Rules 9 and 10: can saving ``others`` always replace saving v, bytes included?

        They must all be savable. Saving them adds at most the bytes of their storages
        other than v's; dropping v frees v's storage when v is its only savable member.
        """
        if not all(self.can_save[u] for u in others):
            return False
        g = int(self.storage[v])
        extra = sum(
            int(self.storage_bytes[h])
            for h in {int(self.storage[u]) for u in others}
            if h >= 0 and h != g
        )
        if extra == 0:
            return True
        sole = all(w == v or not self.can_save[w] for w in self.members[g])
        return sole and extra <= int(self.storage_bytes[g])

    def bytes_of(self, v: int) -> int:
        g = int(self.storage[v])
        return int(self.storage_bytes[g]) if g >= 0 else 0

    def delete(self, v: int, rule: str) -> None:
        """Remove v; its users no longer read it (it is available to them for free)."""
        self.rules[rule] += 1
        around = [*self.ins[v], *self.outs[v]]
        for u in self.ins[v]:
            self.outs[u].discard(v)
        for w in self.outs[v]:
            self.ins[w].discard(v)
        self.ins[v], self.outs[v] = set(), set()
        self.alive[v] = False
        g = int(self.storage[v])
        if g >= 0:
            self.members[g].discard(v)
            self.push(*self.members[g])
        self.push(*around)

    def merge(self, v: int, w: int) -> None:
        """Join v into w: w reads v's inputs, v's users read w; self-edges are dropped."""
        for u in self.ins[v]:
            self.outs[u].discard(v)
            if u != w:
                self.ins[w].add(u)
                self.outs[u].add(w)
        for x in self.outs[v]:
            self.ins[x].discard(v)
            if x != w:
                self.outs[w].add(x)
                self.ins[x].add(w)
        self.ins[v], self.outs[v] = set(), set()
        self.cost[w] += self.cost[v]
        self.flops[w] += self.flops[v]
        self.alive[v] = False
        g = int(self.storage[v])
        if g >= 0:
            self.members[g].discard(v)
        self.push_around(w)

    # ---- the rules, in the order of the module docstring -------------------------------------

    def visit(self, v: int) -> None:  # noqa: C901 - one branch per rule, in order
        ins, outs = self.ins[v], self.outs[v]
        save, redo, need = self.can_save[v], self.can_recompute[v], self.needed[v]
        if not save and not redo:
            if need:
                self.infeasible = True
                return
            for w in outs:
                self.can_recompute[w] = False
            self.delete(v, "unavailable")
            return
        if not need and not any(self.can_recompute[w] for w in outs):
            self.delete(v, "irrelevant")
            return
        if need and not redo and not self.movable[v]:
            self.forced.extend(self.saves[v])
            g = int(self.storage[v])
            if g >= 0 and self.storage_bytes[g] > 0:
                self.bytes_offset += int(self.storage_bytes[g])
                self.storage_bytes[g] = 0
            self.delete(v, "forced save")
            return
        if redo and self.cost[v] == 0 and all(self.needed[u] for u in ins):
            self.delete(v, "free")
            return
        if save and self.bytes_of(v) == 0:
            self.forced.extend(self.saves[v])
            self.delete(v, "zero bytes")
            return
        if need and not save:
            self.cost_offset += float(self.cost[v])
            for u in ins:
                if not self.needed[u]:
                    self.needed[u] = True
                    self.push_around(u)
            self.delete(v, "forced recompute")
            return
        if not need and not save:
            if self.cost[v] == 0 and len(ins) * len(outs) <= len(ins) + len(outs):
                for w in outs:
                    for u in ins:
                        if u != w:
                            self.ins[w].add(u)
                            self.outs[u].add(w)
                self.delete(v, "pass-through")
                return
            if len(outs) == 1:
                self.rules["single user"] += 1
                self.merge(v, next(iter(outs)))
            return
        g = int(self.storage[v])
        if save and g >= 0 and not self.movable[v]:  # bytes > 0 here (rule 5)
            if not need and outs and self.instead(v, outs):
                self.can_save[v] = False
                self.rules["views instead"] += 1
                self.push_around(v)
                return
            if redo and self.cost[v] == 0 and ins and self.instead(v, ins):
                self.can_save[v] = False
                self.rules["inputs instead"] += 1
                self.push_around(v)
                return
            if need:
                for w in sorted(self.members[g]):
                    if w != v and self.needed[w] and self.can_save[w] and not self.movable[w]:
                        self.rules["twins"] += 1
                        self.can_recompute[v] &= self.can_recompute[w]
                        self.saves[v] = self.saves[v] + self.saves[w]
                        self.merge(w, v)

    def run(self) -> None:
        self.push(*np.flatnonzero(self.alive).tolist())
        while self.work and not self.infeasible:
            v = self.work.pop()
            self.queued[v] = False
            if self.alive[v]:
                self.visit(v)

    # ---- the reduced problem -----------------------------------------------------------------

    def result(self) -> Reduction:
        p = self.p
        keep = np.flatnonzero(self.alive)
        index = np.full(p.n, -1, np.int64)
        index[keep] = np.arange(len(keep))
        groups = sorted({int(self.storage[v]) for v in keep if self.storage[v] >= 0})
        gindex = {g: i for i, g in enumerate(groups)}
        edges = sorted((int(index[u]), int(index[v])) for v in keep for u in self.ins[v])
        kl = keep.tolist()
        problem = Problem(
            names=[p.names[v] for v in kl],
            ops=[p.ops[v] for v in kl],
            is_input=np.zeros(len(kl), bool),
            needed=self.needed[keep],
            can_save=self.can_save[keep],
            can_recompute=self.can_recompute[keep],
            storage=[gindex[int(self.storage[v])] if self.storage[v] >= 0 else -1 for v in kl],
            storage_bytes=[int(self.storage_bytes[g]) for g in groups],
            cost=self.cost[keep],
            flops=self.flops[keep],
            edges=np.asarray(edges, np.int64).reshape(-1, 2),
            cost_unit=p.cost_unit,
            modules=[p.modules[v] for v in kl],
            reason=[p.reason[v] for v in kl],
            graph_hash=p.graph_hash,
            offload=None if p.offload is None else p.offload.kept(keep),
        )
        return Reduction(
            original=p,
            problem=problem,
            saves=[sorted(self.saves[v]) for v in kl],
            forced=sorted(self.forced),
            cost_offset=self.cost_offset,
            bytes_offset=self.bytes_offset,
            rules={k: c for k, c in self.rules.items() if c},
        )


def reduce_problem(problem: Problem) -> Reduction:
    """The reduced problem of the module docstring (the identity when it does not apply:
    negative or non-finite costs, or a needed node no plan can make available)."""
    if problem.n == 0 or np.any(problem.cost < 0) or not np.all(np.isfinite(problem.cost)):
        return identity(problem)
    r = _Reducer(problem)
    r.run()
    if r.infeasible:
        return identity(problem)
    return r.result()
