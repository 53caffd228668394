"""The autograd engine's sums of gradients on fake tensors (budget.eager.engine_sums),
against the real step's sums as torch.profiler records them (no dispatch mode active,
so the engine decides as in training)."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers.steps import assert_same_grads
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.profiler import profile
from torch.utils._python_dispatch import TorchDispatchMode

import budget
from budget.eager.engine_sums import EngineSums, exclusive_counts
from budget.runtime.measure import measure_peak

SUMS = ("aten::add", "aten::add_")

# each a loss of h (32 x 16, the output of a Linear) and two Linears q, k
CASES = {
    # two fresh gradients of h: the second summed into the first, in place
    "two-matmuls": lambda h, q, k: (q(h) * k(h)).sum(),
    # three: both sums in place
    "three-matmuls": lambda h, q, k: (q(h) * k(h) * q(h.relu())).sum(),
    # a residual: the add's node gives its gradient to h and to q's output
    "residual": lambda h, q, k: (h + q(h)).square().sum(),
    # the same gradient twice into one input: the engine holds it twice, out of place
    "twice": lambda h, q, k: (h + h).square().sum(),
    # the gradient of a sum is expanded (not dense): out of place
    "expanded": lambda h, q, k: (q(h) * k(h)).sum() + h.sum(),
    # atan2's backward adds inside its node, out of place, as do the sums into h
    "formula": lambda h, q, k: torch.atan2(q(h), k(h)).square().sum(),
    # a gradient the user keeps (retain_grad) is held by more than the engine
    "retained": lambda h, q, k: (_retained(h) * k(h)).sum(),
}


def _retained(h: torch.Tensor) -> torch.Tensor:
    h.retain_grad()
    return h


class _Sums(TorchDispatchMode):
    """Records the additions of h-sized tensors a fake backward runs (below EngineSums)."""

    def __init__(self) -> None:
        super().__init__()
        self.on, self.seen = False, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = func.name().split(".")[0]  # the op, its overload aside
        if self.on and name in SUMS and tuple(args[0].shape) == (32, 16):
            self.seen.append(name)
        return func(*args, **(kwargs or {}))


def _modules() -> tuple[nn.Module, ...]:
    torch.manual_seed(0)
    return nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16)


@pytest.mark.parametrize("case", list(CASES))
def test_fake_sums_are_made_in_place_where_the_real_engine_makes_them_so(case):
    p, q, k = _modules()
    x = torch.randn(32, 16)
    loss = CASES[case](p(x), q, k)
    with profile(record_shapes=True) as prof:
        loss.backward()
    real = [e.name for e in prof.events() if e.name in SUMS and e.input_shapes[0] == [32, 16]]

    counts = exclusive_counts()
    with FakeTensorMode(allow_non_fake_inputs=True):
        fake_x = torch.empty(32, 16)
        log, sums = _Sums(), EngineSums(counts)
        with log, sums:
            loss = CASES[case](p(fake_x), q, k)
            sums.hook(loss.grad_fn)
            log.on = True
            loss.backward()
    assert real, "the case sums no gradient"
    assert log.seen == real


def _three_projections() -> tuple[nn.Module, torch.Tensor]:
    """A block whose input feeds three projections (attention's q, k and v as separate
    Linears), its backward's peak where their three gradients are summed."""
    torch.manual_seed(0)
    model = nn.Module()
    model.inp = nn.Linear(64, 1024)
    model.blocks = nn.ModuleList(nn.Linear(1024, 16) for _ in range(3))
    return model, torch.randn(512, 64)


@pytest.mark.parametrize("b", [1.0, 0.0])
def test_a_value_read_by_three_projections_is_predicted_with_the_engines_in_place_sums(b):
    """The gradients of the three projections' input are summed in place by the engine:
    the predicted peak is the measured one, and gradients are the unplanned step's."""
    model, x = _three_projections()
    reference = copy.deepcopy(model)

    def step(x):  # type: ignore[no-untyped-def]
        h = model.inp(x).relu()
        q, k, v = (block(h) for block in model.blocks)
        return (q * k * v).square().mean()

    plan = budget.apply(model, x, step=step, memory_budget=b, modules=["blocks.0", "inp"])
    model.zero_grad(set_to_none=True)
    assert plan.peak_bytes == measure_peak(step, x)
    model.zero_grad(set_to_none=True)
    step(x).backward()
    h = reference.inp(x).relu()
    q, k, v = (block(h) for block in reference.blocks)
    (q * k * v).square().mean().backward()
    assert_same_grads(model, reference)
