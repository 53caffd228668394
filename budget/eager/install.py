"""A plan installed on a model in place, and taken off again.

:func:`install` replaces the forward of each module the plan checkpoints (an attribute of
the instance, so ``state_dict()`` keys and parameters do not change) by
``torch.utils.checkpoint.checkpoint(forward, use_reentrant=False, preserve_rng_state=True,
context_fn=...)`` with the plan's per-op policy (:mod:`budget.eager.policy`). The replaced
forward runs the original one unchanged when gradients are off (``torch.no_grad()``
evaluation) or when the module is not in the training mode it was planned in. A plan that
offloads also runs the model's forward under its saved-tensor hooks
(:mod:`budget.eager.hooks`), outside the checkpointing, as ``offload_wrapper`` around
``checkpoint_wrapper``. :func:`unapply` puts every original forward back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..errors import OffloadError
from ..runtime import _torch_private as T
from .hooks import OffloadHooks
from .plan import EagerPlan, RegionChoice
from .policy import RegionPolicy

_STATE = "_budget_eager"  # attribute of a checkpointed module: what install replaced
_PLAN = "_budget_eager_plan"  # attribute of the model: the plan applied
_OFFLOAD = "_budget_eager_offload"  # attribute of the model: its offload hooks


@dataclass
class _Installed:
    """What apply changed on one module, to undo it."""

    had_forward: bool  # the instance had its own ``forward`` attribute before
    original: Callable[..., Any]
    policy: RegionPolicy | OffloadHooks


def install(model: nn.Module, plan: EagerPlan) -> None:
    """Checkpoint the modules ``plan`` checkpoints, with its per-op policies."""
    named = dict(model.named_modules())
    chosen = [r for r in plan.regions if r.checkpoint]
    missing = [r.module for r in chosen if r.module not in named]
    if missing:
        raise ValueError(
            f"the plan checkpoints {', '.join(map(repr, missing))}, which "
            f"{type(model).__name__} does not have: it was made for another model"
        )
    try:
        for region in chosen:
            _wrap(named[region.module], region, model.training)
        if any(s.offload for s in plan.saves):
            _offload(model, OffloadHooks(plan.saves), model.training)
    except BaseException:
        unapply(model)
        raise
    object.__setattr__(model, _PLAN, plan)


def _wrap(module: nn.Module, region: RegionChoice, training: bool) -> None:
    had = "forward" in module.__dict__
    original = module.forward
    policy = RegionPolicy(region)

    def context_fn() -> tuple[Any, Any]:  # a plain function: dynamo drops bound methods' self
        return policy.context_fn()

    def forward(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled() or module.training != training:
            return original(*args, **kwargs)
        return checkpoint(
            original,
            *args,
            use_reentrant=False,
            preserve_rng_state=True,
            context_fn=context_fn,
            **kwargs,
        )

    object.__setattr__(module, "forward", forward)
    object.__setattr__(module, _STATE, _Installed(had, original, policy))


def _offload(model: nn.Module, hooks: OffloadHooks, training: bool) -> None:
    """Run the model's forward (checkpointed or not) under the plan's offload hooks."""
    had = "forward" in model.__dict__
    original = model.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled() or model.training != training:
            return original(*args, **kwargs)
        if torch.compiler.is_compiling() or T.in_compiled_step():
            raise OffloadError(
                "budget.apply's offload runs in eager mode: a compiled step saves other "
                "tensors. Under torch.compile, offload with budget.backend(offload=True), "
                "or apply a plan made with offload=False"
            )
        return hooks.run(original, *args, **kwargs)

    object.__setattr__(model, "forward", forward)
    object.__setattr__(model, _OFFLOAD, _Installed(had, original, hooks))


def unapply(model: nn.Module) -> bool:
    """Restore every module ``budget.apply`` checkpointed or offloads in; True when there
    was any."""
    changed = False
    state = model.__dict__.pop(_OFFLOAD, None)
    if state is not None:  # wrapped last, around a checkpointed model's own forward
        if state.had_forward:
            object.__setattr__(model, "forward", state.original)
        else:
            del model.__dict__["forward"]
        changed = True
    for module in model.modules():
        state = module.__dict__.get(_STATE)
        if state is None:
            continue
        if state.had_forward:
            object.__setattr__(module, "forward", state.original)
        else:
            del module.__dict__["forward"]
        del module.__dict__[_STATE]
        changed = True
    if _PLAN in model.__dict__:
        del model.__dict__[_PLAN]
        changed = True
    return changed


def applied_plan(model: nn.Module) -> EagerPlan | None:
    """The plan ``budget.apply`` applied to ``model``, or None."""
    return model.__dict__.get(_PLAN)
