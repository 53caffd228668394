"""Problem's graph API on hand-drawn graphs: every expected answer below was worked out by
hand from the drawing (DESIGN.md, "The optimisation, exactly"), never by calling another
Problem method."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from budget.core.problem import Problem
from budget.errors import InfeasibleError


def build(nodes: list[tuple], edges: list[tuple[int, int]], storage_bytes: list[int]) -> Problem:
    """Nodes as (name, is_input, needed, can_save, can_recompute, storage, cost, reason)."""
    cols = list(zip(*nodes, strict=True))
    return Problem(
        names=list(cols[0]),
        ops=["op"] * len(nodes),
        is_input=list(cols[1]),
        needed=list(cols[2]),
        can_save=list(cols[3]),
        can_recompute=list(cols[4]),
        storage=list(cols[5]),
        storage_bytes=storage_bytes,
        cost=list(cols[6]),
        flops=[0.0] * len(nodes),
        edges=edges,
        reason=list(cols[7]),
    )


# Graph A: a chain that forks and joins, views, an input view, a value with no storage.
#
#            x            (0) graph input, storage S0 (0 B)
#          / | \
#         a  t  s         a (1): cost 2, storage S1 (100 B)
#        / \              t (6): view of x, storage S0;  s (7): a size, no storage (-1)
#       b   c             b (2): view of a, cost 3, storage S1;  c (3): cost 5, S2 (40 B)
#       |   |
#       d*  |             d (4): cost 1, S3 (60 B)
#        \ /
#         e*              e (5): cost 4, S4 (10 B)           * = needed by the backward
#
# (a, b) is listed twice: a repeated edge is one input.
X, A, B, C, D, E, T, S = range(8)


def graph_a() -> Problem:
    return build(
        [
            ("x", True, False, True, False, 0, 0.0, ""),
            ("a", False, False, True, True, 1, 2.0, ""),
            ("b", False, False, True, True, 1, 3.0, ""),
            ("c", False, False, True, True, 2, 5.0, ""),
            ("d", False, True, True, True, 3, 1.0, ""),
            ("e", False, True, True, True, 4, 4.0, ""),
            ("t", False, False, True, True, 0, 0.0, ""),
            ("s", False, False, True, True, -1, 0.0, ""),
        ],
        [(X, A), (A, B), (A, B), (A, C), (B, D), (D, E), (C, E), (X, T), (X, S)],
        storage_bytes=[0, 100, 40, 60, 10],
    )


def test_adjacency():
    p = graph_a()
    assert p.inputs == [[], [X], [A], [A], [B], [C, D], [X], [X]]
    assert p.users == [[A, T, S], [B, C], [D], [E], [E], [], [], []]
    assert p.recompute_inputs == [[], [], [A], [A], [B], [C, D], [], []]


def test_adjacency_is_built_once_and_the_graph_is_read_only():
    p = graph_a()
    assert p.inputs is p.inputs and p.users is p.users
    with pytest.raises(ValueError, match="read-only"):
        p.edges[0, 0] = 3
    with pytest.raises(ValueError, match="read-only"):
        p.is_input[1] = True
    p.edges = np.array([[X, A], [A, E]])  # a new graph: the cached lists are dropped
    assert p.inputs == [[], [X], [], [], [], [A], [], []]
    assert p.users[A] == [E]
    q = dataclasses.replace(graph_a(), cost=np.zeros(8))  # a variant keeps its own graph
    assert q.inputs[E] == [C, D]


@pytest.mark.parametrize(
    "saved,closure,cost",
    [
        ([], [A, B, C, D, E], 15.0),  # d <- b <- a, e <- c <- a: everything but x, t, s
        ([D], [A, C, E], 11.0),  # e still reads c, which reads a
        ([A, E], [B, D], 4.0),  # d needs b, b reads the saved a
        ([C, D], [E], 4.0),
        ([D, E], [], 0.0),  # every needed value saved
        ([X, T, S], [A, B, C, D, E], 15.0),  # saving an input or unused values changes nothing
    ],
)
def test_recompute_closure_and_cost(saved, closure, cost):
    p = graph_a()
    assert p.recompute_closure(saved) == closure
    assert p.recompute_cost(saved) == cost


def test_recompute_closures_kept_are_the_closures_of_the_graph_at_hand():
    """The closures a Problem keeps: a caller's copy to change, a saved set found again
    whichever way it is given, and none kept once the graph or what it needs changes."""
    p = graph_a()
    got = p.recompute_closure([D])
    got.append(X)
    assert p.recompute_closure((D,)) == p.recompute_closure({D}) == [A, C, E]
    for k in range(40):  # more saved sets than are kept: the oldest go, none is wrong
        subset = [v for i, v in enumerate([A, B, C, D, E]) if k >> i & 1]
        assert p.recompute_closure(subset) == graph_a().recompute_closure(subset)
    with pytest.raises(ValueError, match="read-only"):
        p.needed[D] = False
    assert p.recompute_closure([E]) == [A, B, D]  # kept, then the graph changes
    needed = p.needed.copy()
    needed[D] = False  # d no longer read by the backward: nothing it reads is made again
    p.needed = needed
    assert p.recompute_closure([E]) == []
    assert p.recompute_closure([]) == [A, B, C, D, E]  # kept, then the graph changes
    p.edges = np.array([[X, A], [A, B], [B, D], [X, C], [C, E]])  # e reads c alone
    assert p.recompute_closure([]) == [C, E]


@pytest.mark.parametrize(
    "saved,bytes_",
    [
        ([], 0),
        ([A, B], 100),  # a view shares its base's storage: counted once
        ([A, B, C], 140),
        ([D, E], 70),
        ([T], 0),  # a view of a graph input: its storage is free
        ([S], 0),  # no storage at all
        ([A, B, C, D, E, T, S], 210),
    ],
)
def test_saved_bytes(saved, bytes_):
    assert graph_a().saved_bytes(saved) == bytes_


@pytest.mark.parametrize(
    "saved,kept",
    [
        ([A, B, C, D, E, T, S], [D, E]),  # nothing is recomputed: only the needed stay
        ([A, D], [A, D]),  # e is recomputed from d and from c, which reads a
        ([B, C, T], [B, C]),  # d reads b, e reads c; t is read by nobody
        ([A, B], [A, B]),  # d reads b; e is recomputed from c, which reads a
    ],
)
def test_prune_unused(saved, kept):
    p = graph_a()
    assert p.prune_unused(saved) == kept
    assert p.prune_unused(saved, closure=p.recompute_closure(saved)) == kept


# Graph B: forbidden decisions.
#
#   x      (0) graph input
#   |
#   r      (1) random op: cannot be recomputed ("rng"), 8 B
#   |
#   m      (2) not a tensor: cannot be saved ("not a tensor"), cost 1
#   |
#   y*     (3) cost 2, 16 B, needed by the backward
R, M, Y = 1, 2, 3


def graph_b() -> Problem:
    return build(
        [
            ("x", True, False, True, False, 0, 0.0, ""),
            ("r", False, False, True, False, 1, 3.0, "rng"),
            ("m", False, False, False, True, -1, 1.0, "not a tensor"),
            ("y", False, True, True, True, 2, 2.0, ""),
        ],
        [(X, R), (R, M), (M, Y)],
        storage_bytes=[0, 8, 16],
    )


@pytest.mark.parametrize(
    "saved,errors",
    [
        ([], ["r must be recomputed but cannot be (rng)"]),  # y <- m <- r
        ([R], []),
        ([Y], []),
        ([M], ["m saved but cannot be saved (not a tensor)"]),  # y is recomputed from m
        ([M, Y], ["m saved but cannot be saved (not a tensor)"]),
        ([X], ["r must be recomputed but cannot be (rng)"]),  # an input is never a save
    ],
)
def test_check(saved, errors):
    assert graph_b().check(saved) == errors


def test_graph_b_prices():
    p = graph_b()
    assert p.recompute_closure([R]) == [M, Y] and p.recompute_cost([R]) == 3.0
    assert p.saved_bytes([R]) == 8 and p.prune_unused([R, Y]) == [Y]


# Graph C: infeasible.
#
#   x*     (0) graph input, needed, and "neither": inputs are always available
#   |
#   a*     (1) needed, neither saved nor recomputed ("side effect")
#   |
#   b*     (2) needed, neither ("rng")
#   |
#   c      (3) neither ("io"), but not needed
#   d*     (4) needed, can be saved (reads x)


def graph_c() -> Problem:
    return build(
        [
            ("x", True, True, False, False, 0, 0.0, "graph input"),
            ("a", False, True, False, False, 1, 1.0, "side effect"),
            ("b", False, True, False, False, 2, 1.0, "rng"),
            ("c", False, False, False, False, 3, 1.0, "io"),
            ("d", False, True, True, False, 4, 1.0, ""),
        ],
        [(0, 1), (1, 2), (2, 3), (0, 4)],
        storage_bytes=[0, 4, 4, 4, 4],
    )


def test_unplannable_names_the_needed_nodes_nothing_can_make_available():
    p = graph_c()
    assert p.unplannable() == [1, 2]
    with pytest.raises(
        InfeasibleError,
        match=r"^a is needed by the backward but can be neither saved nor recomputed "
        r"\(side effect\)$",
    ):
        p.require_plannable()


def test_plannable_graphs():
    for p in (graph_a(), graph_b()):
        assert p.unplannable() == []
        assert p.require_plannable() is None
