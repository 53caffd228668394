"""A traced step that reads tensor values in Python gets the real step's values: the
trace takes the branch the real step takes, and nothing real changes."""

from __future__ import annotations

import pytest
import torch
from helpers.steps import assert_same_grads
from torch import nn

from budget.eager.reads import reads_as_traced
from budget.eager.trace import trace_step
from budget.runtime import _torch_private as T


class Reads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.steps.add_(1)  # a buffer written in place
        z = torch.zeros(3, dtype=torch.long)
        z[1:].fill_(5)  # written through a view
        y = self.lin(x)
        if (
            (z == 5).sum() == 2
            and self.steps.item() == 1
            and torch.tensor([1, 2]).tolist() == [1, 2]
        ):
            y = y * 2
        else:
            y = y.relu()
        if (x > 100).any():  # False on the real input
            y = y.sigmoid()
        return y.sum()


def test_reads_get_the_real_values_and_change_nothing():
    model = Reads()
    x = torch.randn(2, 4)
    torch.manual_seed(3)
    expected = torch.rand(1)
    torch.manual_seed(3)
    trace = trace_step(model, model, (x,), {}, {})
    ops = [str(n.target) for n in trace.ops]
    assert "aten.mul.Tensor" in ops
    assert "aten.relu.default" not in ops and "aten.sigmoid.default" not in ops
    assert [r.value for r in trace.reads] == [True, 1, 1, 2, False]
    assert model.steps.item() == 0  # the real buffer is not written
    assert torch.equal(torch.rand(1), expected)  # nor the RNG moved

    # another fake run of the step takes the same path with the trace's reads
    with T.FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = mode.from_tensor(x)
        with T.reparametrize_module(
            model, {k: mode.from_tensor(v) for k, v in model.state_dict().items()}
        ):
            with reads_as_traced(trace.reads):
                model(fake)
            with pytest.raises(T.DataDependentOutputException):
                model(fake)


class _Routed(nn.Module):
    """A mixture of experts routed with ``nonzero``: its outputs' sizes depend on values."""

    def __init__(self, d: int = 16, experts: int = 4) -> None:
        super().__init__()
        self.router = nn.Linear(d, experts)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
            for _ in range(experts)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, chosen = self.router(x).softmax(-1).topk(2, -1)
        out = torch.zeros_like(x)
        for i, expert in enumerate(self.experts):
            rows, slot = torch.nonzero(chosen == i, as_tuple=True)
            out = out.index_add(0, rows, expert(x[rows]) * weights[rows, slot, None])
        return out


@pytest.mark.parametrize(("b", "estimator"), [(1.0, "flops"), (0.0, "flops"), (0.5, "unit")])
def test_a_routed_mixture_of_experts_is_traced_at_the_real_routing(b, estimator):
    """``nonzero`` makes a tensor whose size depends on values: the trace gives it the size
    the real step makes (budget.eager.reads.real_output), so budget.apply plans a routed
    MoE; the bytes kept are the plan's, gradients the unplanned model's. Checkpointed, the
    recomputation routes again (unless the plan caches the routing: as the unit estimator
    prices it), and the fake run gives it the trace's routing: the peak predicted is the
    one measured."""
    import copy

    import budget
    from budget.eager.measure import measure_eager
    from budget.runtime.measure import measure_peak

    torch.manual_seed(0)
    model = nn.Sequential(_Routed(), nn.Tanh(), _Routed())
    ref = copy.deepcopy(model)
    x = torch.randn(64, 16)
    loss = dict(loss_fn=lambda out: out.square().sum())
    plan = budget.apply(model, x, memory_budget=b, modules=["0", "2"], estimator=estimator, **loss)
    assert plan.checkpointed == ([] if b == 1.0 else ["0", "2"])
    routing = {
        p for r in plan.regions for o, p in zip(r.ops, r.policy, strict=True) if "nonzero" in o
    }
    assert routing == {"flops": {"recompute"}, "unit": {"save"}}[estimator] or b == 1.0
    assert measure_eager(lambda: model(x).square().sum()).retained_bytes == plan.saved_bytes
    model.zero_grad(set_to_none=True)
    for m in (model, ref):
        m(x).square().sum().backward()
    assert_same_grads(model, ref)
    model.zero_grad(set_to_none=True)
    assert measure_peak(lambda: model(x).square().sum()) == plan.peak_bytes


class _Packed(nn.Module):
    """Variable-length sequences through recurrent layers, packed as users pack them."""

    def __init__(self, rnn: type[nn.Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            rnn(16, 8, batch_first=True, bidirectional=True) for _ in range(2)
        )

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

        for layer in self.layers:
            packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            out = layer(packed)[0]
            x = x + pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0]
        return x.square().sum()


@pytest.mark.parametrize("rnn", [nn.LSTM, nn.GRU])
@pytest.mark.parametrize("b", [1.0, 0.0])
def test_packed_sequences_are_traced_with_their_real_batch_sizes(rnn, b):
    """``pack_padded_sequence`` makes batch sizes of the lengths' values, which the
    recurrent kernels and ``pad_packed_sequence`` read on the host: the trace gives them
    the real ones (budget.eager.reads.host_read), and ``pad_packed_sequence`` writes the
    lengths it returns into a real tensor (budget.eager.fake.real_paths). budget.apply
    plans the layers; gradients are the unplanned model's, and the peak predicted is at
    or up to 1 KiB over the one measured (the engine's in-place sums of the gradients are
    made in place on the fake run too, budget.eager.backward_paths; a few bytes over remain,
    not yet traced to their op)."""
    import copy

    import budget
    from budget.runtime.measure import measure_peak

    torch.manual_seed(0)
    model, x = _Packed(rnn), torch.randn(4, 12, 16)
    lengths = torch.tensor([12, 9, 5, 2])
    ref = copy.deepcopy(model)
    plan = budget.apply(model, x, lengths, step=lambda x, n: model(x, n), memory_budget=b)
    assert plan.checkpointed == ([] if b == 1.0 else ["layers.0", "layers.1"])
    for m in (model, ref):
        m(x, lengths).backward()
    assert_same_grads(model, ref)
    model.zero_grad(set_to_none=True)
    measured = measure_peak(lambda: model(x, lengths))
    assert measured <= plan.peak_bytes <= measured + 1024


def test_a_packed_slice_of_a_batch_is_traced():
    """``pack_padded_sequence`` of a slice (sorted lengths: the input passes through as
    it is, strided): the packing kernel runs on zeros of the data's sizes."""
    import budget

    torch.manual_seed(0)
    model = _Packed(nn.LSTM)
    x, lengths = torch.randn(4, 16, 16)[:, :12], torch.tensor([12, 9, 5, 2])
    plan = budget.apply(model, x, lengths, step=lambda x, n: model(x, n), memory_budget=0.0)
    assert plan.checkpointed == ["layers.0", "layers.1"]
