"""The bound of budget.core.liveness, built from real joint graphs
(budget.compile.liveness), against the peak model it bounds: for random plans partitioned
and predicted by budget.compile.peak, no row is above the predicted peak, and the forward's
rows are its predicted live bytes. The oracle is the peak model on the partitioned graphs,
which the bound never calls."""

from __future__ import annotations

import functools
import random

import pytest
from helpers.partitions import capture
from helpers.small import small_gpt, small_mlp, small_resnet

from budget.compile.liveness import liveness_bound


def _random_plans(problem, n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    free = [v for v in range(problem.n) if not problem.is_input[v] and problem.can_save[v]]
    plans = [[], free]  # save nothing, save everything
    for _ in range(n):
        p = rng.random()
        plans.append([v for v in free if rng.random() < p])
    return [s for s in plans if not problem.check(problem.prune_unused(s))]


CASES = {
    "gpt-inductor": (small_gpt, "inductor"),
    "gpt-eager": (small_gpt, "eager"),
    "mlp-inductor": (small_mlp, "inductor"),
    "resnet-eager": (small_resnet, "eager"),
}


@functools.cache  # built once per worker and case: tests/conftest.py
def _captured(name: str):
    make, compiler = CASES[name]
    got = capture(make(), compiler)
    got.name = name
    got.bound = liveness_bound(
        got.partitions.joint_module.graph,
        got.partitions.node_info,
        got.partitions.nodes,
        got.partitions.num_fwd_outputs,
    )
    return got


# the GPT with the eager compiler repeats the other cases' checks on another graph: -m full
@pytest.fixture(
    params=[
        pytest.param(n, marks=pytest.mark.full) if n == "gpt-eager" else n for n in sorted(CASES)
    ]
)
def captured(request):
    return _captured(request.param)


def test_no_row_is_above_the_predicted_peak_of_a_plan_that_recomputes_once(captured):
    problem, bound = captured.problem, captured.bound
    tight = 0
    for saved in _random_plans(problem, 24):
        plan = captured.plan(saved)
        saved = problem.prune_unused(saved)
        rows = bound.row_values(saved, problem.recompute_closure(saved))
        assert max(rows) <= plan.peak_bytes, (len(saved), max(rows), plan.peak_bytes)
        # the rows count storages, not what a kernel allocates inside itself (a
        # convolution's workspace, the 0-dim tensor an op wraps a Python number in)
        tight += max(rows) == max(p.live_bytes for p in plan.timeline)
    if "resnet" not in captured.name:
        assert tight >= 1  # the peak's storages for some plans: those peaking in the forward


def test_the_forward_rows_are_the_forwards_predicted_live_bytes(captured):
    problem, bound = captured.problem, captured.bound
    for saved in _random_plans(problem, 12, seed=1):
        plan = captured.plan(saved)
        saved = problem.prune_unused(saved)
        rows = bound.row_values(saved, problem.recompute_closure(saved))
        forward = [p.live_bytes for p in plan.timeline if p.phase == "forward"]
        assert max(rows[: bound.forward_steps]) == max(forward)


def test_the_floor_is_below_every_plan_even_rescheduled(captured):
    """The floor holds for plans whose backward recomputes values again too."""
    problem, bound = captured.problem, captured.bound
    floor = bound.floor()
    assert floor > 0
    for saved in _random_plans(problem, 8, seed=2):
        assert floor <= captured.plan(saved, limit=floor).peak_bytes


def test_refining_by_plans_keeps_it_a_bound_and_tightens_it(captured):
    """refine adds events at the times these plans first need their values; the rows stay
    below the predicted peak of every plan (those not refined by too), and do not go down."""
    import copy

    problem = captured.problem
    bound = copy.deepcopy(captured.bound)
    plans = _random_plans(problem, 16, seed=3)
    before = {}
    for saved in plans:
        saved = problem.prune_unused(saved)
        before[tuple(saved)] = max(bound.row_values(saved, problem.recompute_closure(saved)))
    for saved in plans[::2]:
        saved = problem.prune_unused(saved)
        bound.refine(saved, problem.recompute_closure(saved))
    for saved in plans:
        peak = captured.plan(saved).peak_bytes
        saved = problem.prune_unused(saved)
        top = max(bound.row_values(saved, problem.recompute_closure(saved)))
        assert before[tuple(saved)] <= top <= peak
