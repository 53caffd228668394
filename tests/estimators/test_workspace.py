"""CPU convolution workspace (budget.estimators.memory.workspace_bytes) against what
torch.profiler sees the kernel allocate and free inside the call: the peak models add the
estimate at each convolution, so it must not fall short where the workspace is large. The
convolution tests check the rule (``measure=False``), the fallback where a convolution is
not measured on the host (tests/estimators/test_conv_workspace.py).

The oracle is the profiler's running sum of allocations during the call, less the call's
outputs (budget.runtime.measure.measure_workspace, which the bench uses too); it shares no
code with the rule.
"""

from __future__ import annotations

import pytest
import torch

from budget.estimators.memory import is_channels_last, workspace_bytes
from budget.runtime.measure import measure_workspace

aten = torch.ops.aten
LAYOUTS = {"NCHW": torch.contiguous_format, "NHWC": torch.channels_last}


def _conv(n, cin, cout, side, layout):
    fmt = LAYOUTS[layout]
    x = torch.randn(n, cin, side, side).to(memory_format=fmt)
    w = torch.randn(cout, cin, 3, 3).to(memory_format=fmt)
    conv = (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    y = aten.convolution.default(*conv)
    g = torch.randn(y.shape).to(memory_format=fmt)
    bwd = (g, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, False])
    return conv, y, bwd


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("shape", [(8, 64, 64, 32), (4, 256, 256, 8), (2, 256, 256, 2)])
def test_large_convolution_workspace_is_covered(shape, layout):
    """A 256-channel convolution on small images (its weight, 2.25 MiB, is four times its
    input) copies the weight, and in the backward its gradient too, when it runs
    channels-last; on images smaller than its kernel (2x2) its backward keeps copies of
    the weight per thread, in either layout (18 MiB at 2 threads): the estimate covers
    each, and is not over by more than a few activations."""
    conv, y, bwd = _conv(*shape, layout)
    for op, args, out in (
        (aten.convolution.default, conv, y),
        (aten.convolution_backward.default, bwd, None),
    ):
        measured = measure_workspace(lambda op=op, args=args: op(*args))
        estimate = workspace_bytes(op, args, out, measure=False)
        activation = y.numel() * y.element_size()
        assert measured <= estimate, (op, measured, estimate)
        small_image_backward = op is aten.convolution_backward.default and shape[3] < 3
        if not small_image_backward:  # that path is taken on some CPUs only: counted always
            assert estimate <= measured + 2 * activation + 2**20, (op, measured, estimate)


def test_the_layout_is_read_from_the_operands_unless_given():
    """Inductor's layout optimisation runs convolutions channels-last although the
    graph's values are contiguous: the caller says so, and the rule follows it."""
    conv, y, bwd = _conv(4, 256, 256, 8, "NCHW")
    assert not is_channels_last(conv[0])
    contiguous = workspace_bytes(aten.convolution_backward.default, bwd, None, measure=False)
    nhwc = workspace_bytes(
        aten.convolution_backward.default, bwd, None, channels_last=True, measure=False
    )
    weight = conv[1].numel() * conv[1].element_size()
    assert nhwc >= 2 * weight > contiguous - weight
    nhwc_conv, _, nhwc_bwd = _conv(4, 256, 256, 8, "NHWC")
    assert is_channels_last(nhwc_conv[0])
    assert workspace_bytes(aten.convolution_backward.default, nhwc_bwd, None, measure=False) == nhwc


ATTENTION = aten._scaled_dot_product_flash_attention_for_cpu.default
ATTENTION_BACKWARD = aten._scaled_dot_product_flash_attention_for_cpu_backward.default


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("transposed", [False, True], ids=["BHTD", "BTHD"])
@pytest.mark.parametrize(
    "shape", [(2, 4, 32, 16, 32), (1, 2, 300, 64, 300), (2, 4, 32, 16, 600), (1, 1, 1024, 32, 1024)]
)
def test_cpu_flash_attention_workspace_is_covered(shape, transposed, dtype):
    """CPU flash attention allocates per-thread blocks of scores (and, in the backward,
    their gradient), and copies an output gradient laid out otherwise than its output:
    measured on zeros of the call's layouts, the estimate is the measurement; by rule
    (``measure=False``) it covers it, and in float32 it is the measurement, within the
    few bytes per query row it allows."""
    b, h, t, d, s = shape

    def make(n):
        x = torch.randn(b, n, h, d).transpose(1, 2) if transposed else torch.randn(b, h, n, d)
        return x.to(dtype)

    q, k, v = make(t), make(s), make(s)
    out, lse = ATTENTION(q, k, v)
    grad = make(t)
    for op, args in (
        (ATTENTION, (q, k, v)),
        (ATTENTION_BACKWARD, (grad, q, k, v, out, lse, 0.0, False)),
    ):
        measured = measure_workspace(lambda op=op, args=args: op(*args))
        assert workspace_bytes(op, args, None, kwargs={}) == measured
        estimate = workspace_bytes(op, args, None, measure=False)
        assert measured <= estimate, (op, measured, estimate)
        if dtype == torch.float32 or op is ATTENTION:
            assert estimate <= measured + 4 * t, (op, measured, estimate)


@pytest.mark.parametrize(
    "x_shape, w_shape, stride, padding, groups",
    [
        ((2, 40, 16, 16), (40, 1, 7, 7), 1, 3, 40),  # ConvNeXt's depthwise 7x7
        ((2, 320, 2, 2), (320, 1, 7, 7), 1, 3, 320),  # the same on an image smaller than it
        ((2, 80, 8, 8), (160, 80, 2, 2), 2, 0, 1),  # its downsampling: stride = kernel
    ],
    ids=["depthwise", "depthwise-small-image", "patchify"],
)
def test_channels_last_convnext_convolutions_are_covered(x_shape, w_shape, stride, padding, groups):
    """ConvNeXt runs these channels-last; on an AVX-512 EPYC oneDNN's depthwise backward
    held 257 copies of its weight (16 MiB for a 63 KiB weight) and its stride-2 2x2
    downsampling one weight more than other convolutions, which put an eager ConvNeXt's
    step 37% above its predicted peak. The estimate covers both (a bound, on CPUs that
    take other paths)."""
    x = torch.randn(*x_shape).to(memory_format=torch.channels_last)
    w = torch.randn(*w_shape).to(memory_format=torch.channels_last)
    conv = (x, w, None, [stride] * 2, [padding] * 2, [1, 1], False, [0, 0], groups)
    y = aten.convolution.default(*conv)
    g = torch.randn(y.shape).to(memory_format=torch.channels_last)
    bwd = (g, x, w, None, [stride] * 2, [padding] * 2, [1, 1], False, [0, 0], groups)
    bwd = (*bwd, [True, True, False])
    for op, args, out in (
        (aten.convolution.default, conv, y),
        (aten.convolution_backward.default, bwd, None),
    ):
        measured = measure_workspace(lambda op=op, args=args: op(*args))
        assert measured <= workspace_bytes(op, args, out, measure=False), (op, measured)


KERNELS_ON_DATA = {
    # a sum of booleans casts them to int64 inside the call
    "bool-sum": lambda: (aten.sum.default, (torch.rand(64, 48) > 0.5,)),
    "int32-sum-dim": lambda: (
        aten.sum.dim_IntList,
        (torch.randint(0, 9, (64, 48), dtype=torch.int32), [1]),
    ),
    # exact GELU's backward on a gradient laid out otherwise than its input
    "gelu-backward": lambda: (
        aten.gelu_backward.default,
        (torch.randn(48, 64).t(), torch.randn(64, 48)),
    ),
    # F.fold on an operand laid out otherwise copies it
    "col2im": lambda: (
        aten.col2im.default,
        (torch.randn(2, 36, 64).transpose(1, 2).contiguous().transpose(1, 2), [8, 8])
        + ([3, 3], [1, 1], [1, 1], [1, 1]),
    ),
    # Inductor's masked indexing (OPT's positions): indices clamped, values masked first
    "masked-index": lambda: (
        aten._unsafe_masked_index.default,
        (torch.randn(64, 48), torch.rand(256, 1) > 0.3, [torch.randint(-8, 72, (256,))], 0.0),
    ),
    "masked-index-put": lambda: (
        aten._unsafe_masked_index_put_accumulate.default,
        (torch.zeros(64, 48), torch.rand(256, 1) > 0.3, [torch.randint(-8, 72, (256,))])
        + (torch.randn(256, 48),),
    ),
}


@pytest.mark.parametrize("kernel", list(KERNELS_ON_DATA))
def test_cpu_kernels_workspace_is_their_allocation_on_real_data(kernel):
    """What these CPU kernels allocate inside themselves, measured on the real call,
    is the estimate (made on zeros of the call's layouts); by rule (``measure=False``) 0."""
    op, args = KERNELS_ON_DATA[kernel]()
    out = op(*args)
    measured = measure_workspace(lambda: op(*args))
    assert measured > 0
    assert workspace_bytes(op, args, out, kwargs={}) == measured
    assert workspace_bytes(op, args, out, kwargs={}, measure=False) == 0
