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


@pytest.mark.parametrize("memory_budget", [1.0, 0.5, 0.0])
def test_apply_on_cuda_keeps_what_it_planned_and_peaks_where_predicted(memory_budget):
    ex, args = _gpt_on_cuda()
    ref = _grads(ex, args)
    plan = budget.apply(ex.model, *args, step=ex.step, memory_budget=memory_budget)
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


@pytest.mark.parametrize("memory_budget", [0.5, 0.0])
def test_apply_with_offload_on_cuda_frees_what_it_moves(memory_budget):
    """Offloaded values go to pinned host memory on a side stream: the device keeps the
    plan's device bytes, the step peaks where predicted, gradients are unchanged."""
    ex, args = _gpt_on_cuda()
    ref = _grads(ex, args)
    plan = budget.apply(
        ex.model,
        *args,
        step=ex.step,
        memory_budget=memory_budget,
        offload=True,
        estimator="flops:h100",
    )
    if memory_budget == 0.0:
        assert plan.offloaded
    kept = measure_eager(ex.step, *args).retained_bytes
    assert kept == plan.saved_bytes <= plan.target_bytes
    measured = measure_peak(ex.step, *args, requested=True)
    assert abs(plan.peak_bytes - measured) <= 0.01 * measured + 16 * KiB
    for g, r in zip(_grads(ex, args), ref, strict=True):
        torch.testing.assert_close(g, r)
