"""Recomputing again rather than holding (budget.compile.schedule): no plan peaks above
the b=1 plan's for want of a schedule, the values do not change, and the plan says what
the extra recomputation costs.

Oracles: torch.profiler's memory events (measure_peak) for peaks, the uncompiled step's
gradients for values, and a FlopCounterMode count of the backward for FLOPs; none of them
shares code with the rescheduling.
"""

from __future__ import annotations

import json

import pytest
import torch

import budget
from budget.compile.measure import backward_flops, measure_peak
from budget.core.plan import Plan
from budget.models import get_builtin

SMALL_GPT = dict(layers=2, d=64, heads=2, seq=64, batch=2, vocab=256)


def _grads(ex, step):
    ex.model.zero_grad(set_to_none=True)
    step(*ex.args).backward()
    return [p.grad.clone() for p in ex.model.parameters()]


def _run(ex, b: float, compiler: str = "eager"):
    torch._dynamo.reset()
    be = budget.backend(memory_budget=b, compiler=compiler)
    step = torch.compile(ex.step, backend=be)
    peak = measure_peak(step, *ex.args)
    (plan,) = be.plans
    return step, plan, peak


@pytest.mark.slow
def test_saving_nothing_no_longer_peaks_above_saving_everything():
    """b=0 on the GPT: recomputed once, the backward holds the whole forward again and
    peaks above b=1 (1.65 MB against 1.61 MB at this size before rescheduling); now some
    values are recomputed again, and the measured peak is the prediction, at or under b=1's,
    with the unplanned step's gradients."""
    ex = get_builtin("gpt", **SMALL_GPT)
    reference = _grads(ex, ex.step)
    _, top, top_peak = _run(ex, 1.0)
    step, plan, peak = _run(ex, 0.0)
    assert top.recomputed_again == [] and plan.recomputed_again
    assert set(plan.recomputed_again) <= set(plan.recomputed)  # only values it recomputes
    assert abs(plan.peak_bytes - peak) <= 1024 + 0.002 * peak, (plan.peak_bytes, peak)
    assert peak <= top_peak, (peak, top_peak)
    for got, want in zip(_grads(ex, step), reference, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("b", [0.8, 0.5, 0.2, 0.1])
def test_no_fraction_peaks_above_b1_on_the_gpt(b):
    ex = get_builtin("gpt", **SMALL_GPT)
    _, _, top_peak = _run(ex, 1.0)
    _, _, peak = _run(ex, b)
    assert peak <= top_peak, (b, peak, top_peak)


@pytest.mark.slow
def test_a_peak_budget_below_every_grid_plan_is_met_and_its_extra_flops_counted():
    """A peak budget 10% under the lowest peak of the saved-memory grid is met by
    recomputing again (matmuls too, at this target): as measured, and the backward FLOPs
    it adds over b=1, counted by FlopCounterMode, are what the plans say (recompute_flops,
    each recomputed value once, plus again_flops)."""
    ex = get_builtin("gpt", **SMALL_GPT)
    grid = budget.sweep(ex.step, *ex.args, budgets=[k / 20 for k in range(21)], compiler="eager")
    target = int(0.9 * min(p.peak_bytes for p in grid))
    measured, planned = [], []
    for kw in ({"memory_budget": 1.0}, {"peak_memory_budget": f"{target}B"}):
        torch._dynamo.reset()
        be = budget.backend(compiler="eager", **kw)
        step = torch.compile(ex.step, backend=be)
        peak = measure_peak(step, *ex.args)
        measured.append(backward_flops(step(*ex.args)))
        (plan,) = be.plans
        planned.append(plan.recompute_flops + plan.again_flops)
    assert peak <= target, (peak, target)
    assert plan.recomputed_again and plan.again_flops > 0
    assert measured[1] - measured[0] == pytest.approx(planned[1] - planned[0], rel=1e-9)


def test_plans_keep_their_extra_recomputation_in_json():
    ex = get_builtin("gpt", **SMALL_GPT)
    (plan,) = budget.plans(ex.step, *ex.args, memory_budget=0.0, compiler="eager")
    assert plan.recomputed_again
    back = Plan.from_json(plan.to_json())
    assert back.recomputed_again == plan.recomputed_again
    assert (back.again_cost, back.again_flops) == (plan.again_cost, plan.again_flops)


def test_a_version_2_plan_reads_with_no_extra_recomputation():
    ex = get_builtin("mlp", batch=8, d_in=16, d=32, layers=2)
    (plan,) = budget.plans(ex.step, *ex.args, memory_budget=0.5, compiler="eager")
    data = plan.to_dict()
    for key in ("recomputed_again", "again_cost", "again_flops"):
        del data[key]
    data["version"] = 2
    back = Plan.from_json(json.dumps(data))
    assert back.recomputed_again == [] and back.again_cost == 0.0


@pytest.mark.slow
def test_a_plan_file_gives_the_same_schedule(tmp_path):
    """Training from a saved plan reschedules its backward as the preview did: the same
    extra recomputations, the same predicted peak."""
    ex = get_builtin("gpt", **SMALL_GPT)
    (plan,) = budget.plans(ex.step, *ex.args, memory_budget=0.0, compiler="eager")
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json())
    torch._dynamo.reset()
    be = budget.backend(plan=str(path), compiler="eager")
    torch.compile(ex.step, backend=be)(*ex.args).backward()
    (applied,) = be.plans
    assert applied.recomputed_again == plan.recomputed_again
    assert applied.peak_bytes == plan.peak_bytes


@pytest.mark.slow
@pytest.mark.parametrize("layout_optimization", [True, False])
def test_inductor_convnets_are_not_rescheduled(layout_optimization):
    """Under Inductor, graphs with convolutions are left as torch orders them, with layout
    copies or without: a rescheduled convnet backward did not measure as predicted there
    either way. A peak target below every plan of the grid is refused, naming the lowest
    peak of the grid."""
    import torch._inductor.config as inductor_config

    from budget.errors import BudgetTooSmallError

    ex = get_builtin("resnet", batch=2, size=16, width=8, blocks=2)
    with inductor_config.patch(layout_optimization=layout_optimization):
        grid = budget.sweep(ex.step, *ex.args, budgets=[k / 20 for k in range(21)])
        assert all((p.copied_input_bytes > 0) == layout_optimization for p in grid)
        assert not any(p.recomputed_again for p in grid)
        lowest = min(p.peak_bytes for p in grid)
        with pytest.raises(BudgetTooSmallError) as refused:
            budget.plans(ex.step, *ex.args, peak_memory_budget=f"{lowest - 1}B")
    assert refused.value.lowest_peak_bytes == lowest
