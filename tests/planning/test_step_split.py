"""budget.planning.step_split: one plan per graph, the least recompute whose step peak fits.

Oracle: every combination of candidates, checked against the step-peak rule written out
here (a brute force that shares no code with the dynamic programme).
"""

from __future__ import annotations

import itertools
import random

import pytest

from budget.planning.step_split import Candidate, split


def _brute(graphs, kept, budget):
    """(least cost, least held at that cost) over every combination that fits, or None."""
    best = None
    for combo in itertools.product(*graphs):
        held, fits = 0, True
        for k, c in enumerate(combo):
            if held + kept[k] + c.peak_bytes > budget:
                fits = False
                break
            held += c.saved_bytes + kept[k]
        if fits:
            key = (sum(c.cost for c in combo), held)
            best = key if best is None or key < best else best
    return best


def _value(graphs, kept, chosen):
    combo = [graphs[k][i] for k, i in enumerate(chosen)]
    held = sum(c.saved_bytes + kept[k] for k, c in enumerate(combo))
    return sum(c.cost for c in combo), held


def test_the_first_graph_gives_up_what_the_second_needs_most_cheaply():
    """Planned alone, the first graph would keep 60 (free) and leave the second 40 of a
    100 budget: only its 40-peak plan, costing 10. Giving up 20 costs the first graph 1
    and lets the second take its free 60-peak plan: 1 in all."""
    first = [Candidate(60, 70, 0.0), Candidate(40, 70, 1.0), Candidate(0, 70, 5.0)]
    second = [Candidate(0, 60, 0.0), Candidate(0, 40, 10.0)]
    assert split([first, second], [0, 0], 100) == [1, 0]
    assert split([first, second], [0, 10], 100) == [2, 0]  # its kept inputs count too
    assert split([first, second], [0, 0], 69) is None  # the first graph's peak alone


def test_kept_must_name_every_graph():
    with pytest.raises(ValueError, match="one per graph"):
        split([[Candidate(0, 1, 0.0)]], [], 10)


@pytest.mark.parametrize("seed", range(60))
def test_the_split_is_the_cheapest_combination_that_fits(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 4)
    graphs = [
        [
            Candidate(rng.randint(0, 50), rng.randint(1, 80), float(rng.randint(0, 20)))
            for _ in range(rng.randint(1, 5))
        ]
        for _ in range(n)
    ]
    kept = [0] + [rng.randint(0, 10) for _ in range(n - 1)]
    budget = rng.randint(40, 200)
    want = _brute(graphs, kept, budget)
    chosen = split(graphs, kept, budget)
    if want is None:
        assert chosen is None
        return
    assert chosen is not None and _value(graphs, kept, chosen) == want
