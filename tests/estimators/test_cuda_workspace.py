"""CUDA kernels' own allocations, measured on the GPU (budget.estimators.cuda_workspace)."""

from __future__ import annotations

import pytest
import torch

from budget.estimators.cuda_workspace import cuda_workspace_bytes
from budget.estimators.memory import workspace_bytes

aten = torch.ops.aten
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _attention_backward_args(device: str, dtype=torch.float32):
    b, h, t, e = 2, 4, 128, 32
    q, k, v, out, grad = (torch.empty(b, h, t, e, device=device, dtype=dtype) for _ in range(5))
    lse = torch.empty(b, h, t, device=device, dtype=torch.float32)
    seed = torch.empty((), device=device, dtype=torch.int64)
    return (grad, q, k, v, None, out, lse, seed, seed, 0.0, [True, True, True, False], True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer without CUDA")
def test_without_a_gpu_cuda_calls_count_nothing():
    args = _attention_backward_args("meta")
    op = aten._scaled_dot_product_efficient_attention_backward.default
    assert cuda_workspace_bytes(op, args) == 0
    assert workspace_bytes(op, args, None, device="cuda") == 0


@pytest.mark.cuda
@needs_cuda
def test_efficient_attention_backward_allocates_inside_itself_on_the_gpu():
    """Its fp32 accumulators and delta: more than nothing, the same on every call, and
    what a real call on real tensors peaks at above its operands and outputs (the
    caching allocator's requested bytes, measured here around one call)."""
    op = aten._scaled_dot_product_efficient_attention_backward.default
    meta = _attention_backward_args("meta")
    measured = cuda_workspace_bytes(op, meta)
    assert measured > 0
    assert cuda_workspace_bytes(op, meta) == measured
    real = [
        torch.randn_like(a, device="cuda") if isinstance(a, torch.Tensor) and a.dim() == 4 else a
        for a in _attention_backward_args("cuda")
    ]
    real[6] = torch.randn(2, 4, 128, device="cuda")
    real[7] = real[8] = torch.zeros((), device="cuda", dtype=torch.int64)
    op(*real)
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["requested_bytes.all.current"]
    torch.cuda.reset_peak_memory_stats()
    grads = op(*real)
    torch.cuda.synchronize()
    peak = torch.cuda.memory_stats()["requested_bytes.all.peak"] - before
    made = sum(g.untyped_storage().nbytes() for g in grads if g is not None)
    assert peak - made == measured


@pytest.mark.cuda
@needs_cuda
def test_matmuls_are_not_measured():
    a = torch.empty(64, 64, device="meta")
    assert cuda_workspace_bytes(aten.mm.default, (a, a)) == 0


def test_the_measurement_runs_outside_the_callers_dispatch_modes(monkeypatch):
    """The peak models ask from inside their own modes (fake tensors, the compiled peak's
    meta run); the real run on the GPU must see none of them, nor they it."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    import budget.estimators.cuda_workspace as cw

    modes = []

    def measure(func, args, kwargs, device):
        modes.append(_get_current_dispatch_mode())
        return 123

    monkeypatch.setattr(cw.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(cw.torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(cw, "_measure", measure)
    monkeypatch.setattr(cw, "_MEMORY", {})
    op = aten._scaled_dot_product_efficient_attention_backward.default
    with FakeTensorMode():
        assert cuda_workspace_bytes(op, _attention_backward_args("meta")) == 123
    assert modes == [None]
