"""What an op allocates for the Python numbers it is given
(budget.estimators.memory.wrapped_scalar_bytes): the 0-dim tensor torch wraps a number in
and the op's cast of it. The oracle is torch.profiler around the real call
(budget.runtime.measure.measure_workspace: what the call allocates beyond its output)."""

from __future__ import annotations

import pytest
import torch

from budget.estimators.memory import workspace_bytes, wrapped_scalar_bytes
from budget.runtime.measure import measure_workspace

aten = torch.ops.aten
x = torch.randn(64)
half = x.half()
ints = torch.arange(64, dtype=torch.int32)
longs = torch.arange(64)
mask = x > 0

CALLS = {
    "mul.Tensor float32": (aten.mul.Tensor, (x, 0.5)),
    "mul.Tensor float16": (aten.mul.Tensor, (half, 0.5)),
    "mul.Tensor int32 by an int": (aten.mul.Tensor, (ints, 2)),
    "mul.Tensor bool": (aten.mul.Tensor, (mask, True)),
    "add.Tensor int64 (no cast)": (aten.add.Tensor, (longs, 1)),
    "sub.Tensor": (aten.sub.Tensor, (x, 1.0)),
    # a number first (a decomposed 1 - x: Llama's SiLU backward, which a step peaks in)
    "sub.Tensor of a number and a tensor": (aten.sub.Tensor, (1, x)),
    "add.Tensor of a number and a tensor": (aten.add.Tensor, (1.0, x)),
    "div.Tensor": (aten.div.Tensor, (x, 2)),
    "mul.Scalar": (aten.mul.Scalar, (x, 0.5)),
    "div.Scalar": (aten.div.Scalar, (x, 2.0)),
    "rsub.Scalar": (aten.rsub.Scalar, (x, 1.0)),
    "ge.Scalar (a comparison casts to its operand's dtype)": (aten.ge.Scalar, (x, 0.5)),
    "eq.Scalar": (aten.eq.Scalar, (x, 0)),
    "clamp": (aten.clamp.default, (x, 0.0)),
    "pow.Tensor_Scalar": (aten.pow.Tensor_Scalar, (x, 3.0)),
    "fill.Scalar": (aten.fill.Scalar, (x, 1.0)),
    "masked_fill.Scalar": (aten.masked_fill.Scalar, (x, mask, 0.0)),
    "leaky_relu": (aten.leaky_relu.default, (x, 0.01)),
    "hardtanh": (aten.hardtanh.default, (x, -1.0, 1.0)),
    "threshold_backward": (aten.threshold_backward.default, (x, x, 0.0)),
    "mul.Tensor of two tensors": (aten.mul.Tensor, (x, x)),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_the_bytes_a_call_wraps_its_numbers_in_are_what_it_allocates(name):
    op, args = CALLS[name]
    out = op(*args)
    measured = measure_workspace(lambda: op(*args))
    assert wrapped_scalar_bytes(op, args, out) == measured
    assert workspace_bytes(op, args, out) == measured  # what the peak models add


def test_tensors_and_other_devices_cost_nothing():
    """A run on fake or meta tensors passes a wrapped number as a tensor where one was made
    (counted as the storage it is), and a CUDA op's wrapped number lives on the host."""
    assert wrapped_scalar_bytes(aten.mul.Tensor, (x, torch.tensor(0.5)), x) == 0
    meta = x.to("meta")
    assert workspace_bytes(aten.mul.Tensor, (meta, 0.5), meta, device="cuda") == 0
