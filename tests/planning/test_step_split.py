"""budget.planning.step_split: one plan per graph, the least recompute whose step peak fits.

Oracle: every combination of candidates, checked against the step-peak rule written out
here (a brute force that shares no code with the dynamic programme).
"""

from __future__ import annotations

import itertools
import random

import pytest

from budget.planning.step_split import Candidate, split


def _brute(graphs, kept, budget, runs=None, keep_budget=None):
    """(least cost, least held at that cost) over every combination that fits, or None."""
    runs = range(len(graphs)) if runs is None else runs
    best = None
    for combo in itertools.product(*graphs):
        held, cost, fits = 0, 0.0, True
        for r, g in enumerate(runs):
            if budget is not None and held + kept[r] + combo[g].peak_bytes > budget:
                fits = False
                break
            held += combo[g].saved_bytes + kept[r]
            cost += combo[g].cost
        if keep_budget is not None and held > keep_budget:
            fits = False
        if fits:
            best = (cost, held) if best is None or (cost, held) < best else best
    return best


def _random_graphs(rng: random.Random, n: int) -> list[list[Candidate]]:
    """``n`` graphs of 1 to 4 candidates each, saving up to 40, peaking up to 80."""
    return [
        [
            Candidate(rng.randint(0, 40), rng.randint(1, 80), float(rng.randint(0, 20)))
            for _ in range(rng.randint(1, 4))
        ]
        for _ in range(n)
    ]


def _value(graphs, kept, chosen, runs=None):
    runs = range(len(graphs)) if runs is None else runs
    combo = [graphs[k][i] for k, i in enumerate(chosen)]
    held = sum(combo[g].saved_bytes + kept[r] for r, g in enumerate(runs))
    return sum(combo[g].cost for g in runs), held


def test_the_first_graph_gives_up_what_the_second_needs_most_cheaply():
    """Planned alone, the first graph would keep 60 (free) and leave the second 40 of a
    100 budget: only its 40-peak plan, costing 10. Giving up 20 costs the first graph 1
    and lets the second take its free 60-peak plan: 1 in all."""
    first = [Candidate(60, 70, 0.0), Candidate(40, 70, 1.0), Candidate(0, 70, 5.0)]
    second = [Candidate(0, 60, 0.0), Candidate(0, 40, 10.0)]
    assert split([first, second], [0, 0], 100) == [1, 0]
    assert split([first, second], [0, 10], 100) == [2, 0]  # its kept inputs count too
    assert split([first, second], [0, 0], 69) is None  # the first graph's peak alone


def test_kept_must_name_every_run_and_runs_every_graph():
    with pytest.raises(ValueError, match="one per run of a graph"):
        split([[Candidate(0, 1, 0.0)]], [], 10)
    with pytest.raises(ValueError, match="graph indices 0-1, each run at least once"):
        split([[Candidate(0, 1, 0.0)]] * 2, [0, 0], 10, runs=[0, 0])


def test_a_graph_run_once_per_block_takes_one_plan_that_fits_its_last_run():
    """A block's graph runs three times, each run holding its saves while the next runs:
    its third run's peak is the head's saves, two runs' saves and its own peak (50)."""
    head = [Candidate(20, 30, 0.0), Candidate(0, 30, 10.0)]
    block = [Candidate(30, 50, 0.0), Candidate(10, 50, 1.0), Candidate(0, 50, 4.0)]
    runs, kept = [0, 1, 1, 1], [0, 0, 0, 0]
    assert split([head, block], kept, 130, runs) == [0, 0]  # 20 + 2 * 30 + 50
    assert split([head, block], kept, 120, runs) == [0, 1]  # three runs at 1 beat 10
    assert split([head, block], [0, 0], 120) == [0, 0]  # run once, the block fits free
    assert split([head, block], kept, 80, runs) == [0, 2]  # 12, not the head's 10 + 3
    assert split([head, block], kept, 69, runs) == [1, 2]  # the head's saves do not fit
    assert split([head, block], kept, 49, runs) is None


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


@pytest.mark.parametrize("seed", range(60))
def test_the_split_over_repeated_runs_is_the_cheapest_combination_that_fits(seed):
    rng = random.Random(1000 + seed)
    n = rng.randint(1, 3)
    graphs = _random_graphs(rng, n)
    drawn = list(range(n)) + [rng.randrange(n) for _ in range(rng.randint(1, 4))]
    rng.shuffle(drawn)
    first = list(dict.fromkeys(drawn))  # graphs are numbered in the order they first run
    runs = [first.index(g) for g in drawn]
    kept = [rng.randint(0, 10) for _ in runs]
    budget = rng.randint(40, 240)
    want = _brute(graphs, kept, budget, runs)
    chosen = split(graphs, kept, budget, runs)
    if want is None:
        assert chosen is None
        return
    assert chosen is not None and _value(graphs, kept, chosen, runs) == want


@pytest.mark.parametrize("seed", range(60))
def test_the_split_under_a_bound_on_what_the_runs_keep_is_the_cheapest_that_fits(seed):
    """A size memory budget is the step's: the runs together keep at most it for the
    backward (saves and kept bytes), with or without a peak budget beside it."""
    rng = random.Random(2000 + seed)
    n = rng.randint(1, 3)
    graphs = _random_graphs(rng, n)
    runs = list(range(n)) + [rng.randrange(n) for _ in range(rng.randint(0, 3))]
    kept = [rng.randint(0, 10) for _ in runs]
    budget = None if seed % 2 else rng.randint(60, 240)
    keep_budget = rng.randint(0, 120)
    want = _brute(graphs, kept, budget, runs, keep_budget)
    chosen = split(graphs, kept, budget, runs, keep_budget)
    if want is None:
        assert chosen is None
        return
    assert chosen is not None and _value(graphs, kept, chosen, runs) == want
    assert _value(graphs, kept, chosen, runs)[1] <= keep_budget
