"""A step's peak budget split across its graphs jointly.

With graph breaks a peak budget is the step's: while a graph runs, the step holds what the
graphs run before it save (and keep of their inputs) for their backward, so a graph's own
peak must fit the budget less that. Planned one graph at a time, an early graph takes the
cheapest plan that fits the whole budget and can leave a later one no room, or only room
for an expensive plan. Here each graph offers candidates (its plans at a grid of memory
budgets, each with what it saves, its own peak and its recompute) and one is chosen per
graph: the least recompute over the whole step whose step peak fits at every graph,
exactly over those candidates (a dynamic programme over the graphs' runs in run order,
keeping for each amount held so far only the cheapest way to hold it). A graph that runs
more than once a step (a model compiled block by block) takes one candidate for all its
runs.

Generic over where candidates come from: :mod:`budget.compile.preview` takes them from a
preview's sweep and plans the step again with each earlier graph's saves capped at its
choice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Candidate:
    """One plan a graph could take."""

    saved_bytes: int
    """What it saves for its backward: held while every later graph runs."""
    peak_bytes: int
    """Its own peak, above what the step holds outside it."""
    cost: float
    """Its recompute, in the plans' cost unit."""


def split(
    graphs: Sequence[Sequence[Candidate]],
    kept: Sequence[int],
    budget: int | None,
    runs: Sequence[int] | None = None,
    keep_budget: int | None = None,
) -> list[int] | None:
    """The index of the candidate chosen for each graph, the least total cost whose step
    peak fits ``budget`` while each graph runs, and whose runs keep for the backward at
    most ``keep_budget`` in all (a size memory budget: their saves and kept bytes); either
    bound None where there is none. None where no choice fits.

    ``runs``: the graph of each run, in run order (default: each graph once, in order). A
    graph run again (a module compiled on its own and called once per block) runs its one
    choice each time, and each run costs its recompute and holds its saves. While run
    ``r`` runs the step holds the saves of the runs before it and what each keeps
    (``kept``, one per run: the inputs its backward keeps, eager code's saves before it),
    then run ``r``'s own kept bytes and peak: ``sum(saved + kept for runs before r) +
    kept[r] + peak <= budget``. Ties: the choice holding less."""
    order = list(range(len(graphs))) if runs is None else list(runs)
    if len(kept) != len(order):
        raise ValueError(f"kept: one per run of a graph ({len(order)}); got {len(kept)}")
    if sorted(set(order)) != list(range(len(graphs))):
        raise ValueError(f"runs: graph indices 0-{len(graphs) - 1}, each run at least once")
    last = {g: r for r, g in enumerate(order)}
    # states: (bytes held after the runs so far, cost, each graph's choice or -1); kept
    # per choice of the graphs that run again, and of those only the cheapest way to hold
    # each amount, none where holding less costs no more
    states: list[_State] = [(0, 0.0, (-1,) * len(graphs))]
    for r, g in enumerate(order):
        reached = [
            (held + c.saved_bytes + kept[r], cost + c.cost, (*choices[:g], i, *choices[g + 1 :]))
            for held, cost, choices in states
            for i in ([choices[g]] if choices[g] >= 0 else range(len(graphs[g])))
            for c in (graphs[g][i],)
            if (budget is None or held + kept[r] + c.peak_bytes <= budget)
            and (keep_budget is None or held + kept[r] + c.saved_bytes <= keep_budget)
        ]
        ahead = [h for h in range(len(graphs)) if last[h] > r]
        groups: dict[tuple[int, ...], list[_State]] = {}
        for state in reached:
            groups.setdefault(tuple(state[2][h] for h in ahead), []).append(state)
        states = [s for group in groups.values() for s in _pareto(group)]
        if not states:
            return None
    _, _, best = min(states, key=lambda s: (s[1], s[0]))
    return list(best)


_State = tuple[int, float, tuple[int, ...]]  # held, cost, choices


def _pareto(states: list[_State]) -> list[_State]:
    """The states no other holds as little as for as little cost, least held first."""
    kept: list[_State] = []
    for state in sorted(states, key=lambda s: (s[0], s[1])):
        if not kept or state[1] < kept[-1][1]:
            kept.append(state)
    return kept
