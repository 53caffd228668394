"""A traced step that reads tensor values in Python gets the real step's values: the
trace takes the branch the real step takes, and nothing real changes."""

from __future__ import annotations

import pytest
import torch
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
    assert [v for _, v in trace.reads] == [True, 1, 1, 2, False]
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
