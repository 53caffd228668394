"""budget.eager.fake.KernelGaps: on fake tensors, the op calls whose fake kernel makes
other outputs than the device's kernel get the device's (oracle: the real kernel run on
real tensors of the same shapes and dtypes; on CUDA where a GPU is lent)."""

from __future__ import annotations

import pytest
import torch

from budget.eager.fake import KernelGaps
from budget.runtime._torch_private import FakeTensorMode

aten = torch.ops.aten
DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.cuda,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
        ],
    ),
]
# each batch norm overload and its arguments after the input and the parameters
BATCH_NORMS = [
    (aten._batch_norm_with_update.default, 4, (0.1, 1e-5)),
    (aten._batch_norm_no_update.default, 4, (0.1, 1e-5)),
    (aten.native_batch_norm.default, 4, (True, 0.1, 1e-5)),
    (aten._native_batch_norm_legit.default, 4, (True, 0.1, 1e-5)),
    (aten._native_batch_norm_legit.no_stats, 2, (True, 0.1, 1e-5)),
    (aten._native_batch_norm_legit_no_training.default, 4, (0.1, 1e-5)),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("x_dtype", "p_dtype"),
    [
        (torch.bfloat16, torch.float32),  # a convnet under autocast
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.bfloat16),
        (torch.float32, torch.float32),
    ],
)
@pytest.mark.parametrize(("func", "params", "rest"), BATCH_NORMS, ids=lambda v: str(v))
def test_batch_norms_make_what_the_devices_kernel_makes(
    func, params, rest, x_dtype, p_dtype, device
):
    """A batch norm's saved statistics have the real kernel's dtype on fake tensors too
    (the CPU's are float32 for a bf16 input with float32 parameters; fake kernels said
    bf16, and an eager plan counted half their bytes)."""
    x = torch.randn(2, 8, 5, 5, dtype=x_dtype, device=device)
    made = [torch.zeros, torch.ones, torch.zeros, torch.ones][:params]
    ps = [make(8, dtype=p_dtype, device=device) for make in made]
    real = func(x, *[p.clone() for p in ps], *rest)
    mode = FakeTensorMode()
    with KernelGaps(), mode:
        fake = func(mode.from_tensor(x), *[mode.from_tensor(p) for p in ps], *rest)
    assert [(t.dtype, tuple(t.shape)) for t in fake] == [(t.dtype, tuple(t.shape)) for t in real]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("x_transposed", [False, True])
@pytest.mark.parametrize("mask", [[True, True, True], [True, False, False]])
def test_a_layer_norms_input_gradient_is_laid_out_as_the_devices_kernel_lays_it(
    mask, x_transposed, device
):
    """Given an output gradient laid out otherwise (Swin's transposed windows), the fake
    kernel laid the input gradient out like it, the device's kernel contiguously: a
    reshape of it then copied in the fake run alone, and an eager plan's peak counted
    the copy."""
    x = torch.randn(2, 64, 16, device=device).transpose(1, 2)  # (2, 16, 64)
    x = x if x_transposed else x.contiguous()
    grad = torch.randn(2, 64, 16, device=device).transpose(1, 2)  # (2, 16, 64), not contiguous
    w, b = torch.ones(64, device=device), torch.zeros(64, device=device)
    _, mean, rstd = aten.native_layer_norm(x, [64], w, b, 1e-5)
    args = (grad, x, [64], mean, rstd, w, b, mask)
    real = aten.native_layer_norm_backward(*args)
    mode = FakeTensorMode()
    with KernelGaps(), mode:
        fake = aten.native_layer_norm_backward(
            *[mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        )
    assert [t.stride() if t is not None else None for t in fake] == [
        t.stride() if t is not None else None for t in real
    ]


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("train", [True, False])
def test_an_lstm_layer_makes_the_workspace_the_cpu_kernel_makes(batch_first, train):
    """oneDNN's LSTM layer makes a workspace the backward reads; torch's meta function
    makes it empty, so an eager plan missed those bytes (and the step's peak them)."""
    lstm = torch.nn.LSTM(16, 32, batch_first=batch_first).train(train)
    x = torch.randn(3, 12, 16)
    seen: list = []

    class Record(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func is aten.mkldnn_rnn_layer.default:
                seen.append([(tuple(t.shape), t.dtype) for t in out])
            return out

    with Record():
        lstm(x)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode, KernelGaps(), Record():
        lstm(mode.from_tensor(x))
    real, fake = seen
    assert fake == real
