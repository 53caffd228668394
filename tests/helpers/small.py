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


class _SeparableBlock(torch.nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.dw = torch.nn.Conv1d(c, c, 5, padding=2, groups=c)
        self.pw = torch.nn.Conv1d(c, c, 1)
        self.norm = torch.nn.GroupNorm(4, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.nn.functional.silu(self.norm(self.pw(self.dw(x))))


class _Audio(torch.nn.Module):
    """A waveform through depthwise-separable 1-d convolutions with GroupNorm, pooled over
    time into a classifier: GroupNorm's CPU backward sums the parameters' gradients per
    thread, inside the kernel (the step's peak)."""

    def __init__(self, c: int = 32) -> None:
        super().__init__()
        self.inp = torch.nn.Conv1d(1, c, 3, padding=1)
        self.layers = torch.nn.Sequential(*(_SeparableBlock(c) for _ in range(2)))
        self.head = torch.nn.Linear(c, 8)

    def forward(self, wav: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.layers(self.inp(wav[:, None]))
        return torch.nn.functional.cross_entropy(self.head(h.mean(-1)), y)


def small_audio() -> Example:
    torch.manual_seed(0)
    model = _Audio()
    args = (torch.randn(4, 200), torch.randint(0, 8, (4,)))
    return Example("audio", model, args, lambda wav, y: model(wav, y))


def bf16_autocast(ex: Example) -> Example:
    """The example with its step run under CPU bf16 autocast: matmuls and convolutions in
    bf16 (oneDNN, which allocates inside each call), BatchNorm keeping float32 statistics."""
    inner = ex.step

    def step(*args):  # type: ignore[no-untyped-def]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return inner(*args)

    ex.step = step
    return ex


class _Block(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.ln = torch.nn.LayerNorm(d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln(x))))


class Looped(torch.nn.Module):
    """One block run ``depth`` times, as ALBERT shares its layer across depth; with
    ``pool``, on half as many positions each time (a shared block at each level of a
    pyramid); ``fail_at`` raises after that many runs (a step that fails half-way, as one
    out of memory)."""

    def __init__(self, d: int = 32, depth: int = 4, pool: bool = False) -> None:
        super().__init__()
        self.inp, self.head = torch.nn.Linear(d, d), torch.nn.Linear(d, 1)
        self.layers = torch.nn.ModuleList([_Block(d)])
        self.depth, self.pool = depth, pool
        self.fail_at: int | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for i in range(self.depth):
            if i == self.fail_at:
                raise RuntimeError("failed half-way")
            h = self.layers[0](h)
            if self.pool:
                h = h.unflatten(1, (-1, 2)).mean(2)
        return self.head(h).square().mean()


def looped(pool: bool = False) -> tuple[Looped, torch.Tensor]:
    """A looped (or pyramid) model and an input for it."""
    torch.manual_seed(0)
    return Looped(pool=pool), torch.randn(4, 16, 32)
