"""The greedy's working plan and its moves (the solver is :mod:`.greedy`).

:class:`State` is a valid plan as node statuses with per-storage counts; a :class:`Move`
drops one saved storage, priced by :meth:`State.price`; :func:`descend` applies moves in
the order of :mod:`budget.solvers.heuristics.greedy`'s docstring, with its re-pricing
bookkeeping, unblocking and compound drops.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import NamedTuple

from ...core.problem import Problem
from ..base import Objective

_DORMANT, _SAVED, _RECOMPUTED = 0, 1, 2
_WALK = 64  # values a candidate's re-pricing walk may touch before it turns optimistic
_UNBLOCK_ROUNDS = 16  # times a stalled descent may save shared blockers to go on


class Move(NamedTuple):
    """Dropping one storage (see ``State.price``); worth taking only when ``net`` > 0.

    A NamedTuple: heap entries ``(key, storage, move)`` that tie on key and storage
    compare their moves, as tuples.
    """

    added: float  # recompute cost added
    net: int  # bytes freed, net of the blockers' storages newly held
    recompute: list[int]  # values newly recomputed: the members and the inputs they pull in
    save: list[int]  # blockers (cannot be recomputed) saved instead
    dropped: list[int]  # the storage's saved members
    exact: bool  # False: the walk was cut short, ``added`` is a lower bound, ``net`` an upper


class State:
    """A valid plan as node statuses (saved / recomputed / neither), with per-storage counts."""

    def __init__(self, problem: Problem, saved: list[int], like: State | None = None) -> None:
        p = problem
        self.p = p
        n = p.n
        if like is not None:  # same problem: share the static lists
            self.ins, self.cost = like.ins, like.cost
            self.can_save, self.can_rec = like.can_save, like.can_rec
            self.storage, self.sbytes, self.members = like.storage, like.sbytes, like.members
        else:
            free = p.is_input.tolist()
            self.ins = p.recompute_inputs
            self.cost = p.cost.tolist()
            self.can_save = p.can_save.tolist()
            self.can_rec = p.can_recompute.tolist()
            self.storage = p.storage.tolist()
            self.sbytes = p.storage_bytes.tolist()
            self.members: dict[int, list[int]] = {}
            for v in range(n):
                g = self.storage[v]
                if g >= 0 and not free[v]:
                    self.members.setdefault(g, []).append(v)
        self.status = [_DORMANT] * n
        kept = set(saved)
        closure = p.recompute_closure(kept)
        for v in closure:
            self.status[v] = _RECOMPUTED
        self.held: dict[int, int] = {}
        for v in p.prune_unused(kept, closure):  # saved values nothing reads are dropped
            self.status[v] = _SAVED
            g = self.storage[v]
            if g >= 0:
                self.held[g] = self.held.get(g, 0) + 1
        self.nbytes = sum(self.sbytes[g] for g in self.held)
        self.total_cost = sum(self.cost[v] for v in closure)  # in index order, as Python floats

    def saved(self) -> list[int]:
        return [v for v in range(self.p.n) if self.status[v] == _SAVED]

    def price(self, g: int, limit: int | None = None) -> tuple[Move | None, Sequence[int]]:
        """The move that drops storage ``g``, or None when it cannot be dropped, and the
        dormant values its walk touched (for re-pricing).

        With ``limit``, the walk stops after touching that many values and the move is
        *optimistic* (``exact`` False): its cost is a lower bound and its bytes an upper
        bound, and they stay so until a touched value changes.

        The walk is the recompute closure grown from one state to the next, not
        :meth:`Problem.recompute_closure`: it starts from the dropped members only, stops
        at values already saved or recomputed, notes the values it cannot recompute
        (blockers) and every value it touched, and may be cut short; a full closure walk
        per candidate would make the descent quadratic.
        """
        status = self.status
        members = [v for v in self.members.get(g, ()) if status[v] == _SAVED]
        if not members or self.sbytes[g] <= 0:
            return None, ()
        if not all(self.can_rec[v] for v in members):
            return None, ()
        added = sum(self.cost[v] for v in members)
        new = list(members)
        seen = set(members)
        touched: list[int] = []
        forced: list[int] = []
        stack = list(members)
        ins, can_rec = self.ins, self.can_rec
        exact = True
        while stack:
            if limit is not None and len(touched) > limit:
                exact = False
                break
            v = stack.pop()
            for u in ins[v]:
                if u in seen or status[u] != _DORMANT:
                    continue
                seen.add(u)
                touched.append(u)
                if can_rec[u]:
                    new.append(u)
                    added += self.cost[u]
                    stack.append(u)
                else:
                    forced.append(u)
        if any(not self.can_save[u] for u in forced):
            return None, touched
        gained: set[int] = set()
        stays = False
        for u in forced:
            h = self.storage[u]
            if h == g:
                stays = True
            elif h >= 0 and h not in self.held:
                gained.add(h)
        net = (0 if stays else self.sbytes[g]) - sum(self.sbytes[h] for h in gained)
        return Move(added, net, new, forced, members, exact), touched


def _key(added: float, net: int, g: int) -> tuple[int, float, float, int]:
    if added <= 0:
        return (0, -net, 0.0, g)
    return (1, -(net / added), -net, g)


def descend(state: State, target: int | None, minimize: Objective) -> list[int]:
    """Apply drops in ratio order until the target is met (``"cost"``) or none is left.

    Candidates sit in a heap under their exact or optimistic key (see ``State.price``);
    an optimistic one is priced exactly when it reaches the top, so the move applied is
    always the best by its exact key. A candidate is re-priced whenever a value its walk
    touched, or a storage it frees or charges, changes.
    """
    return _Descent(state, target, minimize).run()


class _Descent:
    """The candidates of :func:`descend` and what re-prices them."""

    def __init__(self, state: State, target: int | None, minimize: Objective) -> None:
        self.state, self.target, self.minimize = state, target, minimize
        self.current: dict[int, Move] = {}  # candidate storage -> its move (net bytes > 0)
        self.stalled: set[int] = set()  # candidates that can be dropped, but free no bytes
        self.by_node: dict[int, set[int]] = {}  # dormant value -> candidates whose walk touched it
        self.by_storage: dict[int, set[int]] = {}  # storage -> candidates that charge or free it
        self.heap: list[tuple[tuple[int, float, float, int], int, Move]] = []
        self.moves: list[int] = []

    def run(self) -> list[int]:
        state, heap = self.state, self.heap
        self._price_all()
        rounds = 0
        while heap or self.stalled:
            if not heap:  # no single drop frees bytes: unblock, or drop several at once
                over = self.minimize == "bytes" or (
                    self.target is not None and state.nbytes > self.target
                )
                if not over or rounds >= _UNBLOCK_ROUNDS:
                    break
                rounds += 1
                if not self._unstick():
                    break
                continue
            _, g, move = heapq.heappop(heap)
            if self.current.get(g) is not move:
                continue  # stale entry
            if not move.exact:
                self.reprice(g, None)
                continue
            if self.minimize == "cost":
                target = self.target
                if target is None or state.nbytes <= target:
                    if move.added > 0:
                        break  # the plan fits: only drops that add no cost from here on
                elif state.nbytes - move.net <= target:  # g closes the gap: the cheapest that does
                    heapq.heappush(heap, (_key(move.added, move.net, g), g, move))
                    g, move = _cheapest_closing(self.current, self.reprice, state.nbytes - target)
            _apply(state, g, move)
            self.moves.append(g)
            del self.current[g]
            storages = {g} | {state.storage[u] for u in move.save if state.storage[u] >= 0}
            self.changed([*move.recompute, *move.save], storages, g)
        return self.moves

    def _price_all(self) -> None:
        for g in sorted(self.state.held):
            self.reprice(g)

    def _unstick(self) -> bool:
        """With no drop that frees bytes: price the stalled ones exactly, then save the
        blockers several share or drop several at once. False: nothing helps."""
        state = self.state
        priced = {}
        for g in sorted(self.stalled):
            move = self.reprice(g, None)
            if move is not None and move.net <= 0:
                priced[g] = move
        if self.heap:
            return True
        presaved = _unblock(state, priced)
        if presaved:
            self.changed(presaved, {state.storage[u] for u in presaved}, -1)
            return True
        dropped = _compound(state, priced, self.target if self.minimize == "cost" else None)
        if not dropped:
            return False
        self.moves.extend(dropped)
        for table in (self.current, self.stalled, self.by_node, self.by_storage, self.heap):
            table.clear()
        self._price_all()
        return True

    def reprice(self, g: int, limit: int | None = _WALK) -> Move | None:
        move, touched = self.state.price(g, limit)
        for u in touched:
            self.by_node.setdefault(u, set()).add(g)
        self.by_storage.setdefault(g, set()).add(g)
        if move is not None:
            for u in move.save:
                h = self.state.storage[u]
                if h >= 0:
                    self.by_storage.setdefault(h, set()).add(g)
        if move is None or move.net <= 0:
            self.current.pop(g, None)
            if move is None:
                self.stalled.discard(g)
            else:
                self.stalled.add(g)
            return move
        self.stalled.discard(g)
        self.current[g] = move
        heapq.heappush(self.heap, (_key(move.added, move.net, g), g, move))
        return move

    def changed(self, nodes: list[int], storages: set[int], skip: int) -> None:
        affected: set[int] = set()
        for u in nodes:
            affected.update(self.by_node.pop(u, ()))
        for h in storages:
            affected.update(self.by_storage.get(h, ()))
        affected.discard(skip)
        for h in sorted(affected):
            self.reprice(h)


def _unblock(state: State, stalled: dict[int, Move]) -> list[int]:
    """Save blockers that several stalled drops share, where that makes them free bytes.

    A drop stalls when the values it must save instead of recomputing cost as many bytes
    as it frees; a blocker storage that many drops need is worth its bytes for all of
    them. Saves, for each storage whose stalled drops (those it alone blocks) free more
    than it costs, its blockers; returns the values saved (nothing: no such storage).
    """
    gain: dict[int, int] = {}
    blockers: dict[int, set[int]] = {}
    for g, move in stalled.items():
        storages = [state.storage[u] for u in move.save]
        charged = {h for h in storages if h >= 0 and h not in state.held}
        if g in storages or len(charged) != 1:
            continue
        h = charged.pop()
        gain[h] = gain.get(h, 0) + state.sbytes[g]
        blockers.setdefault(h, set()).update(u for u in move.save if state.storage[u] == h)
    presaved = []
    for h in sorted(gain):
        if gain[h] > state.sbytes[h]:
            for u in sorted(blockers[h]):
                state.status[u] = _SAVED
                state.held[h] = state.held.get(h, 0) + 1
                presaved.append(u)
            state.nbytes += state.sbytes[h]
    return presaved


def _compound(state: State, stalled: dict[int, Move], target: int | None) -> list[int]:
    """Drop stalled storages together (their blockers saved once for all); ``state``
    becomes that plan. Returns the storages dropped, none when that saves no bytes.

    The stalled drops go in order of bytes per unit of their own cost; with a ``target``,
    the shortest prefix whose plan fits it (bisection), else all of them.
    """
    order = sorted(stalled, key=lambda g: _key(stalled[g].added, state.sbytes[g], g))
    full = _without(state, order)
    if full is None:
        return []
    k, chosen = len(order), full
    if target is None or full.nbytes > target:
        if full.nbytes >= state.nbytes:
            return []
    else:
        lo = 0  # the current plan is over the target
        while k - lo > 1:
            mid = (lo + k) // 2
            trial = _without(state, order[:mid])
            if trial is not None and trial.nbytes <= target:
                k, chosen = mid, trial
            else:
                lo = mid
    state.status, state.held = chosen.status, chosen.held
    state.nbytes, state.total_cost = chosen.nbytes, chosen.total_cost
    return order[:k]


def _without(state: State, storages: list[int]) -> State | None:
    """The plan ``state`` without ``storages``, saving what it cannot recompute (pruned)."""
    drop = set(storages)
    saved = [v for v in state.saved() if state.storage[v] not in drop]
    while True:
        trial = State(state.p, saved, like=state)
        bad = [v for v, st in enumerate(trial.status) if st == _RECOMPUTED and not state.can_rec[v]]
        if not bad:
            return trial
        if not all(state.can_save[v] for v in bad):
            return None
        saved += bad


def _cheapest_closing(
    current: dict[int, Move], reprice: Callable[[int, int | None], Move | None], gap: int
) -> tuple[int, Move]:
    """The exact move of least cost (then most bytes) that frees at least ``gap`` bytes.

    Optimistic moves are priced exactly in order of their cost bound, until the bound
    reaches the best exact cost found (a bound never exceeds the exact cost).
    """
    best: tuple[float, int, int] | None = None
    for bound, _, h in sorted((m.added, -m.net, h) for h, m in current.items() if m.net >= gap):
        if best is not None and bound > best[0]:
            break
        move = current[h] if current[h].exact else reprice(h, None)
        if move is not None and move.net >= gap:
            key = (move.added, -move.net, h)
            if best is None or key < best:
                best = key
    assert best is not None  # the move that triggered the call closes the gap
    return best[2], current[best[2]]


def _apply(state: State, g: int, move: Move) -> None:
    for v in move.recompute:
        state.status[v] = _RECOMPUTED
    state.held[g] -= len(move.dropped)
    if state.held[g] == 0:
        del state.held[g]
    for u in move.save:
        state.status[u] = _SAVED
        h = state.storage[u]
        if h >= 0:
            state.held[h] = state.held.get(h, 0) + 1
    state.nbytes -= move.net
    state.total_cost += move.added
