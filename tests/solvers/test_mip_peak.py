"""budget.solvers.mip.peak: the CP-SAT model of the exact peak search against the bound it
encodes (named test_mip_peak: tests/compile/test_peak_model.py tests the peak model). For plans of a real graph, the model with the plan's decisions fixed is feasible
at a limit exactly when every row of the bound, evaluated directly by
LivenessBound.row_values (plain Python, no solver), is at or under it."""

from __future__ import annotations

import functools
import random

import pytest
from helpers.partitions import capture
from helpers.small import small_gpt, small_resnet

pytest.importorskip("ortools")

from ortools.sat.python import cp_model  # noqa: E402

from budget.compile.liveness import liveness_bound  # noqa: E402
from budget.solvers.mip.peak import PeakModel  # noqa: E402


# the ResNet repeats the GPT's check on a convnet's graph: -m full
@pytest.fixture(params=["gpt", pytest.param("resnet", marks=pytest.mark.full)])
def graph(request):
    return _graph(request.param)


@functools.cache  # built once per worker and model: tests/conftest.py
def _graph(name: str):
    example, compiler = (
        (small_gpt(), "inductor")
        if name == "gpt"
        else (
            small_resnet(),
            "eager",
        )
    )
    got = capture(example, compiler)
    p = got.partitions
    bound = liveness_bound(p.joint_module.graph, p.node_info, p.nodes, p.num_fwd_outputs)
    return got.problem, bound


def _canonical(problem, saved):
    """``saved`` without what the model never saves (views that cost nothing and hold no
    storage of their own beside what is saved), pruned."""
    kept = set(saved)
    for v in list(kept):
        g = int(problem.storage[v])
        if problem.cost[v] == 0 and problem.can_recompute[v] and g >= 0:
            shares = any(u in kept and problem.storage[u] == g for u in problem.inputs[v])
            if problem.storage_bytes[g] == 0 or shares:
                kept.discard(v)
    return problem.prune_unused(sorted(kept))


def _feasible(problem, bound, saved, limit) -> bool:
    m = PeakModel(problem, bound, limit, None)
    kept = set(saved)
    for v, x in m.s.items():
        m.model.add(x == int(v in kept))
    for v, x in m.r.items():  # the plan's recomputations, exactly
        m.model.add(x == int(v in set(problem.recompute_closure(saved))))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = 60
    solver.parameters.num_workers = 1
    status = solver.solve(m.model)
    assert status in (cp_model.OPTIMAL, cp_model.FEASIBLE, cp_model.INFEASIBLE)
    return status != cp_model.INFEASIBLE


def test_a_plan_is_feasible_exactly_at_its_highest_row(graph):
    problem, bound = graph
    rng = random.Random(0)
    free = [v for v in range(problem.n) if not problem.is_input[v] and problem.can_save[v]]
    checked = 0
    for _ in range(12):
        p = rng.random()
        saved = _canonical(problem, [v for v in free if rng.random() < p])
        if problem.check(saved):
            continue
        top = max(bound.row_values(saved, problem.recompute_closure(saved)))
        assert _feasible(problem, bound, saved, top)
        assert not _feasible(problem, bound, saved, top - 1)
        checked += 1
    assert checked >= 6
