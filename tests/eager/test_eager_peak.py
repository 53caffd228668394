"""Eager plans' predicted peaks and peak memory budgets, against the step measured on real
tensors (budget.runtime.measure.measure_peak: torch.profiler's memory events on CPU)."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers.small import (
    bf16_autocast,
    linears_sum_loss,
    small_audio,
    small_gpt,
    small_lstm,
    small_mlp,
    small_resnet,
)

import budget
import budget.eager
from budget.runtime.measure import measure_peak

# the resnet: its convolutions' workspace is profiled per call (budget.estimators), so the
# prediction holds to the byte there too; under autocast, oneDNN's bf16 matmuls allocate
# inside each call (budget.estimators.onednn_workspace)
EXACT = {
    "gpt": small_gpt,
    "gpt-bf16-autocast": lambda: bf16_autocast(small_gpt()),
    "gpt-dropout": lambda: small_gpt(0.1),
    "mlp": small_mlp,
    "linears-sum-loss": linears_sum_loss,  # a matmul's copy of a stride-0 gradient
    # GroupNorm's backward sums per thread inside its kernel (estimators.prim_workspace)
    "audio": small_audio,
    "resnet": small_resnet,
    # BatchNorm of bf16 convolutions with float32 parameters: its saved statistics are
    # float32 on the CPU though fake tensors make them bf16 (budget.eager.fake.KernelGaps)
    "resnet-bf16-autocast": lambda: bf16_autocast(small_resnet()),
    # oneDNN's LSTM layers: the gates and operand copies inside each call, measured per
    # call (budget.estimators.onednn_workspace); the workspace the forward keeps for the
    # backward and the backward's two bias gradients, which fake tensors make otherwise
    # (budget.eager.fake.KernelGaps)
    "lstm": small_lstm,
    "lstm-bidirectional": lambda: small_lstm(bidirectional=True),
}


def _measured(ex) -> int:
    ex.model.zero_grad(set_to_none=True)
    torch.manual_seed(0)
    peak = measure_peak(ex.step, *ex.args)
    ex.model.zero_grad(set_to_none=True)
    return peak


@pytest.mark.parametrize("name", list(EXACT))
@pytest.mark.parametrize("b", [1.0, 0.5, 0.0])
def test_predicted_peak_is_the_measured_one(name, b):
    ex = EXACT[name]()
    plan = budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=b)
    assert plan.peak_bytes == _measured(ex)
    phases = {p.phase for p in plan.timeline}
    # checkpointed modules run their forward again inside the backward (under autocast a
    # plan may recompute only casts, which cost no FLOPs)
    assert ("recompute" in phases) >= (plan.recompute_flops > 0)
    if "autocast" not in name:
        assert ("recompute" in phases) == (plan.recompute_flops > 0)
    assert {"forward", "backward"} <= phases


def test_prediction_changes_nothing_real():
    ex = small_resnet()  # BatchNorm buffers: a real step would update them
    state = copy.deepcopy(ex.model.state_dict())
    rng = torch.get_rng_state()
    budget.eager.plan(ex.model, *ex.args, step=ex.step, memory_budget=0.0)
    assert all(p.grad is None for p in ex.model.parameters())
    assert torch.equal(torch.get_rng_state(), rng)
    for k, v in ex.model.state_dict().items():
        assert torch.equal(v, state[k]), k
    assert budget.eager.applied_plan(ex.model) is None
    assert "forward" not in ex.model.layers[0].__dict__  # nothing left installed


@pytest.fixture(scope="session")  # built once per worker: tests/conftest.py
def gpt_fractions():
    """The built-in GPT's eager plans at a grid of fractions, each measured."""
    ex = small_gpt()
    out = []
    for b in (1.0, 0.8, 0.6, 0.4, 0.2, 0.0):
        plan = budget.eager.plan(ex.model, *ex.args, step=ex.step, memory_budget=b)
        budget.apply(ex.model, step=ex.step, plan=plan)
        out.append((b, plan, _measured(ex)))
        budget.unapply(ex.model)
    return out


def test_peak_budget_is_met_as_measured_at_no_more_recompute(gpt_fractions):
    peaks = sorted({m for _, _, m in gpt_fractions})
    target = (peaks[0] + peaks[-1]) // 2
    ex = small_gpt()
    plan = budget.apply(ex.model, *ex.args, step=ex.step, peak_memory_budget=f"{target}B")
    assert plan.peak_target_bytes == target
    assert _measured(ex) <= target
    fitting = [p.recompute_cost for _, p, m in gpt_fractions if m <= target]
    assert plan.recompute_cost <= min(fitting) + 1e-12


def test_unreachable_peak_budget_names_the_lowest(gpt_fractions):
    lowest = min(m for _, _, m in gpt_fractions)
    ex = small_gpt()
    with pytest.raises(budget.BudgetTooSmallError, match="lowest predicted peak") as err:
        budget.apply(ex.model, *ex.args, step=ex.step, peak_memory_budget=f"{lowest // 2}B")
    assert err.value.lowest_peak_bytes <= lowest
    assert budget.eager.applied_plan(ex.model) is None


def test_peak_and_memory_budgets_both_hold(gpt_fractions):
    peaks = sorted(m for _, _, m in gpt_fractions)
    target = (peaks[0] + peaks[-1]) // 2
    ex = small_gpt()
    alone = budget.eager.plan(ex.model, *ex.args, step=ex.step, peak_memory_budget=f"{target}B")
    size = alone.saved_bytes // 2  # binding: the peak budget alone saves more
    plan = budget.apply(
        ex.model,
        *ex.args,
        step=ex.step,
        memory_budget=f"{size}B",
        peak_memory_budget=f"{target}B",
    )
    assert plan.saved_bytes <= size < alone.saved_bytes
    assert _measured(ex) <= target


def test_config_peak_budget_applies(gpt_fractions):
    lowest = min(m for _, _, m in gpt_fractions)
    ex = small_gpt()
    with (
        budget.config.patch(peak_memory_budget=f"{lowest // 2}B"),
        pytest.raises(budget.BudgetTooSmallError),
    ):
        budget.eager.plan(ex.model, *ex.args, step=ex.step)


def test_bad_peak_budgets_are_refused():
    ex = small_mlp()
    with pytest.raises(ValueError, match="peak memory budget must be"):
        budget.eager.plan(ex.model, *ex.args, step=ex.step, peak_memory_budget=0.5)
    plan = budget.eager.plan(ex.model, *ex.args, step=ex.step, memory_budget=0.5)
    with pytest.raises(ValueError, match="not both"):
        budget.apply(ex.model, step=ex.step, plan=plan, peak_memory_budget="1GiB")


LOSSES = {
    "mse": lambda o, y: torch.nn.functional.mse_loss(o, y),
    "smooth_l1": lambda o, y: torch.nn.functional.smooth_l1_loss(o, y),
    "huber": lambda o, y: torch.nn.functional.huber_loss(o, y),
    "bce": lambda o, y: torch.nn.functional.binary_cross_entropy(o.sigmoid(), y.sigmoid()),
    "bce_logits": lambda o, y: torch.nn.functional.binary_cross_entropy_with_logits(o, y),
    "soft_margin": lambda o, y: torch.nn.functional.soft_margin_loss(o, y.sign()),
}


@pytest.mark.parametrize("loss", list(LOSSES))
@pytest.mark.parametrize("b", [1.0, 0.0])
def test_a_cpu_loss_kernels_temporaries_and_kept_losses_are_predicted(loss, b):
    """Loss kernels with a reduction make the unreduced losses as a temporary, and several
    return the loss as a view of them (alive as long as the loss is): the peak of a step
    ending in one is predicted to the byte (budget.estimators.prim_workspace, and
    budget.eager.fake.KernelGaps for the kept storage)."""
    torch.manual_seed(0)
    model = torch.nn.Module()
    model.blocks = torch.nn.ModuleList(
        torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU()) for _ in range(2)
    )
    model.out = torch.nn.Linear(32, 16)
    x, y = torch.randn(8, 20, 32), torch.randn(8, 20, 16)

    def step(x, y):  # type: ignore[no-untyped-def]
        for block in model.blocks:
            x = block(x)
        return LOSSES[loss](model.out(x), y)

    plan = budget.apply(model, x, y, step=step, memory_budget=b)
    model.zero_grad(set_to_none=True)
    assert plan.peak_bytes == measure_peak(step, x, y)


@pytest.mark.parametrize("b", [1.0, 0.0])
def test_a_kernel_copying_an_expanded_gradient_is_predicted(b):
    """``gelu(h).sum()``: the sum's gradient is a scalar expanded with stride 0, and GELU's
    CPU backward copies it first (budget.estimators.prim_workspace measures a call on an
    expanded operand); the step peaks there at b=1."""
    torch.manual_seed(0)
    model = torch.nn.Module()
    model.blocks = torch.nn.ModuleList(
        torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU()) for _ in range(2)
    )
    x = torch.randn(4, 50, 64)

    def step(x):  # type: ignore[no-untyped-def]
        for block in model.blocks:
            x = block(x)
        return torch.nn.functional.gelu(x).sum()

    plan = budget.apply(model, x, step=step, memory_budget=b)
    model.zero_grad(set_to_none=True)
    assert plan.peak_bytes == measure_peak(step, x)


KERNELS = {
    # bilinear upsampling keeps its interpolation weights and a copy inside the kernel
    "bilinear": lambda h: torch.nn.functional.interpolate(h, scale_factor=2, mode="bilinear"),
    # softmax's backward copies a gradient that reaches it transposed
    "softmax-transposed": lambda h: h.softmax(-1).transpose(-1, -2).contiguous(),
    # an FFT over another dimension than the last transposes inside the kernel
    "fft": lambda h: torch.fft.irfft(torch.fft.rfft(h, dim=2), n=h.shape[2], dim=2),
    # exact GELU's backward copies a gradient laid out otherwise than its input
    "gelu-transposed": lambda h: torch.nn.functional.gelu(h).transpose(-1, -2),
    # F.fold's output lives in a storage of its input's size (kept: sin saves it)
    "fold": lambda h: _fold(_fold(h)),
}


def _fold(h: torch.Tensor) -> torch.Tensor:
    unfolded = torch.nn.functional.unfold(h, 3, padding=1) * 0.5
    return torch.nn.functional.fold(unfolded, h.shape[-2:], 3, padding=1).sin()


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_cpu_kernels_that_allocate_inside_themselves_are_measured(kernel):
    """Kernels whose CPU implementations take memory that no value shows are run on zeros
    laid out as the call's operands (budget.estimators.prim_workspace): the step's peak
    is predicted to the byte with each at its end."""
    torch.manual_seed(0)
    model = torch.nn.Module()
    model.blocks = torch.nn.ModuleList(torch.nn.Conv2d(8, 8, 1) for _ in range(2))
    x, w = torch.randn(2, 8, 24, 24), torch.randn(2, 8, 48, 48)

    def step(x, w):  # type: ignore[no-untyped-def]
        for block in model.blocks:
            x = block(x)
        out = KERNELS[kernel](x)
        return (out * w[..., : out.shape[-2], : out.shape[-1]]).sum()

    plan = budget.apply(model, x, w, step=step, memory_budget=1.0)
    model.zero_grad(set_to_none=True)
    assert plan.peak_bytes == measure_peak(step, x, w)


@pytest.mark.parametrize("path", ["apply", "eager-compiler"])
def test_an_embedding_bag_in_max_mode_is_predicted_with_its_backwards_gathers(path):
    """An EmbeddingBag's backward in max mode gathers the gradient rows and the maximum
    indices of the bags that are not empty, a count the bag sizes' values decide: its
    allocation is measured with every bag taken as nonempty (the bags here are). The CPU
    kernel's ``offset2bag`` has one element more in its storage than its shape shows:
    budget.apply's fake run makes it so, the compiled path's prediction is 8 bytes under."""
    torch.manual_seed(0)
    model = torch.nn.Module()
    model.bag = torch.nn.EmbeddingBag(2000, 64, mode="max")
    model.blocks = torch.nn.ModuleList(torch.nn.Linear(64, 64) for _ in range(2))
    idx, offsets = torch.randint(0, 2000, (1024,)), torch.arange(0, 1024, 8)

    def step(idx, offsets):  # type: ignore[no-untyped-def]
        x = model.bag(idx, offsets)
        for block in model.blocks:
            x = block(x).relu()
        return x.square().mean()

    if path == "apply":
        predicted = budget.apply(model, idx, offsets, step=step, memory_budget=1.0).peak_bytes
    else:
        torch._dynamo.reset()
        be = budget.backend(memory_budget=1.0, compiler="eager")
        step = torch.compile(step, backend=be)
        step(idx, offsets).backward()
        predicted = budget.step_peak(be.plans)[0]
    model.zero_grad(set_to_none=True)
    assert predicted == measure_peak(step, idx, offsets) - (0 if path == "apply" else 8)
