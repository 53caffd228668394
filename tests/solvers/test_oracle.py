"""The brute-force oracle (tests/helpers/oracle.py) that the solver tests trust: against
answers worked out by hand on drawn graphs, and against Problem's own pricing (two
independent readings of DESIGN.md that must agree)."""

from __future__ import annotations

import itertools

import pytest
from helpers import oracle
from helpers.problems import make, random_problem, rich_problem, view_group

from budget.core.problem import Problem

# A fork:
#
#      x          graph input
#      |
#      a          cost 4, 100 B
#     / \
#    b*  c*       b: cost 1, 30 B;  c: cost 2, 50 B   (* = needed by the backward)
#
# Every saved set by hand, as (cost, bytes):
#   {}        b, c, a recomputed        (7, 0)
#   {a}       b, c from a               (3, 100)
#   {b}       c and a                   (6, 30)
#   {c}       b and a                   (5, 50)
#   {b, c}    nothing                   (0, 80)
#   {a, b}    c                         (2, 130)
#   {a, c}    b                         (1, 150)
#   {a, b, c} nothing                   (0, 180)
A, B, C = 1, 2, 3


def fork(**a: object) -> Problem:
    return make(
        1,
        [
            {"name": "a", "needed": False, "cost": 4, "bytes": 100, **a},
            {"name": "b", "cost": 1, "bytes": 30},
            {"name": "c", "cost": 2, "bytes": 50},
        ],
        [(0, A), (A, B), (A, C)],
    )


def test_oracle_on_a_fork():
    p = fork()
    assert oracle.plans(p) == {
        (): (7.0, 0),
        (A,): (3.0, 100),
        (B,): (6.0, 30),
        (C,): (5.0, 50),
        (B, C): (0.0, 80),
        (A, B): (2.0, 130),
        (A, C): (1.0, 150),
        (A, B, C): (0.0, 180),
    }
    assert oracle.frontier(p) == [(0, 7.0), (30, 6.0), (50, 5.0), (80, 0.0)]
    assert oracle.optimum(p) == (0.0, 80)
    assert oracle.optimum(p, 79) == (5.0, 50)
    assert oracle.optimum(p, 29) == (7.0, 0)
    assert oracle.optimum(p, 79, minimize="bytes") == (7.0, 0)
    assert oracle.price(p, [C, B]) == (0.0, 80)


def test_oracle_on_a_fork_with_a_random_op():
    # a cannot be recomputed: every plan that recomputes b or c must save a
    p = fork(recompute=False)
    assert oracle.plans(p) == {
        (A,): (3.0, 100),
        (B, C): (0.0, 80),
        (A, B): (2.0, 130),
        (A, C): (1.0, 150),
        (A, B, C): (0.0, 180),
    }
    assert oracle.optimum(p, 79) is None
    assert oracle.optimum(p, None, minimize="bytes") == (0.0, 80)
    assert oracle.price(p, [B]) is None


def test_oracle_on_a_fork_with_a_view():
    # c is a free view of a (same storage): saving both holds a's 100 B once
    #   {} (5, 0)  {a} (1, 100)  {b} (4, 30)  {c} (5, 100)  {b, c} (0, 130)
    #   {a, b} (0, 130)  {a, c} (1, 100)  {a, b, c} (0, 130)
    p = make(
        1,
        [
            {"name": "a", "needed": False, "cost": 4, "bytes": 100},
            {"name": "b", "cost": 1, "bytes": 30},
            {"name": "c", "cost": 0, "storage": 1},
        ],
        [(0, A), (A, B), (A, C)],
    )
    assert oracle.price(p, [A, C]) == (1.0, 100)
    assert oracle.price(p, [A, B, C]) == (0.0, 130)
    assert oracle.price(p, [C]) == (5.0, 100)
    assert oracle.frontier(p) == [(0, 5.0), (30, 4.0), (100, 1.0), (130, 0.0)]


@pytest.mark.parametrize(
    "kind,n",
    [(random_problem, 10), (rich_problem, 12), (view_group, 11)],
    ids=["random", "rich", "view"],
)
@pytest.mark.parametrize("seed", range(15))
def test_oracle_agrees_with_problem_pricing(kind, n, seed):
    """Every saved set: valid for the oracle exactly when Problem.check passes, at the
    price of its recompute closure (non-negative costs: the least-cost completion)."""
    p = kind(seed, n)
    savable = [v for v in range(p.n) if not p.is_input[v] and p.can_save[v]]
    expect = {}
    for mask in itertools.product([0, 1], repeat=len(savable)):
        saved = tuple(v for v, m in zip(savable, mask, strict=True) if m)
        if not p.check(saved):
            expect[saved] = (p.recompute_cost(saved), p.saved_bytes(saved))
    assert oracle.plans(p) == expect
