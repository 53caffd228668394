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
    # checkpointing every block whole is a plan budget.apply may make: keeping as much,
    # budget's plan recomputes no more (at b=0.5 budget's own plan keeps more, for less)
    assert theirs.budget_recompute_cost <= theirs.recompute_cost * (1 + 1e-9)
    assert plan.total_recompute_cost < theirs.budget_recompute_cost


def test_at_budget_0_the_plan_keeps_and_recomputes_no_more_than_checkpointing_every_module():
    ex = _gpt()
    plans = eager_sweep(ex.model, *ex.args, step=ex.step, budgets=[0.0, 1.0], vs_torch=True)
    theirs = plans[0].torch_plan
    assert all(p.torch_plan == theirs for p in plans)  # one torch plan for the step
    assert plans[0].saved_bytes <= theirs.saved_bytes
    assert plans[0].recompute_cost <= theirs.recompute_cost * (1 + 1e-9)
    plain = eager_plan(ex.model, *ex.args, step=ex.step, memory_budget=0.5)
    assert plain.torch_plan is None


def test_values_budget_never_recomputes_inside_the_modules_are_said(tmp_path):
    """A collective inside each block: budget keeps its output where torch's checkpointing
    runs it again, so the torch plan is not quite torch's there. Its bytes are said on the
    report's line, and torch's own checkpointing of the blocks keeps less (measured)."""
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as fc
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(64, 64), nn.Linear(64, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = fc.all_reduce(self.a(x), "sum", dist.group.WORLD).tanh()
            return self.b(h).tanh()

    dist.init_process_group("gloo", rank=0, world_size=1, init_method=f"file://{tmp_path}/s")
    try:
        torch.manual_seed(0)
        model, x = nn.Sequential(Block(), Block()), torch.randn(32, 64)
        plan = eager_plan(model, x, memory_budget=0.0, vs_torch=True, loss_fn=lambda o: o.sum())
        theirs = plan.torch_plan
        block_output = 32 * 64 * 4
        assert theirs.kept_inside_bytes >= 2 * block_output  # an all_reduce's, per block
        assert theirs.kept_inside_bytes <= theirs.saved_bytes
        assert "(each whole, but for " in " ".join(str(plan).split())
        apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, Block))
        kept = retained_bytes(lambda x: model(x).sum(), x)
        assert kept.retained_bytes < theirs.saved_bytes
    finally:
        dist.destroy_process_group()
