"""Greedy baseline: drop saved storages in order of bytes freed per unit of recompute cost.

A heuristic for comparison with the exact solvers (DESIGN.md: "greedy and DP for
comparison"). It starts from the cheapest plan there is, saving every value that can be
saved and that the backward (or the recomputation of an unsaveable value) reads, so the
recompute cost starts at its minimum. It then repeatedly stops saving one *storage* (a
value and its views: freeing bytes needs all of them gone) and picks, among the storages
it could drop, the one that frees the most bytes per unit of *added* recompute cost:

- the added cost is exact: dropping a storage recomputes its values and every unsaved,
  not yet recomputed value they read, transitively (``Problem.recompute_closure``);
- a value the drop would have to recompute but cannot (random op, side effect) is saved
  instead when it can be (its bytes are charged to the move); a drop that would need an
  unsaveable, unrecomputable value is skipped;
- bytes are exact, per storage (a storage is freed only when none of its values stays
  saved, and one newly held by a forced save is charged once);
- drops that add no cost go first (largest first), drops that free no bytes never happen.

When no single drop frees bytes (each would have to save blockers as large as what it
frees), the descent is unblocked, at most ``greedy_moves._UNBLOCK_ROUNDS`` times: a blocker storage
that alone stalls several drops is saved when together they free more than it costs;
failing that, the stalled drops are taken together, their blockers saved once for all
(with a target, the shortest prefix in bytes-per-cost order that fits, by bisection),
when that saves bytes. A blocker nothing ends up reading is pruned. This keeps the
``minimize="bytes"`` floor near that of recomputing everything possible.

``minimize="cost"`` stops as soon as the plan fits the target; the last drop is the
cheapest one that closes the remaining gap, then drops that add no cost are still taken
(fewer bytes at the same cost), and a short pass re-saves dropped storages that fit in
what is left of the target when that lowers the cost. ``minimize="bytes"`` drops until
nothing more can be dropped. Both modes take their moves in the same order, so a target
at or above what ``minimize="bytes"`` reaches always succeeds with ``"cost"``.

Guarantees: the returned plan is valid (``Problem.check`` is empty) and never saves more
than the target; otherwise :class:`InfeasibleError` is raised, saying whether no plan
exists at all or only that greedy could not get below a size. Not guaranteed: optimality
of either objective; the size ``minimize="bytes"`` reaches is not the true minimum in
general (so greedy failing is no proof that a target is unreachable). Optimal for the
special case of independent values (each reads only graph inputs) of equal size.

Cost: a candidate drop is priced by a walk over the unsaved, unrecomputed ancestors of
its values, cut short after ``greedy_moves._WALK`` values (the price is then a bound: cost from below,
bytes from above, and the candidate is priced in full when it reaches the top of the
heap, so the drop applied is always the best by its exact price). After a move only the
candidates whose walks touched a value that changed are re-priced. Near-linear when the
backward reads most forward values; worst case quadratic. Pure Python: measured on
random layered DAGs (``python bench/solvers.py``), it is much slower when the backward reads few of
the values (long chains of unread values to walk) than when it reads most of them.
``time_limit`` bounds only the re-save pass.
"""

from __future__ import annotations

import time
from typing import ClassVar

from ...core.problem import Problem
from ..base import InfeasibleError, Request, Search, SolverBase
from .greedy_moves import State, descend

_RESAVE_TRIES = 32  # re-save attempts after the target is met (each costs a closure walk)


def check_chains(problem: Problem) -> None:
    """Raise :class:`InfeasibleError` when no valid plan exists at any memory size although
    every needed value can be saved or recomputed (:meth:`Problem.require_plannable`,
    checked first by the solver template).

    Saving everything that can be saved gives the smallest recompute closure of all plans;
    if that closure needs a value that cannot be recomputed, no plan is valid.
    """
    free, ins = problem.is_input, problem.inputs
    must = [
        v for v in range(problem.n) if problem.needed[v] and not free[v] and not problem.can_save[v]
    ]
    seen = set(must)
    stack = list(must)
    while stack:
        v = stack.pop()
        for u in ins[v]:
            if free[u] or problem.can_save[u] or u in seen:
                continue
            if not problem.can_recompute[u]:
                raise InfeasibleError(
                    f"{problem.names[u]} is needed to recompute {problem.names[v]} but can be "
                    f"neither saved nor recomputed ({problem.reason[u]})"
                )
            seen.add(u)
            stack.append(u)


class Greedy(SolverBase):
    name: ClassVar[str] = "greedy"
    exact: ClassVar[bool] = False
    requires: ClassVar[str] = "numpy"

    def _search(self, request: Request) -> Search:
        problem, target_bytes, minimize, time_limit = request
        start = time.perf_counter()
        check_chains(problem)
        everything = [
            v for v in range(problem.n) if problem.can_save[v] and not problem.is_input[v]
        ]
        state = State(problem, everything)
        target = None if target_bytes is None else int(target_bytes)
        moves = descend(state, target, minimize)
        saved = state.saved()
        if target is not None and state.nbytes > target:  # blockers saved for nothing?
            saved = problem.prune_unused(saved)
            if problem.saved_bytes(saved) > target:
                raise InfeasibleError(
                    f"greedy found no plan that saves at most {target} bytes: the smallest "
                    f"plan it reaches saves {problem.saved_bytes(saved)} bytes (a heuristic; "
                    "an exact solver such as 'cpsat' may reach less)"
                )
        resaved = 0
        if minimize == "cost" and target is not None and moves:
            saved, resaved = _resave(state, moves, target, start, time_limit)
        return Search(
            saved,
            optimal=False,
            info={"backend": "greedy", "moves": len(moves), "resaved": resaved},
        )


def _resave(
    state: State, moves: list[int], target: int, start: float, time_limit: float
) -> tuple[list[int], int]:
    """Undo an overshoot: save again a dropped storage that still fits, if it lowers cost."""
    p, best = state.p, state
    resaved = tries = 0
    for g in reversed(moves):
        if tries >= _RESAVE_TRIES or time.perf_counter() - start > 0.5 * time_limit:
            break
        if best.nbytes + (0 if g in best.held else best.sbytes[g]) > target:
            continue
        tries += 1
        members = [v for v in best.members[g] if best.can_save[v]]
        # saving more only shrinks the closure, so the trial plan is valid too
        trial = State(p, best.saved() + members, like=best)
        if trial.nbytes <= target and trial.total_cost < best.total_cost:
            best = trial
            resaved += 1
    return best.saved(), resaved
