"""The built-in models at the small sizes the eager tests run them at (a few KiB of
activations, one step well under a second)."""

from __future__ import annotations

import torch

from budget.models import Example, gpt, mlp, resnet


def small_gpt(dropout: float = 0.0) -> Example:
    return gpt(layers=2, d=64, heads=4, seq=32, batch=2, vocab=128, dropout=dropout)


def small_mlp() -> Example:
    return mlp(batch=8, d_in=32, d=64, layers=3, classes=10)


def small_resnet() -> Example:
    return resnet(batch=2, size=16, width=8, blocks=1)


class _LSTMStack(torch.nn.Module):
    """Residual LSTM layers in an ``nn.ModuleList`` (batch-first, as users write them)."""

    def __init__(self, d_in: int, d: int, layers: int, bidirectional: bool) -> None:
        super().__init__()
        hidden = d // 2 if bidirectional else d
        self.embed = torch.nn.Linear(d_in, d)
        self.layers = torch.nn.ModuleList(
            torch.nn.LSTM(d, hidden, batch_first=True, bidirectional=bidirectional)
            for _ in range(layers)
        )
        self.head = torch.nn.Linear(d, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for layer in self.layers:
            h = torch.relu(layer(h)[0]) + h
        return self.head(h).sum()


def small_lstm(bidirectional: bool = False) -> Example:
    """Three residual LSTM layers: on the CPU each runs oneDNN's kernel
    (``aten.mkldnn_rnn_layer``), which allocates inside itself in both directions."""
    torch.manual_seed(0)
    model = _LSTMStack(d_in=32, d=64, layers=3, bidirectional=bidirectional)
    return Example("lstm", model, (torch.randn(8, 50, 32),), lambda x: model(x))


def linears_sum_loss() -> Example:
    """Two Linears on a batch of sequences, the sum of the output the loss: its gradient,
    expanded with stride 0, reaches the last Linear's backward, whose CPU matmuls copy it
    (the step's peak)."""
    torch.manual_seed(0)
    model = torch.nn.Module()
    model.layers = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 32))
    x = torch.randn(4, 20, 32)
    return Example("linears", model, (x,), lambda x: model.layers(x).sum())


def bf16_autocast(ex: Example) -> Example:
    """The example with its step run under CPU bf16 autocast: matmuls and convolutions in
    bf16 (oneDNN, which allocates inside each call), BatchNorm keeping float32 statistics."""
    inner = ex.step

    def step(*args):  # type: ignore[no-untyped-def]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return inner(*args)

    ex.step = step
    return ex
