"""budget.eager.torch_plan: torch's checkpointing of every module beside an eager plan
(``vs_torch``), checked against torch itself: what ``apply_activation_checkpointing`` of
those modules keeps after the forward (measured) and the step's measured peak."""

from __future__ import annotations

from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    apply_activation_checkpointing,
)

from budget.eager.apply import plan as eager_plan
from budget.eager.apply import sweep as eager_sweep
from budget.eager.measure import retained_bytes
from budget.models import get_builtin
from budget.runtime.measure import measure_peak


def _gpt():  # type: ignore[no-untyped-def]
    return get_builtin("gpt", layers=2, d=64, heads=2, seq=32, batch=2, vocab=128)


def test_the_torch_plan_is_what_checkpointing_every_module_keeps_and_peaks_at():
    ex = _gpt()
    plan = eager_plan(ex.model, *ex.args, step=ex.step, memory_budget=0.5, vs_torch=True)
    theirs = plan.torch_plan
    assert theirs.modules == ["blocks.0", "blocks.1"] and theirs.fraction is None
    full = _gpt()
    named = dict(full.model.named_modules())
    blocks = {id(named[n]) for n in theirs.modules}
    apply_activation_checkpointing(full.model, check_fn=lambda m: id(m) in blocks)
    kept = retained_bytes(full.step, *full.args)
    kept.output.backward()
    # a few bytes of scalars a run makes beside what it keeps (as for budget's own plans)
    assert theirs.saved_bytes <= kept.retained_bytes <= theirs.saved_bytes + 256
    full.model.zero_grad(set_to_none=True)
    assert theirs.peak_bytes == measure_peak(full.step, *full.args)
    assert "vs torch   checkpoint_wrapper on 2 modules (each whole): saves" in str(plan)


def test_at_budget_0_the_plan_keeps_and_recomputes_no_more_than_checkpointing_every_module():
    ex = _gpt()
    plans = eager_sweep(ex.model, *ex.args, step=ex.step, budgets=[0.0, 1.0], vs_torch=True)
    theirs = plans[0].torch_plan
    assert all(p.torch_plan == theirs for p in plans)  # one torch plan for the step
    assert plans[0].saved_bytes <= theirs.saved_bytes
    assert plans[0].recompute_cost <= theirs.recompute_cost * (1 + 1e-9)
    plain = eager_plan(ex.model, *ex.args, step=ex.step, memory_budget=0.5)
    assert plain.torch_plan is None
