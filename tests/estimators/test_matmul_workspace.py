"""CPU low-precision matmuls' own allocations (budget.estimators.matmul_workspace)."""

from __future__ import annotations

import pytest
import torch

import budget
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


def test_the_out_call_inductor_makes_takes_the_scratch_of_the_call_it_stands_for():
    # Inductor's code runs extern_kernels.mm(a, w, out=buf): the same kernel, measured as mm
    a, w = torch.empty(64, 64, dtype=torch.bfloat16), torch.empty(64, 192, dtype=torch.bfloat16)
    assert matmul_workspace_bytes(aten.mm.out, (a, w)) == matmul_workspace_bytes(
        aten.mm.default, (a, w)
    )
    b = torch.empty(64, 192, dtype=torch.bfloat16)
    assert matmul_workspace_bytes(aten.addmm.out, (b, a, w)) == matmul_workspace_bytes(
        aten.addmm.default, (b, a, w)
    )
    if ONEDNN_BF16:
        assert matmul_workspace_bytes(aten.mm.out, (a, w)) > 0


@pytest.mark.skipif(not ONEDNN_BF16, reason="this host's bf16 matmuls take no scratch")
def test_under_inductor_a_bf16_steps_code_peak_is_measured_at_its_matmuls():
    """The built-in GPT under bf16 autocast at b=1: its step peaks inside a backward
    matmul's scratch, which the code's peak counts at the ``out=`` call."""
    from budget.models import get_builtin
    from budget.runtime.measure import measure_peak

    ex = get_builtin("gpt", vocab=512, d=64, heads=4, layers=4, seq=32, batch=2)

    def step(*a):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return ex.step(*a)

    torch._dynamo.reset()
    be = budget.backend(1.0)
    measured = measure_peak(torch.compile(step, backend=be), *ex.args)
    assert be.plans[0].compiled_peak_bytes == measured
