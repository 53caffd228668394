"""budget.apply on a GPU: what it keeps and where the step peaks, as measured on CUDA."""

from __future__ import annotations

import pytest
import torch
from helpers.steps import assert_same_grads

import budget
from budget.eager.measure import measure_eager
from budget.models import get_builtin
from budget.runtime.measure import measure_peak

KiB = 1024
pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _gpt_on_cuda():
    ex = get_builtin("gpt", layers=2, d=128, seq=128, batch=2)
    ex.model.to("cuda")
    return ex, tuple(a.to("cuda") for a in ex.args)


def _grads(ex, args):
    ex.model.zero_grad(set_to_none=True)
    ex.step(*args).backward()
    grads = [p.grad.clone() for p in ex.model.parameters()]
    ex.model.zero_grad(set_to_none=True)
    return grads


@pytest.mark.parametrize(
    "memory_budget,offload", [(1.0, False), (0.5, False), (0.0, False), (0.5, True), (0.0, True)]
)
def test_apply_on_cuda_keeps_what_it_planned_and_peaks_where_predicted(memory_budget, offload):
    """With offload, values go to pinned host memory on a side stream: the device keeps
    the plan's device bytes all the same."""
    ex, args = _gpt_on_cuda()
    ref = _grads(ex, args)
    opts = {"offload": True, "estimator": "flops:h100"} if offload else {}
    plan = budget.apply(ex.model, *args, step=ex.step, memory_budget=memory_budget, **opts)
    assert bool(plan.offloaded) or not (offload and memory_budget == 0.0)
    kept = measure_eager(ex.step, *args).retained_bytes
    assert kept == plan.saved_bytes <= plan.target_bytes
    measured = measure_peak(ex.step, *args, requested=True)
    assert abs(plan.peak_bytes - measured) <= 0.01 * measured + 16 * KiB
    for g, r in zip(_grads(ex, args), ref, strict=True):
        torch.testing.assert_close(g, r)


def test_measured_peak_counts_blocks_at_or_above_the_bytes_requested():
    ex, args = _gpt_on_cuda()
    requested = measure_peak(ex.step, *args, requested=True)
    allocated = measure_peak(ex.step, *args)
    assert 0 < requested <= allocated


def test_apply_on_cuda_recomputes_cudnn_batchnorm_with_its_statistics_updated_once():
    """ResNet blocks on CUDA (cuDNN's BatchNorm, then an in-place ReLU): checkpointed, they
    recompute BatchNorm on copies of its running statistics (budget.eager.policy):
    gradients and statistics after a step as the unplanned model's, bytes kept as planned."""
    import copy

    torch.manual_seed(0)

    def block() -> torch.nn.Module:
        return torch.nn.Sequential(
            torch.nn.Conv2d(16, 16, 3, padding=1, bias=False),
            torch.nn.BatchNorm2d(16),
            torch.nn.ReLU(inplace=True),
            torch.nn.Conv2d(16, 16, 3, padding=1),
        )

    model = torch.nn.Sequential(block(), block()).cuda().train()
    ref = copy.deepcopy(model)
    x = torch.randn(4, 16, 16, 16, device="cuda")

    def loss(m: torch.nn.Module) -> torch.Tensor:
        return m(x).square().mean()

    plan = budget.apply(model, x, memory_budget=0.0, loss_fn=lambda out: out.square().mean())
    assert plan.checkpointed == ["0", "1"]
    for m in (model, ref):
        loss(m).backward()
    assert_same_grads(model, ref, rtol=1e-4, atol=1e-5)
    for b, c in zip(model.buffers(), ref.buffers(), strict=True):
        torch.testing.assert_close(b, c, rtol=1e-5, atol=1e-6)  # updated once, not twice
    model.zero_grad(set_to_none=True)
    assert measure_eager(lambda: loss(model)).retained_bytes == plan.saved_bytes
