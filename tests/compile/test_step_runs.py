"""budget.compile.step_runs: a step peak budget checked as training's graphs run, where a
graph runs more often in a step than training planned it for."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import budget
from budget.runtime.measure import measure_peak, saved_bytes


class _Block(nn.Module):
    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.tanh(self.up(x)))


def _blocks(be, n: int = 3, in_place: bool = False):
    """A model compiled block by block (as torchtitan compiles it; ``in_place``: with
    ``block.compile()``): one graph per block, dynamo's, which the blocks after the second
    run again."""
    torch.manual_seed(0)
    model = nn.Sequential(*(_Block() for _ in range(n)))
    for i, block in enumerate(model):
        if in_place:
            block.compile(backend=be)
        else:
            model[i] = torch.compile(block, backend=be)
    return model, torch.randn(4, 16, 32)


def test_a_block_compiled_on_its_own_keeps_its_input_an_activation():
    """The second block's input is the first block's output: its backward keeps it, and
    the plan says so. Measured, the step saves what each run of the plans saves and keeps."""
    be = budget.backend(0.5, compiler="eager")
    model, x = _blocks(be)
    measured = saved_bytes(lambda x: model(x).sum(), x, exclude=list(model.parameters()))
    assert len(be.plans) == 2  # the first block's graph, and the one the others run
    first, again = be.plans
    assert first.kept_input_bytes == 0  # the user's input
    assert again.kept_input_bytes == x.numel() * 4  # the block before's output
    runs = first.saved_bytes + 2 * (again.saved_bytes + again.kept_input_bytes)
    assert measured.saved_bytes == runs


@pytest.mark.parametrize("kind", ["peak", "size"])
def test_a_graph_run_again_past_the_step_budget_is_refused_by_name(kind):
    """Planned when it compiled, the second graph held the first block's saves; the third
    block runs it again while two blocks' saves are held. Over the step's peak budget, or
    over a size memory budget (the step's too), the run is refused before it allocates
    anything, and the error says why."""
    be = budget.backend(0.5, compiler="eager")
    model, x = _blocks(be, n=2)
    model(x).sum().backward()
    first, again = be.plans
    if kind == "peak":
        planned = budget.step_peak(be.plans)
        assert planned is not None
        options = dict(memory_budget=0.5, peak_memory_budget=f"{planned[0]}B")
        over = "graph 2 runs while 2 earlier.*over the peak_memory_budget.*block by"
    else:
        keeps = first.saved_bytes + again.saved_bytes + again.kept_input_bytes
        options, over = dict(memory_budget=f"{keeps}B"), "over the memory_budget.*block by"
    torch._dynamo.reset()
    be = budget.backend(compiler="eager", **options)
    model, x = _blocks(be, n=2)
    model(x).sum().backward()  # two blocks: as planned
    model, x = _blocks(be, n=3)
    with pytest.raises(budget.StepBudgetError, match=over):
        model(x).sum().backward()


def test_runs_dropped_without_a_backward_hold_nothing():
    """A forward whose outputs are dropped unused frees its saves: the next step is planned
    as it was; two forwards before one backward hold twice, over the budget."""
    torch.manual_seed(0)
    model, x = nn.Sequential(_Block(), _Block()), torch.randn(4, 16, 32)
    be = budget.backend(0.5, compiler="eager")
    torch.compile(model, backend=be)(x).sum().backward()
    (plan,) = be.plans
    torch._dynamo.reset()
    budget_bytes = plan.peak_bytes + plan.saved_bytes // 2
    be = budget.backend(compiler="eager", peak_memory_budget=f"{budget_bytes}B")
    step = torch.compile(lambda x: model(x).sum(), backend=be)
    step(x)  # dropped: no backward
    step(x).backward()
    first = step(x)
    with pytest.raises(budget.StepBudgetError, match="1 earlier graph runs"):
        step(x)  # a second forward before the first's backward
    first.backward()
    step(x).backward()  # the step as planned again


@pytest.mark.parametrize("in_place", [False, True])
def test_a_preview_plans_a_model_compiled_block_by_block_as_training_runs_it(in_place):
    """Previewed, a model compiled block by block gets training's graphs (the first
    block's, and the one the other blocks run), each run's saves held: the step's
    predicted peak covers the measured one. A peak budget that training, planning each
    graph as it compiles, refuses on a later block's run is divided over the runs by the
    preview, and training with its plans meets it, with the unplanned step's gradients."""
    torch.manual_seed(0)
    reference = nn.Sequential(*(_Block() for _ in range(4)))
    x = torch.randn(4, 16, 32)
    reference(x).sum().backward()
    model, x = _blocks(budget.backend(compiler="eager"), n=4, in_place=in_place)
    compiled = [b.__dict__.get("forward", b.__dict__.get("_compiled_call_impl")) for b in model]

    def step(x):
        return model(x).sum()

    plans = budget.plans(step, x, memory_budget=1.0, compiler="eager")
    assert len(plans) == 2  # the blocks put back as they were:
    assert [b.__dict__.get("forward", b.__dict__.get("_compiled_call_impl")) for b in model] == (
        compiled
    )
    torch._dynamo.reset()
    be = budget.backend(compiler="eager", plan=plans)
    model, x = _blocks(be, n=4, in_place=in_place)
    measured = measure_peak(step, x)
    assert [p.graph_hash for p in be.plans] == [p.graph_hash for p in plans]
    peak = budget.step_peak(plans)
    assert peak is not None and measured <= peak[0] <= measured + x.numel() * 4

    target = 200_000  # under the b=1 step's measured peak
    assert target < measured
    torch._dynamo.reset()
    be = budget.backend(compiler="eager", peak_memory_budget=f"{target}B")
    model, x = _blocks(be, n=4, in_place=in_place)
    with pytest.raises(budget.StepBudgetError, match="preview the step.*plan="):
        step(x).backward()
    plans = budget.plans(step, x, peak_memory_budget=f"{target}B", compiler="eager")
    torch._dynamo.reset()
    model, x = _blocks(budget.backend(compiler="eager", plan=plans), n=4, in_place=in_place)
    assert measure_peak(step, x) <= target
    model.zero_grad()
    step(x).backward()
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad)


def test_a_run_at_larger_dynamic_sizes_than_planned_past_a_size_is_refused():
    """Compiled with dynamic shapes, a graph is planned at its first sizes; run at larger
    ones it saves more than its plan (what it saves is read from its run): past the size
    memory budget the run is refused by name, and within it (smaller sizes) it runs."""
    torch.manual_seed(0)
    model = _Block()
    be = budget.backend(compiler="eager", memory_budget="40KB")
    step = torch.compile(lambda x: model(x).sum(), backend=be, dynamic=True)
    step(torch.randn(4, 16, 32)).backward()
    (plan,) = be.plans
    assert 0 < plan.saved_bytes <= 40_000
    smaller = torch.randn(4, 8, 32)
    assert saved_bytes(step, smaller, exclude=list(model.parameters())).saved_bytes < 40_000
    with pytest.raises(budget.StepBudgetError, match="larger sizes than it was planned.*static"):
        step(torch.randn(4, 64, 32))
