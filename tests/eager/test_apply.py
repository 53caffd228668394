"""budget.apply / budget.unapply on the built-in models: bytes, FLOPs, gradients, hazards.

Every figure a plan predicts is checked against the eager step measured on real tensors:
the bytes its forward leaves allocated (budget.eager.measure.retained_bytes) and the FLOPs
its backward adds over the unmodified model's.
"""

from __future__ import annotations

import copy

import pytest
import torch
from helpers.small import bf16_autocast, small_gpt, small_mlp, small_resnet
from helpers.steps import assert_same_grads, budget_log, grads_of

import budget
from budget.eager import EagerPlan, applied_plan
from budget.eager.measure import measure_eager

MODELS = {
    "gpt": small_gpt,
    "gpt-dropout": lambda: small_gpt(0.1),
    "mlp": small_mlp,
    "resnet": small_resnet,
    "resnet-bf16-autocast": lambda: bf16_autocast(small_resnet()),
}


def _params(ex):
    return list(ex.model.parameters())


@pytest.fixture(scope="session")  # built once per worker: tests/conftest.py
def baselines():
    """The unmodified step of each model: retained bytes and backward FLOPs."""
    out = {}
    for name, make in MODELS.items():
        ex = make()
        torch.manual_seed(0)
        out[name] = measure_eager(ex.step, *ex.args)
    return out


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("b", [1.0, 0.5, 0.0])
def test_measured_bytes_and_flops_are_the_plans(name, b, baselines):
    ex = MODELS[name]()
    plan = budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=b)
    assert isinstance(plan, EagerPlan) and applied_plan(ex.model) is plan
    torch.manual_seed(0)
    m = measure_eager(ex.step, *ex.args)
    base = baselines[name]
    assert m.retained_bytes == plan.saved_bytes <= plan.target_bytes
    assert m.backward_flops - base.backward_flops == plan.recompute_flops
    assert plan.max_bytes == base.retained_bytes  # budget 1: the model as it is
    if b == 1.0:
        assert plan.checkpointed == [] and plan.recompute_flops == 0
    if b == 0.0:
        assert plan.saved_bytes == plan.min_bytes < plan.max_bytes
        assert plan.checkpointed  # the least memory needs checkpointing
    if b == 0.5:
        assert plan.min_bytes < plan.saved_bytes < plan.max_bytes


@pytest.mark.parametrize("name", ["gpt-dropout", "mlp", "resnet"])
@pytest.mark.parametrize("b", [0.5, 0.0])
def test_gradients_equal_the_unmodified_models(name, b):
    ex = MODELS[name]()
    ref = copy.deepcopy(ex.model)
    ref_ex = MODELS[name]()
    ref_ex.model.load_state_dict(ref.state_dict())
    want_out, want = grads_of(ref_ex.step, _params(ref_ex), *ref_ex.args, seed=3)
    budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=b)
    got_out, got = grads_of(ex.step, _params(ex), *ex.args, seed=3)
    torch.testing.assert_close(got_out, want_out, rtol=0, atol=0)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-7)
    # buffers (BatchNorm running statistics) updated once, as without checkpointing
    for (k, v), (_, w) in zip(
        ex.model.state_dict().items(), ref_ex.model.state_dict().items(), strict=True
    ):
        torch.testing.assert_close(v, w, rtol=0, atol=0, msg=k)


def test_dropout_is_random_and_replayed_not_redrawn():
    # The same seed gives the same gradients with checkpointing; another seed does not
    # (so the test above could fail if recomputation drew new masks).
    ex = small_gpt(0.1)
    budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=0.0)
    region = ex.model.blocks[0].__dict__["_budget_eager"].policy.choice
    assert any("bernoulli" in op for op in region.ops)  # dropout runs inside the region
    _, a = grads_of(ex.step, _params(ex), *ex.args, seed=1)
    _, b = grads_of(ex.step, _params(ex), *ex.args, seed=2)
    assert not all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_planning_touches_nothing_real():
    ex = small_resnet()
    before = copy.deepcopy(ex.model.state_dict())
    rng = torch.get_rng_state()
    budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=0.5)
    assert torch.equal(torch.get_rng_state(), rng)
    for k, v in ex.model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert all(p.grad is None for p in ex.model.parameters())


def test_no_grad_evaluation_is_untouched():
    ex = small_gpt(0.1)
    plan = budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=0.0)
    policies = [m.__dict__["_budget_eager"].policy for m in ex.model.blocks]
    ex.model.eval()
    ref = copy.deepcopy(ex.model)
    budget.unapply(ref)
    with torch.no_grad():
        got = ex.model(ex.args[0])
        want = ref(ex.args[0])
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert all(p.calls == 0 for p in policies)  # checkpointing never ran
    ex.model.train()
    with torch.no_grad():
        ex.model(ex.args[0])
    assert all(p.calls == 0 for p in policies)
    assert plan.checkpointed == ["blocks.0", "blocks.1"]
    ex.step(*ex.args).backward()
    assert all(p.calls == 1 for p in policies)


def test_state_dict_keys_do_not_change_and_unapply_restores():
    ex = small_gpt()
    keys = list(ex.model.state_dict())
    own = {name: dict(m.__dict__) for name, m in ex.model.named_modules()}
    budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=0.0)
    assert list(ex.model.state_dict()) == keys
    assert "forward" in ex.model.blocks[0].__dict__
    assert budget.unapply(ex.model) is True
    assert list(ex.model.state_dict()) == keys
    for name, m in ex.model.named_modules():
        assert set(m.__dict__) == set(own[name]), name
        assert m.forward.__func__ is type(m).forward
    assert applied_plan(ex.model) is None
    assert budget.unapply(ex.model) is False  # nothing left to undo


def test_unapply_restores_a_forward_the_instance_had():
    ex = small_mlp()
    body = ex.model.body
    calls = []

    def mine(x):
        calls.append(1)
        return type(body).forward(body, x)

    body.forward = mine
    budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=0.0, modules=["body"])
    assert body.forward is not mine
    ex.step(*ex.args).backward()
    assert calls  # the checkpointed forward is the instance's own
    budget.unapply(ex.model)
    assert body.forward is mine


def test_applying_again_replans_from_the_original_model():
    ex = small_gpt()
    with budget_log() as logged:
        first = budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=0.0)
    (record,) = logged  # the budget logger says what was applied
    regions = len(first.regions)
    assert record.startswith(f"applied to GPT, checkpointing {regions} of {regions} candidate")
    assert f"graph {first.graph_hash[:8]} (eager-checkpoint): budget 0 of the range" in record
    second = budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=0.0)
    assert second.saved == first.saved and second.graph_hash == first.graph_hash
    third = budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=1.0)
    assert third.checkpointed == []
    assert all("_budget_eager" not in m.__dict__ for m in ex.model.modules())
    with pytest.raises(ValueError, match="has a plan applied"):
        budget.eager.plan(ex.model, *ex.args, step=ex.step)


def test_a_step_that_raises_leaves_no_checkpoint_state(baselines):
    ex = small_gpt()
    plan = budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=0.5)
    gelu = ex.model.blocks[1].mlp[1]

    def boom(x):
        raise RuntimeError("boom")

    gelu.forward = boom
    with pytest.raises(RuntimeError, match="boom"):
        ex.step(*ex.args)
    del gelu.forward
    ref = small_gpt()
    want_out, want = grads_of(ref.step, _params(ref), *ref.args)
    got_out, got = grads_of(ex.step, _params(ex), *ex.args)
    torch.testing.assert_close(got_out, want_out, rtol=0, atol=0)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-7)
    m = measure_eager(ex.step, *ex.args)
    assert m.retained_bytes == plan.saved_bytes


def test_a_forward_that_is_not_the_planned_one_is_refused():
    ex = small_gpt(0.1)
    budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=0.0)
    ex.model.blocks[0].attn.dropout = 0.0  # attention takes another kernel now
    with pytest.raises(budget.PlanMismatchError, match=r"'blocks\.0' ran aten\."):
        ex.step(*ex.args)


def test_a_plan_round_trips_and_applies_as_made():
    ex = small_gpt(0.1)
    plan = budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=0.5)
    again = EagerPlan.from_json(plan.to_json())
    assert again == plan and again.regions[0].policy == plan.regions[0].policy
    other = small_gpt(0.1)
    budget.apply(other.model, plan=again)
    torch.manual_seed(0)
    assert measure_eager(other.step, *other.args).retained_bytes == plan.saved_bytes
    plain = plan.to_dict()
    del plain["regions"]
    with pytest.raises(ValueError, match="not an eager plan"):
        EagerPlan.from_dict(plain)
    with pytest.raises(ValueError, match="does not have"):
        budget.apply(small_mlp().model, plan=plan)


def test_loss_fn_and_a_model_returning_its_loss():
    ex = small_mlp()
    x, y = ex.args
    plan = budget.apply(
        ex.model,
        x,
        memory_budget=0.0,
        loss_fn=lambda out: torch.nn.functional.cross_entropy(out, y),
    )
    other = small_mlp()
    same = budget.eager.plan(other.model, *other.args, step=other.step, memory_budget=0.0)
    assert plan.saved_bytes == same.saved_bytes and plan.checkpointed == ["body"]
    with pytest.raises(ValueError, match="not a scalar loss"):
        budget.eager.plan(small_mlp().model, x)


def _conv_bn_relu(width: int) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(width, width, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(width),
        torch.nn.ReLU(inplace=True),  # writes BatchNorm's output: it cannot be cached
    )


class _PostNorm(torch.nn.Module):
    """A post-norm block (BERT's, ALBERT's): its output is a layer norm's."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc, self.norm = torch.nn.Linear(d, d), torch.nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + torch.nn.functional.gelu(self.fc(x)))


def test_a_post_norm_blocks_statistics_are_not_kept_for_the_output_kept_anyway():
    """A post-norm block's output is kept as the next block's input whatever the plan, and
    is one output of its layer norm; caching the norm for it would keep the norm's mean
    and deviation too. At b=0 every block is checkpointed and the step keeps no more than
    torch's full checkpointing of every block, measured."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        apply_activation_checkpointing,
    )

    from budget.eager.measure import retained_bytes

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(*[_PostNorm(64) for _ in range(3)], torch.nn.Linear(64, 1))

    x = torch.randn(8, 32, 64)

    def kept(model):
        return retained_bytes(lambda: model(x).square().mean()).retained_bytes

    full = make()
    apply_activation_checkpointing(full, check_fn=lambda m: isinstance(m, _PostNorm))
    model = make()
    plan = budget.apply(model, x, memory_budget=0.0, loss_fn=lambda out: out.square().mean())
    assert plan.checkpointed == ["0", "1", "2"]
    assert plan.saved_bytes == kept(model) <= kept(full)


def test_at_b0_no_set_of_checkpointed_blocks_keeps_less():
    """Brute force over every set of blocks torch's full checkpointing may wrap: none keeps
    less than budget.apply at b=0. The small block frees less than the generator state a
    checkpoint keeps on a CPU, so b=0 leaves it alone, saying why."""
    import itertools

    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        apply_activation_checkpointing,
    )

    from budget.eager.measure import retained_bytes

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            big = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU())
            small = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU())
            self.blocks = torch.nn.ModuleList([big, small])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.blocks[0](x)
            return h.sum() + self.blocks[1](h.mean(0, keepdim=True)).sum()

    def make() -> Net:
        torch.manual_seed(0)
        return Net()

    x = torch.randn(64, 256)
    model = make()
    plan = budget.apply(model, x, memory_budget=0.0)
    assert plan.checkpointed == ["blocks.0"]
    assert "cannot lower what the step keeps" in plan.region("blocks.1").reason
    ours = retained_bytes(model, x).retained_bytes
    for chosen in itertools.chain(*(itertools.combinations(range(2), k) for k in (1, 2))):
        full = make()
        wrap = {id(full.blocks[i]) for i in chosen}
        apply_activation_checkpointing(full, check_fn=lambda m, wrap=wrap: id(m) in wrap)
        assert ours <= retained_bytes(full, x).retained_bytes, chosen


def test_batchnorm_before_an_inplace_relu_is_recomputed_its_statistics_updated_once():
    """BatchNorm followed by an in-place ReLU (torchvision's ResNets): its output cannot be
    cached (the ReLU writes it), so a checkpointed block recomputes BatchNorm, on copies of
    its running statistics (budget.eager.policy.StatsAside). Every block is checkpointed;
    over two steps the gradients are the unplanned model's, the running statistics are
    updated once a step, as without checkpointing, and the predicted peak and bytes kept
    are measured."""
    from budget.runtime.measure import measure_peak

    torch.manual_seed(0)
    conv = [torch.nn.Conv2d(16, 16, 3, padding=1) for _ in range(2)]
    free = torch.nn.Sequential(conv[0], torch.nn.Tanh(), conv[1], torch.nn.Tanh())
    model = torch.nn.Sequential(_conv_bn_relu(16), free, _conv_bn_relu(16)).train()
    ref = copy.deepcopy(model)
    x = torch.randn(2, 16, 16, 16)
    plan = budget.apply(model, x, memory_budget=0.0, loss_fn=lambda out: out.square().mean())
    assert plan.checkpointed == ["0", "1", "2"]
    for name in ("0", "2"):
        region = plan.region(name)
        recomputed = [op for op, p in zip(region.ops, region.policy, strict=True) if p != "save"]
        assert any("batch_norm" in op for op in recomputed), region.ops
    for _ in range(2):
        for m in (model, ref):
            m.zero_grad(set_to_none=True)
            m(x).square().mean().backward()
        for p, q in zip(model.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=1e-7)
        for b, c in zip(model.buffers(), ref.buffers(), strict=True):
            torch.testing.assert_close(b, c, rtol=0, atol=0)  # statistics updated once
    model.zero_grad(set_to_none=True)
    assert measure_peak(lambda: model(x).square().mean()) == plan.peak_bytes
    # block 0's output (BatchNorm's, written by the ReLU) is block 1's input: kept alone,
    # without BatchNorm's statistics, which the recomputation makes again
    assert measure_eager(lambda: model(x).square().mean()).retained_bytes == plan.saved_bytes


class _WritesAView(torch.nn.Module):
    """An MLP block whose activations are written in place where they are views: a
    Linear's 3-D output is a view of its addmm's."""

    def __init__(self, kind: str, d: int = 32) -> None:
        super().__init__()
        self.kind = kind
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        self.drop = torch.nn.Dropout(0.1, inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        if self.kind == "relu":
            torch.relu_(h)
        elif self.kind == "dropout":
            self.drop(h)
            h = torch.tanh(h)
        else:  # a view of a view of a view
            h = h[..., : h.shape[-1] // 2].transpose(0, 1)
            h.relu_()
            h = torch.cat([h, h], -1).transpose(0, 1)
        h = self.fc2(h)
        h.add_(x)
        return h


@pytest.mark.parametrize("kind", ["relu", "dropout", "chain"])
def test_in_place_ops_on_views_run_as_planned(kind):
    """On fake tensors autograd runs a view's ops again after an in-place op on it (the
    trace's tensors), on real ones it does not: the plan holds the real step's op calls
    (budget.eager.replays), so the checkpointed step runs; its gradients are the
    unplanned model's, and the bytes it keeps and its peak are the plan's."""
    from budget.runtime.measure import measure_peak

    torch.manual_seed(0)
    model = torch.nn.Sequential(_WritesAView(kind), _WritesAView(kind), torch.nn.Linear(32, 8))
    ref = copy.deepcopy(model)
    x = torch.randn(4, 16, 32)

    def loss(m):
        torch.manual_seed(1)
        return m(x).square().mean()

    plan = budget.apply(model, x, memory_budget=0.0, loss_fn=lambda out: out.square().mean())
    assert plan.checkpointed == ["0", "1"]
    for m in (model, ref):
        loss(m).backward()
    assert_same_grads(model, ref)
    assert measure_eager(lambda: loss(model)).retained_bytes == plan.saved_bytes
    model.zero_grad(set_to_none=True)
    assert measure_peak(lambda: loss(model)) == plan.peak_bytes


class _ScalesInPlace(torch.nn.Module):
    """A block whose code reads a tensor it wrote in place, not the in-place op's result:
    timm's DropPath (``r.div_(keep)``, then ``x * r``), or a scale made in the block."""

    def __init__(self, random: bool, d: int = 32) -> None:
        super().__init__()
        self.random = random
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc2(torch.nn.functional.gelu(self.fc1(x)))
        if self.random:
            r = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(0.5)
        else:
            r = h.mean(0, keepdim=True)
        r.div_(0.5)  # its result unused
        return x + h * r


@pytest.mark.parametrize("random", [True, False])
@pytest.mark.parametrize("b", [0.5, 0.9])
def test_an_in_place_write_to_a_tensor_the_region_makes_runs_again(random, b):
    """Cached, the in-place op would not run when its region is recomputed, and the
    tensor made again would go unwritten: it is recomputed with it (with the ``unit``
    estimator pointwise ops cost something, so caching it is what a plan would pick)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(_ScalesInPlace(random) for _ in range(2)), torch.nn.Linear(32, 8))
    ref = copy.deepcopy(model)
    x = torch.randn(16, 32)
    loss = dict(loss_fn=lambda out: out.square().mean())
    plan = budget.apply(model, x, memory_budget=b, estimator="unit", **loss)
    assert plan.checkpointed == ["0", "1"]
    writes = [p for r in plan.regions for o, p in zip(r.ops, r.policy, strict=True) if "div_" in o]
    assert writes == ["recompute", "recompute"]
    for m in (model, ref):
        torch.manual_seed(1)
        m(x).square().mean().backward()
    assert_same_grads(model, ref)


class _SpectralBlock(torch.nn.Module):
    def __init__(self, d: int = 32) -> None:
        super().__init__()
        sn = torch.nn.utils.parametrizations.spectral_norm
        self.a, self.b = sn(torch.nn.Linear(d, 4 * d)), sn(torch.nn.Linear(4 * d, d))
        self.ln = torch.nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.b(torch.nn.functional.gelu(self.a(self.ln(x))))


@pytest.mark.parametrize("b", [0.5, 0.2])
def test_writes_through_out_arguments_are_not_run_again(b):
    """Spectral norm's power iteration writes its buffers through ``out=`` (F.normalize):
    a keyword argument. The trace records it as an input the op writes, so the op is not
    recomputed (the buffers would be updated twice a step, the gradients drift)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(_SpectralBlock() for _ in range(3)), torch.nn.Linear(32, 8))
    ref = copy.deepcopy(model)
    x = torch.randn(4, 16, 32)
    loss = dict(loss_fn=lambda out: out.square().mean())
    plan = budget.apply(model, x, memory_budget=b, modules=["0", "1", "2"], **loss)
    assert plan.checkpointed == ["0", "1", "2"]
    writes = [
        p for r in plan.regions for o, p in zip(r.ops, r.policy, strict=True) if o.endswith(".out")
    ]
    assert writes and set(writes) == {"save"}
    for m in (model, ref):
        m(x).square().mean().backward()
    assert_same_grads(model, ref)
    for p, q in zip(model.buffers(), ref.buffers(), strict=True):
        torch.testing.assert_close(p, q)


def test_an_lstm_keeps_the_bytes_planned():
    """oneDNN's LSTM layer keeps a workspace for its backward (budget.eager.fake.KernelGaps
    gives the fake run its size): the bytes the step keeps are the plan's."""

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn, self.head = torch.nn.LSTM(16, 32, batch_first=True), torch.nn.Linear(32, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.rnn(x)[0])

    torch.manual_seed(0)
    model, x = Net(), torch.randn(2, 12, 16)
    loss = dict(loss_fn=lambda out: out.square().mean())
    plan = budget.apply(model, x, memory_budget=0.0, modules=["rnn", "head"], **loss)
    assert measure_eager(lambda: model(x).square().mean()).retained_bytes == plan.saved_bytes


@pytest.mark.parametrize("b", [0.0, 0.5])
def test_a_one_hot_routing_runs_the_calls_it_was_planned_with(b):
    """``one_hot`` (a mixture of experts' routing masks) takes another path in ATen for
    fake tensors than on a device (budget.eager.fake.real_paths): planned on the device's
    path, the checkpointed blocks run as planned, with the unplanned step's gradients,
    the bytes planned kept and the predicted peak met."""
    from budget.runtime.measure import measure_peak

    class Routed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.nn.Linear(16, 64), torch.nn.Linear(64, 16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.b(torch.tanh(self.a(x)))
            return x + h * torch.nn.functional.one_hot(h.argmax(-1), 16).float()

    torch.manual_seed(0)
    model = torch.nn.Sequential(Routed(), Routed())
    x = torch.randn(32, 16)
    reference = copy.deepcopy(model)
    plan = budget.apply(model, x, memory_budget=b, loss_fn=lambda out: out.square().mean())
    assert plan.checkpointed == ["0", "1"]
    step = lambda: model(x).square().mean()  # noqa: E731
    assert measure_eager(step).retained_bytes == plan.saved_bytes
    assert measure_peak(step) == plan.peak_bytes
    model.zero_grad()
    step().backward()
    reference(x).square().mean().backward()
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad, rtol=0, atol=0)


@pytest.mark.parametrize("b", [0.0, 1.0])
def test_a_library_function_given_numbers_is_not_read_for_saved_numbers(b):
    """``F.local_response_norm(x, 5, ...)`` is given numbers and returns the node of its
    last op (a division, whose ``_saved_other`` is an activation): the fake run counts the
    numbers arithmetic saves (budget.eager.peak._SavedNumbers) for arithmetic alone, so
    it never unpacks that activation (unpacking it would run the checkpointed block again
    inside its own forward). Planned, gradients are the unplanned step's, and the step
    keeps what the plan saves but for the number the function's own ``mul`` saves (8
    bytes: the torch function mode does not see calls inside a function it handles)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(8, 8, 3, padding=1),
        torch.nn.Sequential(torch.nn.Conv2d(8, 8, 1), torch.nn.LocalResponseNorm(5)),
    )
    x = torch.randn(2, 8, 16, 16)
    reference = copy.deepcopy(model)
    plan = budget.apply(model, x, memory_budget=b, modules=["1"], loss_fn=lambda o: o.mean())
    assert plan.checkpointed == ([] if b == 1.0 else ["1"])
    step = lambda: model(x).mean()  # noqa: E731
    assert measure_eager(step).retained_bytes == plan.saved_bytes + 8
    model.zero_grad()
    step().backward()
    reference(x).mean().backward()
    assert_same_grads(model, reference)
