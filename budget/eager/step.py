"""The training step ``budget.apply`` plans: the model's forward and its loss.

The step is ``loss_fn(model(*inputs))`` (default loss: the output itself when it is a
scalar, else its ``loss``, as Hugging Face models return it when given labels), or a
``step(*inputs)`` the user gives, which runs the model and returns the loss.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn


def step_of(
    model: nn.Module,
    loss_fn: Callable[[Any], torch.Tensor] | None,
    step: Callable[..., Any] | None,
) -> Callable[..., Any]:
    """The step as one function of the example inputs, returning the loss."""
    if step is not None:
        if loss_fn is not None:
            raise ValueError("pass loss_fn= or step=, not both: step= computes the loss itself")
        if hasattr(step, "_torchdynamo_orig_callable"):  # what torch.compile(fn) returns
            raise ValueError(
                "step= is compiled (torch.compile): budget.apply plans eager steps. Compile "
                "it with budget's backend instead (torch.compile(step, backend="
                "budget.backend(memory_budget=...))), or give the uncompiled step"
            )
        return _returning_the_loss(step)

    def run(*args: Any, **kwargs: Any) -> torch.Tensor:
        out = model(*args, **kwargs)
        return loss_fn(out) if loss_fn is not None else default_loss(out)

    return run


def _returning_the_loss(step: Callable[..., Any]) -> Callable[..., torch.Tensor]:
    """``step``, refusing a return that is no tensor: budget runs the backward itself, so a
    step that calls ``backward()`` and returns nothing cannot be planned."""

    def run(*args: Any, **kwargs: Any) -> torch.Tensor:
        loss = step(*args, **kwargs)
        if not isinstance(loss, torch.Tensor):
            raise ValueError(
                f"step= returned {type(loss).__name__}, not the loss: step= runs the model "
                "and returns the loss tensor, without calling backward() (budget runs the "
                "backward itself, to plan and predict it)"
            )
        return loss

    return run


def default_loss(out: Any) -> torch.Tensor:
    """The loss of a model's output: a scalar tensor, or the ``loss`` a Hugging Face model
    returns when given labels."""
    if isinstance(out, torch.Tensor) and out.numel() == 1:
        return out
    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, dict):
        loss = out.get("loss")
    if isinstance(loss, torch.Tensor):
        return loss
    raise ValueError(
        f"the model returned {type(out).__name__}, not a scalar loss: pass loss_fn= (a "
        "function of the model's output returning the scalar loss), or step= (a function "
        "of the example inputs that runs the model and returns it)"
    )
