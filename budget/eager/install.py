"""A plan installed on a model in place, and taken off again.

:func:`install` replaces the forward of each module the plan checkpoints (an attribute of
the instance, so ``state_dict()`` keys and parameters do not change) by
``torch.utils.checkpoint.checkpoint(forward, use_reentrant=False, preserve_rng_state=True,
context_fn=...)`` with the plan's per-op policy (:mod:`budget.eager.policy`). The replaced
forward runs the original one unchanged when gradients are off (``torch.no_grad()``
evaluation) or when the module is not in the training mode it was planned in. A module
whose forward a step runs several times (a layer shared across depth) has a choice per
call: the replaced forward counts its calls with gradients on, in the step's order, from
the model's own forward where the step runs that once and makes every such call inside it
(else round the plan's calls, from the first again after the last). A plan that
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
_RESTART = "_budget_eager_restart"  # attribute of the model: the hook restarting call counts


@dataclass
class _Installed:
    """What apply changed on one module, to undo it."""

    had_forward: bool  # the instance had its own ``forward`` attribute before
    original: Callable[..., Any]
    policy: RegionPolicy | OffloadHooks | _Calls


class _Calls:
    """The policies of a module run several times a step, one per call (None: that call
    is not checkpointed), and the next call's number."""

    def __init__(self, choices: list[RegionChoice]) -> None:
        self.policies = [RegionPolicy(c) if c.checkpoint else None for c in choices]
        self.context_fns = [_context_fn(p) if p else None for p in self.policies]
        self.next = 0

    def take(self) -> Callable[[], tuple[Any, Any]] | None:
        """The next call's ``context_fn`` (None: run it unchanged)."""
        fn = self.context_fns[self.next]
        self.next = (self.next + 1) % len(self.context_fns)
        return fn


def _context_fn(policy: RegionPolicy) -> Callable[[], tuple[Any, Any]]:
    def context_fn() -> tuple[Any, Any]:  # a plain function: dynamo drops bound methods' self
        return policy.context_fn()

    return context_fn


def install(model: nn.Module, plan: EagerPlan) -> None:
    """Checkpoint the modules ``plan`` checkpoints, with its per-op policies."""
    named = dict(model.named_modules())
    calls: dict[str, list[RegionChoice]] = {}
    for r in sorted(plan.regions, key=lambda r: r.call):
        calls.setdefault(r.module, []).append(r)
    chosen = {m: c for m, c in calls.items() if any(r.checkpoint for r in c)}
    for module, choices in chosen.items():
        if [c.call for c in choices] != list(range(len(choices))):
            got = [c.call for c in choices]
            raise ValueError(f"the plan's regions of {module!r} are calls {got}, not 0 to n-1")
    missing = [m for m in chosen if m not in named]
    if missing:
        raise ValueError(
            f"the plan checkpoints {', '.join(map(repr, missing))}, which "
            f"{type(model).__name__} does not have: it was made for another model"
        )
    try:
        counted = []
        for module, choices in chosen.items():
            counted += _wrap(named[module], choices, model.training)
        if counted and plan.counted_from_model:  # each run of the model starts a step
            _count_from(model, counted)
        if any(s.offload for s in plan.saves):
            _offload(model, OffloadHooks(plan.saves), model.training)
    except BaseException:
        unapply(model)
        raise
    object.__setattr__(model, _PLAN, plan)


def _wrap(module: nn.Module, choices: list[RegionChoice], training: bool) -> list[_Calls]:
    """Checkpoint ``module``'s calls as ``choices`` say (one per call a step makes); the
    counter of its calls where there are several."""
    had = "forward" in module.__dict__
    original = module.forward
    state = RegionPolicy(choices[0]) if len(choices) == 1 else _Calls(choices)
    context_fn = _context_fn(state) if isinstance(state, RegionPolicy) else None

    def forward(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled() or module.training != training:
            return original(*args, **kwargs)
        fn = state.take() if isinstance(state, _Calls) else context_fn
        if fn is None:
            return original(*args, **kwargs)
        return checkpoint(
            original,
            *args,
            use_reentrant=False,
            preserve_rng_state=True,
            context_fn=fn,
            **kwargs,
        )

    object.__setattr__(module, "forward", forward)
    object.__setattr__(module, _STATE, _Installed(had, original, state))
    return [state] if isinstance(state, _Calls) else []


def _count_from(model: nn.Module, counted: list[_Calls]) -> None:
    """Each run of ``model``'s forward starts a step: its modules' calls counted afresh
    (a step that raised half-way leaves no count behind)."""

    def restart(_model: nn.Module, _args: Any) -> None:
        if torch.is_grad_enabled():
            for calls in counted:
                calls.next = 0

    handle = model.register_forward_pre_hook(restart)
    object.__setattr__(model, _RESTART, handle)


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
    handle = model.__dict__.pop(_RESTART, None)
    if handle is not None:
        handle.remove()
        changed = True
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
