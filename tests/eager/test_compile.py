"""A model with a plan applied still compiles, and its selective tags reach the partitioner."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers.small import looped
from helpers.steps import grads_of

import budget
from budget.models import gpt


def _gpt(dropout: float = 0.0):
    return gpt(layers=2, d=64, heads=4, seq=32, batch=2, vocab=128, dropout=dropout)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_compiles_with_equal_gradients():
    ref = _gpt()
    want_out, want = grads_of(ref.step, list(ref.model.parameters()), *ref.args)
    ex = _gpt()
    plan = budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=0.5)
    assert plan.checkpointed
    compiled = torch.compile(ex.step, backend="aot_eager")
    got_out, got = grads_of(compiled, list(ex.model.parameters()), *ex.args)
    torch.testing.assert_close(got_out, want_out)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_the_plans_saves_reach_the_compiled_partitioner():
    ex = _gpt()
    plan = budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=0.5)
    saved_ops = [
        op
        for r in plan.regions
        if r.checkpoint
        for op, p in zip(r.ops, r.policy, strict=True)
        if p == "save" and "addmm" in op
    ]
    assert saved_ops  # the plan caches some matmuls
    be = budget.backend(1.0, compiler="eager")
    torch.compile(ex.step, backend=be)(*ex.args).backward()
    problem = be.log.problems[0]
    tagged = [
        op for op, why in zip(problem.ops, problem.reason, strict=True) if why == "tagged MUST_SAVE"
    ]
    assert sorted(tagged).count("aten.addmm.default") == len(saved_ops)
    budget.unapply(ex.model)
    torch._dynamo.reset()
    be = budget.backend(1.0, compiler="eager")
    torch.compile(ex.step, backend=be)(*ex.args).backward()
    assert "tagged MUST_SAVE" not in be.log.problems[0].reason


def test_checkpointed_batchnorm_compiles_and_updates_its_statistics_once():
    """A ResNet-style block (BatchNorm, then an in-place ReLU) checkpointed by the plan:
    dynamo runs the region on fake tensors, asking the policy about ops that take no
    tensor (``empty``), which are tracing's all the same; compiled, the step's gradients
    and running statistics are the unplanned model's."""
    torch.manual_seed(0)
    block = [
        torch.nn.Sequential(
            torch.nn.Conv2d(8, 8, 3, padding=1, bias=False),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(inplace=True),
            torch.nn.Conv2d(8, 8, 3, padding=1),
        )
        for _ in range(2)
    ]
    model = torch.nn.Sequential(*block).train()
    ref = copy.deepcopy(model)
    x = torch.randn(2, 8, 8, 8)
    plan = budget.apply(model, x, memory_budget=0.0, loss_fn=lambda out: out.square().mean())
    assert plan.checkpointed == ["0", "1"]
    compiled = torch.compile(lambda x: model(x).square().mean(), backend="aot_eager")
    compiled(x).backward()
    ref(x).square().mean().backward()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
    for b, c in zip(model.buffers(), ref.buffers(), strict=True):
        torch.testing.assert_close(b, c, rtol=1e-6, atol=1e-7)


def test_a_layer_run_several_times_a_step_compiles_with_each_calls_choice():
    """A plan that checkpoints the runs of a shared layer each its own way still compiles
    (dynamo follows the count of the layer's calls), with equal gradients step after step."""
    ref, x = looped(pool=True)
    want_out, want = grads_of(ref, list(ref.parameters()), x)
    model = copy.deepcopy(ref)
    plan = budget.apply(model, x, memory_budget=0.5)
    assert len({tuple(r.policy) for r in plan.regions}) > 1
    compiled = torch.compile(model, backend="aot_eager")
    for _ in range(2):
        got_out, got = grads_of(compiled, list(model.parameters()), x)
        torch.testing.assert_close(got_out, want_out)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
