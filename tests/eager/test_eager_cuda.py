"""budget.apply on a GPU: what it keeps and where the step peaks, as measured on CUDA."""

from __future__ import annotations

import pytest
import torch

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
