"""What budget.apply refuses, and how it says so; which modules it considers."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers.steps import assert_same_grads
from torch import nn

import budget
import budget.eager
from budget.eager.regions import default_candidates, select_candidates
from budget.models import Block, gpt, mlp, resnet
from budget.runtime.measure import measure_peak


def _gpt():
    return gpt(layers=2, d=64, heads=4, seq=32, batch=2, vocab=128)


def test_default_candidates_are_the_blocks_of_containers():
    assert list(default_candidates(_gpt().model)) == ["blocks.0", "blocks.1"]
    assert list(default_candidates(mlp(layers=3).model)) == ["body"]
    assert list(default_candidates(resnet(blocks=1).model)) == [
        "stem",
        "layers.0",
        "layers.1",
        "layers.2",
    ]


def test_a_module_list_of_leaf_modules_offers_each_entry():
    """A ModuleList has no forward of its own: its entries are the candidates, leaves or not
    (a list of LSTM layers), beside the blocks found otherwise (a Sequential of leaves,
    run whole; blocks set as attributes); none inside another."""

    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnns = nn.ModuleList(nn.LSTM(8, 8) for _ in range(2))
            self.mlp = nn.Sequential(nn.Linear(8, 8), nn.GELU())

    assert list(default_candidates(Stack())) == ["rnns.0", "rnns.1", "mlp"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 3)

    class Stages(nn.Module):  # blocks as attributes (timm's RegNet), beside a list of norms
        def __init__(self):
            super().__init__()
            self.b1, self.b2 = Block(), Block()
            self.norms = nn.ModuleList(nn.LayerNorm(4) for _ in range(2))

    assert list(default_candidates(Stages())) == ["b1", "b2", "norms.0", "norms.1"]


def test_without_containers_repeated_blocks_are_the_candidates():
    """Blocks set as attributes (timm's RegNet stages: ``b1``, ``b2``...): the children of
    one parent sharing a class, each with children of its own, outermost first; a lone
    block of a class, or leaves, are not. budget.apply then plans them (b=0 checkpoints)."""

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.act, self.fc2 = nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8)

        def forward(self, x):
            return x + self.fc2(self.act(self.fc1(x)))

    class Stage(nn.Module):
        def __init__(self):
            super().__init__()
            self.b1, self.b2, self.b3 = Block(), Block(), Block()
            self.norm = nn.LayerNorm(8)

        def forward(self, x):
            return self.norm(self.b3(self.b2(self.b1(x))))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem, self.s1, self.head = nn.Linear(4, 8), Stage(), nn.Linear(8, 2)

        def forward(self, x):
            return self.head(self.s1(self.stem(x))).sum()

    model = Net()
    assert list(default_candidates(model)) == ["s1.b1", "s1.b2", "s1.b3"]
    plan = budget.apply(model, torch.randn(64, 4), memory_budget=0.0)
    assert plan.checkpointed


def test_modules_by_name_and_by_class():
    model = _gpt().model
    assert list(select_candidates(model, ["blocks.1.mlp", "blocks.0"])) == [
        "blocks.0",
        "blocks.1.mlp",
    ]
    assert list(select_candidates(model, Block)) == ["blocks.0", "blocks.1"]
    assert list(select_candidates(model, nn.Linear))[:2] == [
        "blocks.0.attn.qkv",
        "blocks.0.attn.proj",
    ]


@pytest.mark.parametrize(
    ("modules", "message"),
    [
        (["blocks.7"], r"no module 'blocks\.7'; default candidates: 'blocks\.0', 'blocks\.1'"),
        ([nn.Conv2d], r"no module of GPT is a Conv2d; default candidates: 'blocks\.0'"),
        (["blocks.0", "blocks.0.attn"], r"'blocks\.0\.attn' is inside 'blocks\.0'"),
        ([3], r"qualified module names \(str\) or nn\.Module classes; got 3"),
        ([], "names no module"),
    ],
)
def test_bad_modules_say_what_there_is(modules, message):
    ex = _gpt()
    with pytest.raises(ValueError, match=message):
        budget.apply(ex.model, *ex.args, step=ex.step, modules=modules)
    assert "_budget_eager_plan" not in ex.model.__dict__


def test_a_model_without_blocks_needs_modules():
    model = nn.Linear(4, 4)
    with pytest.raises(ValueError, match="no blocks to checkpoint.*modules="):
        budget.apply(model, torch.randn(2, 4), loss_fn=lambda y: y.sum())


def test_a_module_never_called_cannot_be_a_region_and_one_called_twice_is_two():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Sequential(nn.Linear(8, 8), nn.GELU())])
            self.unused = nn.Sequential(nn.Linear(8, 8), nn.GELU())

        def forward(self, x):
            return self.layers[0](self.layers[0](x)).sum()

    model = Twice()
    x = torch.randn(1024, 8)  # values larger than the RNG state a checkpoint keeps
    with pytest.raises(
        ValueError, match=r"'unused' cannot be checkpointed: its forward did not run"
    ):
        budget.apply(model, x, modules=["unused"])
    plan = budget.apply(model, x, memory_budget=0.0)
    assert [r.key for r in plan.regions] == [("layers.0", 0), ("layers.0", 1), ("unused", 0)]
    assert plan.checkpointed == ["layers.0"]  # both calls; the other left out, saying why
    assert "did not run" in plan.region("unused").reason


def test_blocks_the_model_checkpoints_itself_are_said_to_free_nothing():
    """A model whose blocks call torch.utils.checkpoint in their forward (as transformers'
    and timm's checkpointing switches make them): budget.apply sees each save nothing but
    its input, leaves it alone at any budget and says why, naming the switches, and counts
    the generator states those checkpoints keep in the bytes the step keeps; the same
    blocks unwrapped are checkpointed, and a block left alone at b=1 gets no such note."""
    from torch.utils.checkpoint import checkpoint

    from budget.eager.measure import measure_eager

    def model_and_args(self_checkpointed: bool):
        ex = gpt(layers=2, d=32, heads=2, seq=16, batch=2, vocab=64)
        if self_checkpointed:
            for block in ex.model.blocks:
                inner = block.forward
                block.forward = lambda *a, f=inner: checkpoint(f, *a, use_reentrant=False)
        return ex

    ex = model_and_args(True)
    plan = budget.eager.plan(ex.model, *ex.args, step=ex.step, memory_budget=0.0)
    assert plan.checkpointed == [] and plan.min_bytes == plan.max_bytes
    for r in plan.regions:
        assert "frees nothing" in r.reason and "gradient_checkpointing_disable" in r.reason
    # the generator state each of its checkpoints keeps is counted in what the step keeps
    torch.manual_seed(0)
    assert measure_eager(lambda: ex.step(*ex.args)).retained_bytes == plan.saved_bytes
    ex = model_and_args(False)
    assert budget.eager.plan(ex.model, *ex.args, step=ex.step, memory_budget=0.0).checkpointed
    plan = budget.eager.plan(ex.model, *ex.args, step=ex.step, memory_budget=1.0)
    assert plan.checkpointed == [] and all(r.reason == "" for r in plan.regions)


@pytest.mark.parametrize("saves", ["mm", "nothing"])
def test_what_the_models_own_selective_checkpointing_caches_is_counted(saves):
    """Blocks the model checkpoints itself with a selective policy (torch's
    create_selective_checkpoint_contexts): the values the policy saves are kept by torch's
    caching mode, not autograd's saved tensors, until the recomputation; the bytes the step
    keeps count them."""
    from torch.utils.checkpoint import (
        CheckpointPolicy,
        checkpoint,
        create_selective_checkpoint_contexts,
    )

    from budget.eager.measure import measure_eager

    matmuls = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default}

    def policy(ctx, op, *args, **kwargs):
        cached = saves == "mm" and op in matmuls
        return CheckpointPolicy.MUST_SAVE if cached else CheckpointPolicy.PREFER_RECOMPUTE

    def selective():
        return create_selective_checkpoint_contexts(policy)

    ex = gpt(layers=2, d=32, heads=2, seq=16, batch=2, vocab=64)
    for block in ex.model.blocks:
        inner = block.forward
        block.forward = lambda *a, f=inner: checkpoint(
            f, *a, use_reentrant=False, context_fn=selective
        )
    plan = budget.eager.plan(ex.model, *ex.args, step=ex.step, memory_budget=0.0)
    assert plan.checkpointed == []
    torch.manual_seed(0)
    assert measure_eager(lambda: ex.step(*ex.args)).retained_bytes == plan.saved_bytes


def test_a_second_backward_through_cached_values_is_refused_by_name():
    """A plan that caches values hands each out once (torch's selective checkpointing): a
    second backward through the region (retain_graph=True) is refused, naming the module
    and what to do, where it failed with an AttributeError from a used-up context."""
    ex = _gpt()
    plan = budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=0.0)
    assert plan.checkpointed and any("save" in r.policy for r in plan.regions if r.checkpoint)
    loss = ex.step(*ex.args)
    loss.backward(retain_graph=True)
    with pytest.raises(budget.PlanMismatchError, match="a second time .*retain_graph"):
        loss.backward()


def test_a_step_with_a_backward_of_its_own_says_why_nothing_is_checkpointed():
    """A gradient penalty (torch.autograd.grad with create_graph=True inside the step):
    the graph of its backward holds the forward's values, so no plan frees anything; the
    regions say so, and the step trains as without a plan."""
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(3)))
    ref = copy.deepcopy(model)
    x = torch.randn(8, 16, requires_grad=True)

    def penalised(m):
        out = m(x).square().mean()
        (g,) = torch.autograd.grad(out, x, create_graph=True)
        return out + (g.norm() - 1).square()

    plan = budget.apply(model, x, step=lambda _: penalised(model), memory_budget=0.0)
    assert plan.checkpointed == [] and plan.min_bytes == plan.max_bytes
    assert all("backward of its own" in r.reason for r in plan.regions)
    for m in (model, ref):
        penalised(m).backward()
    assert_same_grads(model, ref)


@pytest.mark.parametrize("bad", [1.5, -0.1, float("nan"), "lots"])
def test_budgets_out_of_range_are_refused(bad):
    ex = _gpt()
    with pytest.raises(ValueError, match="budget"):
        budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=bad)


def test_a_size_below_the_least_memory_names_it():
    ex = _gpt()
    low = budget.eager.plan(ex.model, *ex.args, step=ex.step, memory_budget=0.0)
    with pytest.raises(budget.BudgetTooSmallError, match=f"{low.min_bytes} bytes") as info:
        budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=f"{low.min_bytes - 1}B")
    assert info.value.min_bytes == low.min_bytes
    exact = budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=f"{low.min_bytes}B")
    assert exact.saved_bytes == low.min_bytes


def test_nothing_requiring_grad_is_refused():
    ex = _gpt()
    for p in ex.model.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match="nothing in the step requires grad"):
        budget.apply(ex.model, *ex.args, step=ex.step)


def test_loss_fn_and_step_together_are_refused():
    ex = _gpt()
    with pytest.raises(ValueError, match="loss_fn= or step="):
        budget.apply(ex.model, *ex.args, step=ex.step, loss_fn=lambda o: o.sum())


class _Block(torch.nn.Module):
    def __init__(self, read: bool = False) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(64, 64)
        self.read = read

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x).sin()
        if self.read and y.sum() > -1e9:  # a value read inside a checkpointed module
            y = y * 2
        return y.cos()


class _Net(torch.nn.Module):
    def __init__(self, read: bool = False, sparse: bool = False, rand: bool = False) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(32, 64, sparse=sparse)
        self.blocks = torch.nn.ModuleList([_Block(read), _Block()])
        self.rand = rand

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        if self.rand:
            x = torch.nn.functional.dropout(x, 0.1, training=True)
            if torch.rand(()) < 0.5:  # a branch on a random draw
                x = x * 3
        for b in self.blocks:
            x = b(x)
        return x.sum()


def test_sparse_gradients_are_planned_and_trained():
    torch.manual_seed(0)
    model, ids = _Net(sparse=True), torch.randint(32, (32, 16))
    ref = copy.deepcopy(model)
    plan = budget.apply(model, ids, memory_budget=0.0)
    assert plan.checkpointed and plan.peak_bytes is not None
    for m in (model, ref):
        torch.manual_seed(1)
        m(ids).backward()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad.to_dense(), q.grad.to_dense())


def test_a_read_inside_a_checkpointed_module_is_answered_again_when_it_is_recomputed():
    """The recomputation reads the value again: the fake run of the planned step gives it
    the trace's, so the peak is predicted (the one measured) and a peak budget is met."""
    torch.manual_seed(0)
    model, ids = _Net(read=True), torch.randint(32, (32, 16))
    plan = budget.apply(model, ids, memory_budget=0.0)
    assert "blocks.0" in plan.checkpointed and plan.peak_bytes is not None
    assert measure_peak(lambda: model(ids)) == plan.peak_bytes
    budget.unapply(model)
    capped = budget.apply(model, ids, memory_budget=1.0, peak_memory_budget=f"{plan.peak_bytes}B")
    assert capped.peak_bytes is not None and capped.peak_bytes <= plan.peak_bytes
    model.zero_grad(set_to_none=True)
    assert measure_peak(lambda: model(ids)) == capped.peak_bytes


def test_a_read_of_a_random_value_is_refused_not_guessed():
    """Run again from the step's first RNG state, the draw would differ from the real
    step's (dropout drew before it): the trace cannot know the branch and says so."""
    torch.manual_seed(0)
    model, ids = _Net(rand=True), torch.randint(32, (32, 16))
    with pytest.raises(budget.PreviewError, match="random op"):
        budget.eager.plan(model, ids, memory_budget=0.5)


def test_a_step_that_runs_its_own_backward_is_refused_saying_what_to_return():
    ex = _gpt()
    before = [p.detach().clone() for p in ex.model.parameters()]

    def step(*args):  # type: ignore[no-untyped-def]
        ex.step(*args).backward()

    with pytest.raises(ValueError, match=r"step= returned NoneType, not the loss.*backward\(\)"):
        budget.apply(ex.model, *ex.args, step=step, memory_budget=0.5)
    assert all(torch.equal(a, p) for a, p in zip(before, ex.model.parameters(), strict=True))
    assert all(p.grad is None for p in ex.model.parameters())


@pytest.mark.parametrize("how", ["torch.compile", "module.compile", "step"])
def test_a_compiled_model_or_step_is_refused_before_dynamo_sees_a_fake_run(how):
    """Traced on fake tensors, a compiled model would be run eagerly by dynamo from then on
    (it gives up on the frame): refused first, naming budget's backend, and it compiles
    as before after the refusal."""
    ex = _gpt()
    compiles = []

    def counting(gm, example_inputs):  # type: ignore[no-untyped-def]
        compiles.append(gm)
        return gm.forward

    torch._dynamo.reset()
    model, step = ex.model, ex.step
    if how == "torch.compile":
        model = torch.compile(ex.model, backend=counting)
        step = None
    elif how == "module.compile":
        ex.model.blocks[0].compile(backend=counting)
    else:
        step = torch.compile(ex.step, backend=counting)
    with pytest.raises(ValueError, match="compiled.*budget.backend"):
        budget.apply(model, *ex.args, step=step, memory_budget=0.5)
    assert not compiles
    out = model(ex.args[0]) if step is None else step(*ex.args)
    assert compiles and torch.is_tensor(out)
