"""solvers/auto.py: ``Auto.enough``, the cost above which a caller has no use for a plan
(the eager planner's trial of a region left unchecked). Oracle: every plan enumerated
(tests/helpers/oracle.py)."""

from __future__ import annotations

import pytest
from helpers import oracle
from helpers.problems import distinct_storage, view_group

from budget.solvers import InfeasibleError, get_solver
from budget.solvers.auto import Auto, asking


def _cases():
    """(problem, target) pairs where the min-cut's plan is not proven optimal."""
    mincut = get_solver("mincut")
    for kind in (distinct_storage, view_group):
        for seed in range(30):
            p = kind(seed, n=11)
            total = int(p.storage_bytes.sum())
            for t in (total // 4, total // 3, total // 2, 2 * total // 3):
                try:
                    quick = mincut.solve(p, t)
                except InfeasibleError:
                    continue
                if quick.status != "optimal" and quick.bound is not None and quick.bound > 0:
                    yield p, t, quick


CASES = list(_cases())


def test_there_are_cases_the_cut_does_not_prove():
    assert len(CASES) >= 5


@pytest.mark.parametrize("case", range(len(CASES)))
def test_a_plan_of_no_use_is_not_proven_and_one_of_use_is_the_optimum(case):
    """Asked for a plan of cost at most ``enough`` below the cut's bound, auto returns the
    cut's plan unproven: no plan is that cheap (the oracle says so), so the caller's
    answer is the one a full solve gives. At or above the optimum it solves as without."""
    p, t, quick = CASES[case]
    best_cost, _ = oracle.optimum(p, t)
    plain = get_solver("auto")
    full = plain.solve(p, t)
    below = quick.bound * 0.999
    early = asking(plain, below).solve(p, t)
    assert early.status == "feasible" and early.objective == quick.objective
    assert best_cost > below and early.objective > below  # no plan of use, either way
    again = asking(plain, best_cost).solve(p, t)
    assert (again.saved, again.status, again.objective) == (full.saved, full.status, full.objective)
    assert plain.enough is None  # asking copies: the solver itself is unchanged


def test_only_auto_is_told():
    cpsat = get_solver("cpsat")
    assert asking(cpsat, 1.0) is cpsat
    assert isinstance(asking(get_solver("auto"), 1.0), Auto)
