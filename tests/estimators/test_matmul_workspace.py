"""CPU low-precision matmuls' own allocations (budget.estimators.matmul_workspace)."""

from __future__ import annotations

import torch

from budget.estimators.matmul_workspace import matmul_workspace_bytes
from budget.estimators.memory import workspace_bytes

aten = torch.ops.aten
# whether oneDNN runs bf16 matmuls on this CPU (AVX-512 and up): it then packs operands
# into scratch; elsewhere torch's own kernel runs them and allocates nothing inside
ONEDNN_BF16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()


def test_bf16_matmuls_are_measured_and_float32_ones_cost_nothing():
    a, w = torch.empty(64, 64, dtype=torch.bfloat16), torch.empty(64, 192, dtype=torch.bfloat16)
    measured = matmul_workspace_bytes(aten.mm.default, (a, w))
    assert measured > 0 if ONEDNN_BF16 else measured == 0  # oneDNN's packed operands, scratch
    assert matmul_workspace_bytes(aten.mm.default, (a, w)) == measured  # kept, not rerun
    assert workspace_bytes(aten.mm.default, (a, w), None) == measured
    assert workspace_bytes(aten.mm.default, (a, w), None, measure=False) == 0
    assert matmul_workspace_bytes(aten.mm.default, (a.float(), w.float())) == 0
    assert matmul_workspace_bytes(aten.add.Tensor, (a, a)) == 0


def test_the_measurement_runs_outside_a_fake_trace():
    """The eager planner asks from inside its fake-tensor run: the matmul is measured on
    real zeros all the same (a fake run allocates nothing and would measure 0)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a = torch.empty(32, 48, dtype=torch.bfloat16)
        w = torch.empty(48, 80, dtype=torch.bfloat16)
        inside = matmul_workspace_bytes(aten.mm.default, (a, w))
    real = (torch.empty(32, 48, dtype=torch.bfloat16), torch.empty(48, 80, dtype=torch.bfloat16))
    assert inside == matmul_workspace_bytes(aten.mm.default, real)
    assert inside > 0 if ONEDNN_BF16 else inside == 0
