"""budget.apply on modules whose forward a step runs several times: a layer shared across
depth (ALBERT, looped transformers) and an encoder run on two inputs (Siamese training).

Each call is a region of its own. Every figure is checked against the eager step on real
tensors: the bytes its forward leaves allocated, its measured peak, and gradients equal to
the unplanned model's, over consecutive steps (the calls are counted per step).
"""

from __future__ import annotations

import copy

import pytest
import torch
from helpers.small import looped as _looped
from helpers.steps import assert_same_grads
from torch import nn

import budget
from budget.eager.measure import retained_bytes
from budget.runtime.measure import measure_peak


def _step(model: nn.Module, *args: torch.Tensor) -> None:
    model.zero_grad()
    model(*args).backward()


@pytest.mark.parametrize("pool", [False, True], ids=["looped", "pyramid"])
@pytest.mark.parametrize("b", [1.0, 0.5, 0.2, 0.0])
def test_a_layer_shared_across_depth_is_planned_call_by_call(b, pool):
    """Each of the four runs of the shared layer is a region: the plan keeps the bytes it
    says and peaks where it predicts, step after step, with the unplanned gradients."""
    ref, x = _looped(pool)
    model = copy.deepcopy(ref)
    plan = budget.apply(model, x, memory_budget=b)
    assert [(r.module, r.call) for r in plan.regions] == [("layers.0", k) for k in range(4)]
    assert plan.counted_from_model
    if b == 0.0:
        assert all(r.checkpoint for r in plan.regions)
        assert plan.saved_bytes < budget.apply(copy.deepcopy(ref), x, memory_budget=1.0).saved_bytes
    _step(ref, x)
    for _ in range(2):  # the calls are counted afresh each step
        assert retained_bytes(model, x).retained_bytes == plan.saved_bytes
        assert measure_peak(model, x) == plan.peak_bytes
        _step(model, x)
        assert_same_grads(model, ref)


def test_a_step_that_failed_half_way_leaves_no_count_behind():
    """A step that raised after two of the pyramid's four runs of its layer: the next
    step's runs get their own choices (the model's forward starts each step's count), not
    those of the runs after the failure, which keep other bytes."""
    ref, x = _looped(pool=True)
    model = copy.deepcopy(ref)
    plan = budget.apply(model, x, memory_budget=0.5)
    assert len({r.saved_bytes for r in plan.regions}) > 1
    model.fail_at = 2
    with pytest.raises(RuntimeError, match="failed half-way"):
        model(x)
    model.fail_at = None
    assert retained_bytes(model, x).retained_bytes == plan.saved_bytes
    _step(ref, x)
    _step(model, x)
    assert_same_grads(model, ref)


class Siamese(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x).mean(dim=1)


def test_an_encoder_run_on_two_inputs_of_two_sizes_gets_a_choice_per_input():
    """The step runs the model twice (two views of unequal length), so its calls are
    counted around the plan's two; each keeps and peaks as planned, with the unplanned
    gradients."""
    torch.manual_seed(0)
    ref = Siamese()
    a, b = torch.randn(4, 64, 32), torch.randn(4, 16, 32)

    def step(model: nn.Module, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (model(a) - model(b)).square().sum()

    model = copy.deepcopy(ref)
    plan = budget.apply(model, a, b, step=lambda a, b: step(model, a, b), memory_budget=0.3)
    assert not plan.counted_from_model
    assert [(r.module, r.call) for r in plan.regions] == [("encoder", 0), ("encoder", 1)]
    assert plan.checkpointed == ["encoder"]
    for _ in range(2):
        assert retained_bytes(step, model, a, b).retained_bytes == plan.saved_bytes
        assert measure_peak(step, model, a, b) == plan.peak_bytes
    for m in (ref, model):
        m.zero_grad()
        step(m, a, b).backward()
    assert_same_grads(model, ref)


def test_a_layer_also_run_before_the_model_in_the_step_is_counted_round_the_plan():
    """The step runs the shared layer on its own before the model runs it four times:
    the model's forward cannot start the count, which goes round the plan's five calls."""
    ref, x = _looped(pool=True)
    model = copy.deepcopy(ref)

    def step(x: torch.Tensor) -> torch.Tensor:
        return model(x) + model.layers[0](x).square().mean()

    plan = budget.apply(model, x, step=step, memory_budget=0.3)
    assert not plan.counted_from_model and len(plan.regions) == 5
    for _ in range(2):
        assert retained_bytes(step, x).retained_bytes == plan.saved_bytes
    model.zero_grad()
    step(x).backward()
    ref.zero_grad()
    (ref(x) + ref.layers[0](x).square().mean()).backward()
    assert_same_grads(model, ref)


def test_a_shared_module_can_be_named_and_one_also_run_inside_another_cannot():
    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(16)  # run by the blocks, and after them
            self.blocks = nn.ModuleList([nn.Linear(16, 16), nn.Linear(16, 16)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for block in self.blocks:
                x = self.norm(block(x)) if block is self.blocks[0] else block(x)
            return self.norm(x).sum()

    model, x = Shared(), torch.randn(4, 16)
    plan = budget.eager.plan(model, x, modules=["blocks.0", "norm"], memory_budget=0.0)
    assert [r.key for r in plan.regions] == [("blocks.0", 0), ("norm", 0), ("norm", 1)]
    text = str(plan)
    assert "norm call 1" in text and "candidate module calls" in text

    class Normed(nn.Linear):  # runs the model's norm inside its own forward
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.shared_norm(super().forward(x))

    inside = Shared()
    inside.blocks[0] = Normed(16, 16)
    object.__setattr__(inside.blocks[0], "shared_norm", inside.norm)  # not a child
    with pytest.raises(ValueError, match=r"'norm' cannot be checkpointed: it also runs inside"):
        budget.eager.plan(inside, x, modules=["blocks.0", "norm"], memory_budget=0.0)
    plan = budget.eager.plan(inside, x, memory_budget=0.0)  # by default: left out, said why
    assert all(
        "also runs inside 'blocks.0'" in r.reason for r in plan.regions if r.module == "norm"
    )


def test_a_plan_for_a_shared_layer_round_trips_and_applies_from_its_json():
    ref, x = _looped()
    made = budget.eager.plan(copy.deepcopy(ref), x, memory_budget=0.2)
    again = budget.eager.EagerPlan.from_json(made.to_json())
    assert again.regions == made.regions and again.counted_from_model
    model = copy.deepcopy(ref)
    budget.apply(model, plan=again)
    assert retained_bytes(model, x).retained_bytes == made.saved_bytes
    broken = budget.eager.EagerPlan.from_json(made.to_json().replace('"call": 3', '"call": 7'))
    with pytest.raises(ValueError, match=r"regions of 'layers.0' are calls \[0, 1, 2, 7\]"):
        budget.apply(copy.deepcopy(ref), plan=broken)
