"""A step's peak budget split across its graphs jointly.

With graph breaks a peak budget is the step's: while a graph runs, the step holds what the
graphs run before it save (and keep of their inputs) for their backward, so a graph's own
peak must fit the budget less that. Planned one graph at a time, an early graph takes the
cheapest plan that fits the whole budget and can leave a later one no room, or only room
for an expensive plan. Here each graph offers candidates (its plans at a grid of memory
budgets, each with what it saves, its own peak and its recompute) and one is chosen per
graph: the least recompute over the whole step whose step peak fits at every graph,
exactly over those candidates (a dynamic programme over the graphs in run order, keeping
for each amount held so far only the cheapest way to hold it).

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
    graphs: Sequence[Sequence[Candidate]], kept: Sequence[int], budget: int
) -> list[int] | None:
    """The index of the candidate chosen for each graph (run order), the least total cost
    whose step peak fits ``budget`` while each graph runs; None where no choice fits.

    While graph ``k`` runs the step holds the saves of the graphs before it and the inputs
    each keeps (``kept[i]``), then graph ``k``'s own kept inputs and peak: ``sum(saved_i +
    kept[i] for i < k) + kept[k] + peak_k <= budget``. Ties: the choice holding less."""
    if len(kept) != len(graphs):
        raise ValueError(f"kept: one per graph ({len(graphs)}); got {len(kept)}")
    # states: bytes held after the graphs so far -> (cost, choices), only the cheapest
    # way to hold each amount, and none where holding less costs no more
    states: list[tuple[int, float, tuple[int, ...]]] = [(0, 0.0, ())]
    for k, candidates in enumerate(graphs):
        reached = [
            (held + c.saved_bytes + kept[k], cost + c.cost, (*choices, i))
            for held, cost, choices in states
            for i, c in enumerate(candidates)
            if held + kept[k] + c.peak_bytes <= budget
        ]
        states = _pareto(reached)
        if not states:
            return None
    _, _, best = min(states, key=lambda s: (s[1], s[0]))
    return list(best)


def _pareto(
    states: list[tuple[int, float, tuple[int, ...]]],
) -> list[tuple[int, float, tuple[int, ...]]]:
    """The states no other holds as little as for as little cost, least held first."""
    kept: list[tuple[int, float, tuple[int, ...]]] = []
    for state in sorted(states, key=lambda s: (s[0], s[1])):
        if not kept or state[1] < kept[-1][1]:
            kept.append(state)
    return kept
