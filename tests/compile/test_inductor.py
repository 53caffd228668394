"""The default compiler: plans compiled by Inductor (CPU here) keep their numbers.

Inductor's first compile on CPU builds C++ kernels (tens of seconds), so this file is
small: the chain's measured memory, and gradients with dropout and a GPT-like block.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from helpers.steps import UNIT, MiB, chain, compile_with, grads_of

from budget.runtime.measure import measure_step


def test_inductor_chain_saves_what_the_plan_says():
    torch.manual_seed(0)
    # Scaled so values stay O(1): Inductor's vectorised cos/sin differ from eager's in the
    # last bits, and unscaled 512-wide matmuls amplify that past any sensible tolerance.
    args = [(torch.randn(512, 512) * 512**-0.5).requires_grad_() for _ in range(6)]
    eager = measure_step(chain, *args)
    _, ref = grads_of(chain, args, *args)
    for b, saved, extra in [(0.3, 3, 2), (0.7, 5, 0)]:
        torch._dynamo.reset()
        f, be = compile_with(chain, b, compiler="inductor")
        m = measure_step(f, *args)
        assert m.saved_bytes == saved * MiB == be.plans[0].saved_bytes
        assert m.backward_flops - eager.backward_flops == extra * UNIT
        _, got = grads_of(f, args, *args)
        for g, r in zip(got, ref, strict=True):
            torch.testing.assert_close(g, r, atol=1e-3, rtol=1e-4)


def test_inductor_dropout_gradients_match_budget_one():
    torch.manual_seed(0)
    w1, w2 = (torch.randn(64, 64, requires_grad=True) for _ in range(2))
    x = torch.randn(32, 64)

    def step(x):
        h = F.dropout(torch.mm(x, w1).relu(), p=0.5, training=True)
        return F.dropout(torch.mm(h, w2), p=0.3, training=True).sin().sum()

    f1, _ = compile_with(step, 1.0, compiler="inductor")
    _, ref = grads_of(f1, [w1, w2], x, seed=7)
    torch._dynamo.reset()
    f0, be = compile_with(step, 0.0, compiler="inductor")
    _, got = grads_of(f0, [w1, w2], x, seed=7)
    for g, r in zip(got, ref, strict=True):
        torch.testing.assert_close(g, r)
    assert be.plans[0].saved_bytes == be.plans[0].min_bytes
