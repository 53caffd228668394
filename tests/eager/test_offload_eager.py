"""Offload on the eager path (budget.apply), on a CPU: plans made for an H100
(``estimator='flops:h100'``) run here with the host CPU standing in for both memories, so
the host copies are CPU allocations too. What is checked is what does not depend on the
device: the offloaded values' device storages are let go (the bytes the forward leaves
allocated are the plan's device bytes plus its host bytes, exactly), each planned value
is copied once, the gradients equal the unmodified model's, and a forward that is not
the planned one is refused."""

from __future__ import annotations

import dataclasses
import weakref

import pytest
import torch
from helpers.small import small_gpt, small_mlp
from helpers.steps import grads_of

import budget
from budget.eager import EagerPlan, applied_plan
from budget.eager.measure import measure_eager

H100 = {"estimator": "flops:h100", "offload": True}
MODELS = {"gpt": small_gpt, "gpt-dropout": lambda: small_gpt(0.1), "mlp": small_mlp}


def _hooks(model):
    return model.__dict__["_budget_eager_offload"].policy


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("b", [0.5, 0.0])
def test_offloaded_values_leave_the_device_and_gradients_are_unchanged(name, b):
    ex, ref = MODELS[name](), MODELS[name]()
    ref.model.load_state_dict(ex.model.state_dict())
    want_out, want = grads_of(ref.step, list(ref.model.parameters()), *ref.args, seed=3)
    plan = budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=b, **H100)
    if b == 0.0:
        assert plan.offloaded, "the least device memory offloads what it can"
    assert plan.saved_bytes <= plan.target_bytes
    assert plan.offloaded_bytes == sum(d.bytes for d in plan.decisions if d.decision == "offload")
    torch.manual_seed(3)
    m = measure_eager(ex.step, *ex.args)
    assert m.retained_bytes == plan.saved_bytes + plan.offloaded_bytes
    got_out, got = grads_of(ex.step, list(ex.model.parameters()), *ex.args, seed=3)
    torch.testing.assert_close(got_out, want_out, rtol=0, atol=0)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-7)
    if plan.offloaded:
        # two forwards ran (measured, then for the gradients): each copies every value once
        assert _hooks(ex.model).offloads == 2 * len(plan.offloaded)
        assert {s.value for s in plan.saves if s.offload} == set(plan.offloaded)


def test_offload_lowers_the_least_device_memory():
    ex = small_gpt()
    plain = budget.eager.plan(ex.model, *ex.args, step=ex.step, memory_budget=0.0)
    moved = budget.eager.plan(ex.model, *ex.args, step=ex.step, memory_budget=0.0, **H100)
    assert moved.min_bytes < plain.min_bytes and moved.max_bytes == plain.max_bytes
    assert plain.saves == [] and moved.saves


def test_a_plan_with_offload_round_trips_and_applies_as_made():
    ex = small_gpt()
    plan = budget.eager.plan(ex.model, *ex.args, step=ex.step, memory_budget=0.0, **H100)
    again = EagerPlan.from_json(plan.to_json())
    assert again == plan and again.saves == plan.saves
    other = small_gpt()
    budget.apply(other.model, plan=again)
    torch.manual_seed(0)
    assert (
        measure_eager(other.step, *other.args).retained_bytes
        == plan.saved_bytes + plan.offloaded_bytes
    )
    assert budget.unapply(other.model)
    assert "forward" not in other.model.__dict__
    assert "_budget_eager_offload" not in other.model.__dict__


def test_a_forward_that_saves_other_tensors_is_refused():
    ex = small_gpt()
    budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=0.0, **H100)
    idx, targets = ex.args
    with pytest.raises(
        budget.PlanMismatchError, match=r"saved a torch.int64\[1, 32\] tensor as save 0"
    ):
        ex.step(idx[:1], targets[:1])  # another batch size: other shapes


class _Twice(torch.nn.Module):
    """Saves ``h`` three times: relu keeps its output, each product keeps it for its
    weight's gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.w1 = torch.nn.Parameter(torch.randn(8))
        self.w2 = torch.nn.Parameter(torch.randn(8))

    def forward(self, x):
        h = self.a(x).relu()
        return (h * self.w1 + h * self.w2).sum()


def test_a_value_offloaded_at_one_save_only_is_refused():
    model, x = _Twice(), torch.randn(4, 8)
    plan = budget.eager.plan(model, x, memory_budget=1.0, modules=["a"], **H100)
    names = [s.value for s in plan.saves]
    twice = next(v for v in names if names.count(v) > 1)
    first = names.index(twice)
    saves = [
        dataclasses.replace(s, offload=(i == first)) if s.value == twice else s
        for i, s in enumerate(plan.saves)
    ]
    with pytest.raises(ValueError, match="offloaded at all its saves or at none"):
        budget.apply(model, plan=dataclasses.replace(plan, saves=saves))
    assert "forward" not in model.__dict__  # nothing left half-applied
    # offloaded at every save: copied once, read back by all three
    every = [dataclasses.replace(s, offload=s.value == twice) for s in plan.saves]
    want = torch.autograd.grad(model(x), list(model.parameters()))
    budget.apply(model, plan=dataclasses.replace(plan, saves=every))
    got = torch.autograd.grad(model(x), list(model.parameters()))
    assert _hooks(model).offloads == 1
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_offload_on_the_host_cpu_is_refused():
    ex = small_mlp()
    with pytest.raises(budget.OffloadError, match="host CPU.*estimator='flops:h100'"):
        budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=0.5, offload=True)


def test_an_offloading_plan_under_torch_compile_is_refused():
    ex = small_mlp()
    budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=0.0, **H100)
    assert applied_plan(ex.model).offloaded
    step = torch.compile(ex.step, backend="eager")
    with pytest.raises(budget.OffloadError, match=r"budget.backend\(offload=True\)"):
        step(*ex.args)


def test_a_model_without_blocks_is_planned_by_offload_alone():
    model, x = _Twice(), torch.randn(64, 8)
    with pytest.raises(ValueError, match="no blocks to checkpoint"):
        budget.eager.plan(model, x, memory_budget=0.0)
    want = torch.autograd.grad(model(x), list(model.parameters()))
    plan = budget.apply(model, x, memory_budget=0.0, **H100)
    assert plan.regions == [] and plan.offloaded
    assert measure_eager(model, x).retained_bytes == plan.saved_bytes + plan.offloaded_bytes
    got = torch.autograd.grad(model(x), list(model.parameters()))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_an_offloaded_value_is_held_until_the_next_offloaded_save_or_the_forwards_end():
    """The hooks let an offloaded value's device tensor go at the next offloaded value's
    save (the forward's end for the last one), where the compute stream has waited for its
    copy: never through record_stream, whose release depends on the host's timing. The
    fake run that predicts the peak goes through the same code."""
    from budget.eager.hooks import OffloadHooks
    from budget.eager.plan import SaveChoice

    seen = {}

    def forward(w):
        a = w.exp()  # saves a (exp keeps its output): offloaded
        ra = weakref.ref(a)
        x = a + 1  # add saves nothing
        del a
        seen["a held after its save"] = ra() is not None
        b = x.exp()  # saves b: offloaded, so a is let go
        seen["a let go at the next offloaded save"] = ra() is None
        seen["b"] = weakref.ref(b)
        y = b.sum()
        del b
        return y

    w = torch.randn(4, 4, requires_grad=True)
    hooks = OffloadHooks([SaveChoice(v, [4, 4], "torch.float32", True) for v in ("a", "b")])
    loss = hooks.run(forward, w)
    assert seen.pop("b")() is None, "the last offloaded value is let go at the forward's end"
    assert all(seen.values()), seen
    (got,) = torch.autograd.grad(loss, [w])
    torch.testing.assert_close(got, (w.exp() + 1).exp() * w.exp())
    assert hooks.offloads == 2


# 1.3: a budget both reach with room (-m full); 1.05 is the tighter, each a search of its own
@pytest.mark.parametrize("k", [1.05, pytest.param(1.3, marks=pytest.mark.full)])
def test_under_a_peak_budget_offload_never_costs_more_than_recomputing_alone(k):
    ex = small_gpt()
    kw = {"step": ex.step, "estimator": "flops:h100"}
    lowest = {}
    for offload in (False, True):
        with pytest.raises(budget.BudgetTooSmallError) as low:
            budget.eager.plan(ex.model, *ex.args, peak_memory_budget="1KiB", offload=offload, **kw)
        lowest[offload] = low.value.lowest_peak_bytes
    assert lowest[True] < lowest[False]  # moving values to the host reaches lower
    # under the lowest peak the recompute-only search reaches (it refused 1 KiB naming it)
    between = f"{(lowest[True] + lowest[False]) // 2}B"
    moved = budget.eager.plan(ex.model, *ex.args, peak_memory_budget=between, offload=True, **kw)
    assert moved.offloaded and moved.peak_bytes <= moved.peak_target_bytes
    peak = f"{int(lowest[False] * k)}B"  # where both fit, offload costs no more
    plain = budget.eager.plan(ex.model, *ex.args, peak_memory_budget=peak, **kw)
    moved = budget.eager.plan(ex.model, *ex.args, peak_memory_budget=peak, offload=True, **kw)
    assert moved.peak_bytes <= plain.peak_target_bytes
    assert moved.total_recompute_cost <= plain.total_recompute_cost + 1e-12
