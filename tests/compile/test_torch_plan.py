"""budget.compile.torch_plan: torch's own plan beside budget's (``vs_torch``), checked
against torch itself. The preview's figures for torch's plan are what a step compiled with
torch's partitioner at that ``activation_memory_budget`` saves (saved-tensor hooks),
peaks at (measured) and recomputes (its backward's FLOPs beyond the b=1 step's)."""

from __future__ import annotations

import pytest
import torch

import budget
from budget.models import get_builtin
from budget.runtime._torch_private import functorch_config
from budget.runtime.measure import backward_flops, measure_peak, saved_bytes


def _gpt(**kw):  # type: ignore[no-untyped-def]
    return get_builtin("gpt", layers=2, d=64, heads=2, seq=32, batch=2, vocab=128, **kw)


def _torch_step(ex, fraction: float, backend: str):  # type: ignore[no-untyped-def]
    """(saved bytes, measured peak, backward FLOPs) of ``ex``'s step compiled with torch's
    own partitioner at ``fraction``."""
    torch._dynamo.reset()
    with functorch_config.patch(activation_memory_budget=fraction):
        step = torch.compile(ex.step, backend=backend)
        step(*ex.args).backward()
        saved = saved_bytes(step, *ex.args).saved_bytes
        peak = measure_peak(step, *ex.args)
        flops = backward_flops(step(*ex.args))
    return saved, peak, flops


def test_torchs_plan_is_what_torchs_partitioner_saves_peaks_at_and_recomputes():
    """compiler="eager" (torch's ``aot_eager_decomp_partition``): op by op, so the graphs'
    predicted peak is the measured one, for torch's plan as for budget's."""
    ex = _gpt()
    *_, b1_flops = _torch_step(ex, 1.0, "aot_eager_decomp_partition")
    for fraction in (0.0, 0.5):  # 0.2 on every real model: tests/test_real_models.py
        torch._dynamo.reset()
        plan = budget.plan(
            ex.step, *ex.args, memory_budget=fraction, compiler="eager", vs_torch=True
        )
        theirs = plan.torch_plan
        saved, peak, flops = _torch_step(ex, fraction, "aot_eager_decomp_partition")
        assert theirs.fraction == fraction and not theirs.refused
        assert (theirs.saved_bytes, theirs.peak_bytes) == (saved, peak), fraction
        assert theirs.recompute_flops == flops - b1_flops, fraction
        if fraction < 1.0:  # budget's plan is a different one, saving within its target
            assert plan.saved_bytes <= plan.target_bytes


def test_at_the_bytes_torchs_plan_saves_budget_never_recomputes_more():
    """torch's set is a valid plan saving its bytes, so budget's optimum for a size budget
    of those bytes recomputes no more; on this GPT less at some fractions (where the same
    fraction falls elsewhere in the two ranges, the ratio at equal memory is the fair one,
    and the report and the sweep table show it). At sequence length 32, torch's knapsack
    finds budget's optimum at every fraction; at 64 it does not."""
    ex = get_builtin("gpt", layers=2, d=64, heads=2, seq=64, batch=2, vocab=128)
    budgets = [k / 10 for k in range(11)]
    plans = budget.sweep(ex.step, *ex.args, budgets=budgets, compiler="eager", vs_torch=True)
    pairs = [
        (p.torch_plan.budget_recompute_cost, p.torch_plan.recompute_cost)
        for p in plans
        if not p.torch_plan.refused
    ]
    assert len(pairs) == len(budgets)
    assert all(ours <= theirs * (1 + 1e-9) for ours, theirs in pairs), pairs
    assert any(ours < 0.99 * theirs for ours, theirs in pairs), pairs
    assert "at its saved bytes budget's plan recomputes" in " ".join(str(plans[3]).split())


def test_a_set_budget_refuses_is_priced_and_its_reasons_named():
    """With dropout, torch's partitioner at budget 0 recomputes the random masks' draws,
    which budget never does (a new sample): the comparison names why and predicts no
    peak for it."""
    ex = _gpt(dropout=0.1)
    plan = budget.plan(ex.step, *ex.args, memory_budget=0.0, compiler="eager", vs_torch=True)
    theirs = plan.torch_plan
    assert theirs.refused and all("random op" in r for r in theirs.refused)
    assert theirs.peak_bytes is None and theirs.recompute_flops > 0
    assert theirs.budget_recompute_cost is None  # no comparison at its bytes either
    text = str(plan)
    assert "vs torch   activation_memory_budget=0:" in text and "budget refuses it" in text


@pytest.mark.full  # 18 s; the set is chosen by the same code on Inductor's joint graph
def test_under_inductor_torchs_plan_saves_what_torchs_inductor_step_saves():
    """The preview runs Inductor's joint-graph passes as torch.compile does, so torch's
    set is chosen on the same graph: its bytes are those the default torch.compile saves."""
    ex = _gpt()
    plan = budget.plan(ex.step, *ex.args, memory_budget=0.5, vs_torch=True)
    saved, *_ = _torch_step(ex, 0.5, "inductor")
    assert plan.torch_plan.saved_bytes == saved


def test_vs_torch_needs_a_memory_budget_and_is_never_made_otherwise():
    ex = _gpt()
    with pytest.raises(ValueError, match="vs_torch=True .* not a peak budget"):
        budget.plan(ex.step, *ex.args, peak_memory_budget="10MiB", vs_torch=True)
    plain = budget.plan(ex.step, *ex.args, memory_budget=0.5, compiler="eager")
    assert plain.torch_plan is None and "vs torch" not in str(plain)
    swept = budget.sweep(ex.step, *ex.args, budgets=[0.0, 1.0], compiler="eager", vs_torch=True)
    assert [p.torch_plan.fraction for p in swept] == [0.0, 1.0]
    again = budget.Plan.from_json(swept[0].to_json())
    assert again.torch_plan == swept[0].torch_plan
