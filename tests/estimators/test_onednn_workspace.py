"""CPU low-precision matmuls' and LSTM layers' own allocations (estimators.onednn_workspace)."""

from __future__ import annotations

import pytest
import torch

import budget
from budget.estimators.memory import workspace_bytes
from budget.estimators.onednn_workspace import onednn_workspace_bytes

aten = torch.ops.aten
# whether oneDNN runs bf16 matmuls on this CPU (AVX-512 and up): it then packs operands
# into scratch; elsewhere torch's own kernel runs them and allocates nothing inside
ONEDNN_BF16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()


def test_bf16_matmuls_are_measured_and_float32_ones_cost_nothing():
    a, w = torch.empty(64, 64, dtype=torch.bfloat16), torch.empty(64, 192, dtype=torch.bfloat16)
    measured = onednn_workspace_bytes(aten.mm.default, (a, w))
    assert measured > 0 if ONEDNN_BF16 else measured == 0  # oneDNN's packed operands, scratch
    assert onednn_workspace_bytes(aten.mm.default, (a, w)) == measured  # kept, not rerun
    assert workspace_bytes(aten.mm.default, (a, w), None) == measured
    assert workspace_bytes(aten.mm.default, (a, w), None, measure=False) == 0
    assert onednn_workspace_bytes(aten.mm.default, (a.float(), w.float())) == 0
    assert onednn_workspace_bytes(aten.add.Tensor, (a, a)) == 0


def test_the_measurement_runs_outside_a_fake_trace():
    """The eager planner asks from inside its fake-tensor run: the matmul is measured on
    real zeros all the same (a fake run allocates nothing and would measure 0)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a = torch.empty(32, 48, dtype=torch.bfloat16)
        w = torch.empty(48, 80, dtype=torch.bfloat16)
        inside = onednn_workspace_bytes(aten.mm.default, (a, w))
    real = (torch.empty(32, 48, dtype=torch.bfloat16), torch.empty(48, 80, dtype=torch.bfloat16))
    assert inside == onednn_workspace_bytes(aten.mm.default, real)
    assert inside > 0 if ONEDNN_BF16 else inside == 0


def test_the_out_call_inductor_makes_takes_the_scratch_of_the_call_it_stands_for():
    # Inductor's code runs extern_kernels.mm(a, w, out=buf): the same kernel, measured as mm
    a, w = torch.empty(64, 64, dtype=torch.bfloat16), torch.empty(64, 192, dtype=torch.bfloat16)
    assert onednn_workspace_bytes(aten.mm.out, (a, w)) == onednn_workspace_bytes(
        aten.mm.default, (a, w)
    )
    b = torch.empty(64, 192, dtype=torch.bfloat16)
    assert onednn_workspace_bytes(aten.addmm.out, (b, a, w)) == onednn_workspace_bytes(
        aten.addmm.default, (b, a, w)
    )
    if ONEDNN_BF16:
        assert onednn_workspace_bytes(aten.mm.out, (a, w)) > 0


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


def test_an_lstm_layers_calls_are_measured_in_any_dtype_from_a_fake_trace_too():
    """nn.LSTM on the CPU runs one oneDNN call per layer and direction, forward and
    backward, each allocating inside itself (gates, operand copies): measured on zeros of
    the call's sizes and strides, the same from a fake trace as from real operands."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode

    calls = []

    class Calls(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if "rnn_layer" in func.name():
                calls.append((func, args))
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    lstm = torch.nn.LSTM(16, 16, batch_first=True)
    with Calls():
        lstm(torch.randn(4, 10, 16))[0].sum().backward()
    assert [f for f, _ in calls] == [
        aten.mkldnn_rnn_layer.default,
        aten.mkldnn_rnn_layer_backward.default,
    ]
    for func, args in calls:
        measured = onednn_workspace_bytes(func, args)
        assert measured > 0
        assert workspace_bytes(func, args, None) == measured
        assert workspace_bytes(func, args, None, measure=False) == 0
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fake = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
            assert onednn_workspace_bytes(func, fake) == measured


def test_a_float32_matmul_copies_an_operand_blas_cannot_read_as_it_is():
    """A ``sum`` loss's gradient is expanded with stride 0; a Linear's backward hands it to
    ``mm``, whose CPU kernel copies it first. Rows- or columns-contiguous operands (a
    transpose included) are read as they are: nothing measured, nothing run."""
    grad = torch.ones(()).expand(80, 32)
    w = torch.empty(32, 48)
    copied = onednn_workspace_bytes(aten.mm.default, (grad, w))
    assert copied >= grad.shape.numel() * 4
    assert onednn_workspace_bytes(aten.mm.default, (grad.t(), torch.empty(80, 48))) >= copied
    assert onednn_workspace_bytes(aten.mm.default, (torch.empty(80, 32), w)) == 0
    assert onednn_workspace_bytes(aten.mm.default, (torch.empty(32, 80).t(), w)) == 0
    assert onednn_workspace_bytes(aten.mm.default, (torch.empty(80, 64)[:, ::2], w)) > 0


def test_workspace_of_an_expanded_operand_has_one_owner_and_honours_measure_false():
    """A matmul on a stride-0 operand is priced by this module, whether or not the caller
    gives the call's keyword arguments (which open prim_workspace's measurement of other
    calls on expanded operands); ``measure=False`` (conv_workspace="rule") runs nothing."""
    grad, w = torch.ones(()).expand(80, 32), torch.empty(32, 48)
    copied = onednn_workspace_bytes(aten.mm.default, (grad, w))
    assert workspace_bytes(aten.mm.default, (grad, w), None, kwargs={}) == copied > 0
    assert workspace_bytes(aten.mm.default, (grad, w), None, kwargs={}, measure=False) == 0
    x = torch.empty(80, 32)
    gelu = aten.gelu_backward.default
    assert workspace_bytes(gelu, (grad, x), x, kwargs={"approximate": "none"}) > 0
    assert workspace_bytes(gelu, (grad, x), x, kwargs={}, measure=False) == 0
    assert workspace_bytes(gelu, (grad, x), x) == 0  # no kwargs: the call is not known
