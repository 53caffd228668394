"""budget.eager.peak_rows: the rows' stage of budget.apply's peak search."""

from __future__ import annotations

import contextlib
from unittest import mock

import pytest
import torch

import budget
import budget.eager
import budget.eager.peak_rows as peak_rows
from budget.core.plan import LivePoint
from budget.eager.peak_rows import FORWARD, HEAD, moments, row_groups
from budget.eager.plan import EagerPlan, RegionChoice
from budget.models import get_builtin
from budget.runtime.measure import measure_peak


def _plan(timeline, regions) -> EagerPlan:
    return EagerPlan(
        budget=0.5, target_bytes=0, saved_bytes=0, min_bytes=0, max_bytes=0,
        recompute_cost=0.0, recompute_flops=0.0, cost_unit="s", status="optimal", gap=0.0,
        solver="x", estimator="x", torch_version="x", graph_hash="x",
        timeline=timeline, regions=regions,
    )  # fmt: skip


def test_moments_split_the_timeline_at_each_modules_backward():
    live = [5, 9, 7, 20, 12, 30, 8, 11, 4]
    phases = ["forward"] * 3 + ["backward"] * 6
    timeline = [
        LivePoint(f"op{i}", ph, b) for i, (ph, b) in enumerate(zip(phases, live, strict=True))
    ]
    timeline[7] = LivePoint("conv", "backward", 11, peak_bytes=40)  # its workspace counts
    regions = [  # the second module's backward comes first (at 5), the first's at 7
        RegionChoice("a", "M.a", True, backward_at=7),
        RegionChoice("b", "M.b", True, backward_at=5),
        RegionChoice("c", "M.c", False),  # not seen: no moment of its own
    ]
    got = moments(_plan(timeline, regions), {("a", 0): 0, ("b", 0): 1, ("c", 0): 2})
    assert got == {FORWARD: 9, HEAD: 20, 1: 30, 0: 40}


def test_an_eager_timeline_holds_the_steps_peak_workspace_included():
    """The predicted timeline of a convnet reaches the plan's peak inside a convolution's
    call (``peak_bytes``: its workspace on top of the live bytes), above every point's
    live bytes."""
    ex = get_builtin("resnet")
    plan = budget.eager.plan(ex.model, *ex.args, step=ex.step, memory_budget=0.5)
    top = max(plan.timeline, key=lambda p: p.peak_bytes or p.live_bytes)
    assert top.peak_bytes == plan.peak_bytes > max(p.live_bytes for p in plan.timeline)
    assert top.node.startswith("convolution"), top  # inside a convolution: its workspace


def test_a_modules_row_counts_what_was_made_before_it():
    group_rank = {0: -1, 1: 0, 2: 1, 3: 2}  # group 0 outside every module
    assert sorted(row_groups(FORWARD, group_rank)) == [0, 1, 2, 3]
    assert sorted(row_groups(HEAD, group_rank)) == [0, 1, 2, 3]
    assert row_groups(0, group_rank) == [0]
    assert sorted(row_groups(2, group_rank)) == [0, 1, 2]


@pytest.mark.slow
def test_rows_find_a_cheaper_plan_under_a_peak_budget_and_it_fits_as_measured():
    """GPT-2 at a peak budget 30% of the way from b=0's predicted peak to b=1's: the grid
    of uniform saved-bytes targets alone settles on a dearer plan than the rows, which
    save later blocks' values (alive at fewer moments of the backward); the plan the
    rows find peaks as predicted, within the budget."""
    pytest.importorskip("transformers")
    from helpers.real_models import make

    def apply(rows: bool, **kw):
        m = make("gpt2")
        m.model.config.use_cache = False
        off = mock.patch.object(peak_rows.RowSearch, "run", lambda *a, **k: None)
        with off if not rows else contextlib.nullcontext():
            return m, budget.apply(m.model, *m.args, step=m.step, **kw)

    low, high = (
        apply(True, memory_budget=0.0)[1].peak_bytes,
        apply(True, memory_budget=1.0)[1].peak_bytes,
    )
    limit = int(low + 0.3 * (high - low))
    _, grid = apply(False, peak_memory_budget=f"{limit}B")
    m, rows = apply(True, peak_memory_budget=f"{limit}B")
    assert rows.solver == "cpsat rows"
    assert rows.recompute_cost < grid.recompute_cost
    assert rows.peak_bytes <= limit
    torch.manual_seed(0)
    assert measure_peak(m.step, *m.args) == rows.peak_bytes
