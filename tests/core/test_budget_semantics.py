"""The issue's reference cases: saved MiB and backward FLOPs, measured as DESIGN.md says."""

from __future__ import annotations

import pytest
import torch
from helpers.steps import UNIT, MiB, chain, compile_with

from budget.runtime.measure import measure_step


def _mib(n: int) -> float:
    return round(n / MiB, 1)


def cos_mm(x, w):
    return torch.mm(x.cos(), w).sum()


def two_branches(x1, w1, x2, w2):
    return torch.mm(x1, w1).cos().sum() + torch.mm(x2, w2).cos().sum()


def _leaves(*shapes):
    torch.manual_seed(0)
    return [torch.randn(*s, requires_grad=True) for s in shapes]


def test_cos_mm():
    args = _leaves((512, 512), (512, 512))
    eager = measure_step(cos_mm, *args)
    assert _mib(eager.saved_bytes) == 1.0
    for b, saved in [(1.0, 1.0), (0.5, 0.0)]:
        f, be = compile_with(cos_mm, b)
        m = measure_step(f, *args)
        assert _mib(m.saved_bytes) == saved
        assert m.backward_flops == eager.backward_flops
        assert be.plans[0].saved_bytes == m.saved_bytes  # prediction is exact
        torch._dynamo.reset()


@pytest.mark.parametrize("b", [i / 10 for i in range(11)])
def test_five_matmul_chain(b):
    args = _leaves(*[(512, 512)] * 6)
    eager = measure_step(chain, *args)
    f, be = compile_with(chain, b)
    m = measure_step(f, *args)
    extra = (m.backward_flops - eager.backward_flops) / UNIT
    plan = be.plans[0]
    if b <= 0.5:
        assert _mib(m.saved_bytes) == round(10 * b, 1)
        assert extra == pytest.approx(5 - 10 * b)
    elif b < 1.0:
        assert _mib(m.saved_bytes) == 5.0
        assert extra == 0
    else:
        assert _mib(m.saved_bytes) == 10.0
        assert extra == 0
    assert plan.saved_bytes == m.saved_bytes
    assert plan.saved_bytes <= plan.target_bytes
    assert plan.recompute_flops == m.backward_flops - eager.backward_flops


def test_two_branches_recompute_the_cheaper_matmul():
    args = _leaves((512, 512), (512, 2048), (1024, 1024), (1024, 1024))
    eager = measure_step(two_branches, *args)
    assert (_mib(eager.saved_bytes), eager.backward_flops / UNIT) == (8.0, 24)
    f, be = compile_with(two_branches, 0.5)
    m = measure_step(f, *args)
    assert (_mib(m.saved_bytes), m.backward_flops / UNIT) == (4.0, 28)


def test_absolute_size_budget_matches_fraction():
    args = _leaves(*[(512, 512)] * 6)
    f, be = compile_with(chain, "3MiB")
    m = measure_step(f, *args)
    assert m.saved_bytes == 3 * MiB
    assert be.plans[0].target_bytes == 3 * MiB
    assert be.plans[0].recompute_flops == 2 * UNIT
