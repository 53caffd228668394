"""A model that checkpoints its own blocks (torch.utils.checkpoint) under budget's backend:
torch's partitioner saves the generator's state for each random op the checkpoint makes
the backward recompute (budget.compile.rng_states). Oracles: saved-tensor hooks on the
real step (budget.runtime.measure.saved_bytes), its measured peak, and the gradients of
torch's own pipeline from the same generator state (the eager step's too, without dropout:
compiled dropout draws its masks in another order than eager's)."""

from __future__ import annotations

import pytest
import torch
from helpers.small import small_gpt
from torch.utils.checkpoint import checkpoint

import budget
from budget.runtime.measure import measure_peak, saved_bytes


def _self_checkpointed(dropout: float):
    ex = small_gpt(dropout)
    for block in ex.model.blocks:
        forward = block.forward
        block.forward = lambda *a, f=forward: checkpoint(f, *a, use_reentrant=False)
    return ex


def _grads(ex, step):
    ex.model.zero_grad(set_to_none=True)
    torch.manual_seed(7)
    step(*ex.args).backward()
    return [p.grad.clone() for p in ex.model.parameters()]


@pytest.mark.parametrize("dropout", [0.0, 0.1], ids=["attention", "dropout"])
# b=0.5 recomputes some blocks and saves others; the ends repeat it: -m full
@pytest.mark.parametrize(
    "b", [pytest.param(1.0, marks=pytest.mark.full), 0.5, pytest.param(0.0, marks=pytest.mark.full)]
)
def test_the_generator_states_a_models_own_checkpoint_saves_are_planned(b, dropout):
    """CPU attention carries a dropout probability, so it counts as random: each block's
    is recomputed from a saved generator state (the CPU's, about 5 KB), with dropout's
    too where there is dropout. The plan counts them in its saved bytes, within its
    target, and in its peak; gradients are those of torch's pipeline."""
    ex = _self_checkpointed(dropout)
    torch._dynamo.reset()
    reference = _grads(ex, torch.compile(ex.step, backend="aot_eager_decomp_partition"))
    if not dropout:
        for got, want in zip(_grads(ex, ex.step), reference, strict=True):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    torch._dynamo.reset()
    be = budget.backend(b, compiler="eager")
    step = torch.compile(ex.step, backend=be)
    exclude = list(ex.model.parameters()) + list(ex.model.buffers())
    torch.manual_seed(7)
    measured = saved_bytes(step, *ex.args, exclude=exclude)
    measured.output.backward()
    (plan,) = be.plans
    state = torch.get_rng_state().numel()
    attention = len(ex.model.blocks)
    assert plan.rng_state_bytes >= attention * state  # one per block's attention at least
    assert plan.rng_state_bytes % state == 0
    assert (plan.rng_state_bytes > attention * state) == (dropout > 0)
    assert measured.saved_bytes == plan.saved_bytes <= plan.target_bytes
    assert "generator states" in str(plan)  # the report says what they are
    ex.model.zero_grad(set_to_none=False)
    peak = measure_peak(step, *ex.args, warmup=0)
    assert peak * 0.995 <= plan.peak_bytes <= peak * 1.02, (plan.peak_bytes, peak)
    for got, want in zip(_grads(ex, step), reference, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
