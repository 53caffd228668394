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


def bf16_autocast(ex: Example) -> Example:
    """The example with its step run under CPU bf16 autocast: matmuls and convolutions in
    bf16 (oneDNN, which allocates inside each call), BatchNorm keeping float32 statistics."""
    inner = ex.step

    def step(*args):  # type: ignore[no-untyped-def]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return inner(*args)

    ex.step = step
    return ex
