"""CPU pointwise ops on operands of different dtypes (budget.estimators.memory.
promotion_bytes): TensorIterator's copies of the operands to their common dtype, and its
temporary for a floating output of another dtype. The oracle is torch.profiler around the
real call (budget.runtime.measure.measure_workspace: what the call allocates beyond its
output)."""

from __future__ import annotations

import pytest
import torch

from budget.estimators.memory import promotion_bytes, workspace_bytes
from budget.runtime.measure import measure_workspace

aten = torch.ops.aten
n = 4096
x = torch.randn(n)
low = x.to(torch.bfloat16)
ints = torch.arange(n, dtype=torch.int32)
longs = torch.arange(n)
mask = x > 0

CALLS = {
    "bool times float (a mask applied)": (aten.mul.Tensor, (mask, x)),
    "float times bool": (aten.mul.Tensor, (x, mask)),
    "int32 times float": (aten.mul.Tensor, (ints, x)),
    "float32 plus bfloat16 (autocast's residual)": (aten.add.Tensor, (x, low)),
    "bfloat16 plus float32": (aten.add.Tensor, (low, x)),
    "int32 times a float number": (aten.mul.Tensor, (ints, 0.5)),
    "comparison of int32 and float": (aten.lt.Tensor, (ints, x)),
    "comparison of int64 and int32": (aten.eq.Tensor, (longs, ints)),
    "logical and of bool and float": (aten.logical_and.default, (mask, x)),
    "sin of int32 (integers made floats)": (aten.sin.default, (ints,)),
    "true division of int32": (aten.div.Tensor, (ints, ints)),
    "where: the condition selects": (aten.where.self, (mask, x, low)),
    "masked_fill: the mask selects": (aten.masked_fill.Scalar, (low, mask, 1.0)),
    "clamp between bfloat16 bounds": (aten.clamp.Tensor, (x, low, x)),
    "silu backward of a bfloat16 input": (aten.silu_backward.default, (x, low)),
    "threshold backward of a bfloat16 input": (aten.threshold_backward.default, (x, low, 0.0)),
    "sigmoid backward, bfloat16 gradient": (aten.sigmoid_backward.default, (low, x)),
    "dropout backward: its mask and scale multiply": (
        aten.native_dropout_backward.default,
        (x, mask, 2.0),
    ),
    "same dtypes: nothing": (aten.mul.Tensor, (x, x)),
    "a conversion on purpose: nothing": (
        torch.ops.prims.convert_element_type.default,
        (ints, torch.float32),
    ),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_the_copies_are_what_the_cpu_kernel_allocates(name):
    op, args = CALLS[name]
    out = op(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    measured = measure_workspace(lambda: op(*args))
    assert workspace_bytes(op, args, out) == measured


def test_cuda_kernels_cast_as_they_load():
    meta = [a.to("meta") for a in (mask, x)]
    assert workspace_bytes(aten.mul.Tensor, meta, meta[1], device="cuda") == 0
    assert promotion_bytes(aten.mul.Tensor, (mask, x), x) == n * 4
