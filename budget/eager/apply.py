"""``budget.apply`` / ``budget.unapply``: a plan turned into eager selective checkpointing.

``apply(model, *example_inputs, memory_budget=...)`` traces one training step on fake
tensors (:mod:`budget.eager.trace`: nothing computed, no buffer changes), plans it with the
configured solver and estimator (:mod:`budget.eager.planner`) and checkpoints, in place,
the modules the plan chooses: each chosen module's forward is replaced (an attribute of the
instance, so ``state_dict()`` keys and parameters do not change) by
``torch.utils.checkpoint.checkpoint(forward, use_reentrant=False, preserve_rng_state=True,
context_fn=...)`` with the plan's per-op policy (:mod:`budget.eager.policy`). The replaced
forward runs the original one unchanged when gradients are off (``torch.no_grad()``
evaluation) or when the module is not in the training mode it was planned in. A plan
that offloads (``offload=True``) also runs the model's forward under its saved-tensor
hooks (:mod:`budget.eager.hooks`), outside the checkpointing, as ``offload_wrapper``
around ``checkpoint_wrapper``. ``unapply(model)`` puts every original forward back; applying again re-plans from the
original model (what was applied is undone first).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..core.settings import PlanSettings
from ..errors import OffloadError, PreviewError
from ..planning.options import resolve_settings
from ..runtime import _torch_private as T
from .hooks import OffloadHooks
from .peak import EagerPeak, simulate
from .plan import EagerPlan, RegionChoice
from .planner import plan_predicted, plan_trace
from .policy import RegionPolicy
from .regions import ModuleSpec, excluded, noted, select_candidates
from .step import step_of
from .trace import trace_step
from .traced import Trace

_STATE = "_budget_eager"  # attribute of a checkpointed module: what apply replaced
_PLAN = "_budget_eager_plan"  # attribute of the model: the plan applied
_OFFLOAD = "_budget_eager_offload"  # attribute of the model: its offload hooks


@dataclass
class _Installed:
    """What apply changed on one module, to undo it."""

    had_forward: bool  # the instance had its own ``forward`` attribute before
    original: Callable[..., Any]
    policy: RegionPolicy | OffloadHooks


def plan(
    model: nn.Module,
    *example_inputs: Any,
    memory_budget: float | str | None = None,
    peak_memory_budget: str | None = None,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    step: Callable[..., Any] | None = None,
    modules: Sequence[ModuleSpec] | ModuleSpec | None = None,
    solver: str | None = None,
    estimator: str | None = None,
    time_limit: float | None = None,
    peak_search: str | None = None,
    offload: bool | None = None,
    progress: Callable[[int, int, int | None], None] | None = None,
    **example_kwargs: Any,
) -> EagerPlan:
    """The eager plan for ``model``'s training step, without applying it.

    The step is ``loss_fn(model(*example_inputs, **example_kwargs))`` (default loss: the
    output itself when it is a scalar, else its ``loss``, as Hugging Face models return it
    when given labels), or ``step(*example_inputs, **example_kwargs)`` when given (a
    function that runs ``model`` and returns the loss). Every plan carries its predicted
    peak (``peak_bytes``, ``timeline``: :mod:`budget.eager.peak`).

    ``progress(0, done, total)``, the compiled path's callback for the one step: 0 of 1
    once the step is traced, then ``(0, k, None)`` as the k-th plan's peak is predicted (a
    fake run of the step each: a peak search's plans, or the peak tie-break's; how many
    depends on what fits), then 1 of 1; nothing is printed.
    """
    _check_model(model)
    settings = resolve_settings(
        memory_budget=memory_budget,
        peak_memory_budget=peak_memory_budget,
        solver=solver,
        estimator=estimator,
        time_limit=time_limit,
        peak_search=peak_search,
        offload=offload,
    )
    if settings.peak_bytes is not None and peak_search == "exact":
        raise ValueError(
            "peak_search='exact' searches the liveness bound of a compiled joint graph "
            "(budget.backend, budget.plan); budget.apply searches a grid of eager plans "
            "(budget.config.peak_search applies to the compiled path only)"
        )
    candidates = select_candidates(model, modules, offload=settings.offload)
    run = step_of(model, loss_fn, step)
    trace = trace_step(model, run, example_inputs, example_kwargs, candidates)
    _check_trace(trace)
    left_out = excluded(trace, given=modules is not None)
    tell = progress or (lambda graph, done, total: None)
    tell(0, 0, 1)
    predicted = [0]

    def predict(p: EagerPlan) -> EagerPlan:
        """``p`` with the peak of the step it makes (run on fake tensors)."""
        install(model, p)
        named = dict(model.named_modules())
        once = [r for r, t in zip(p.regions, trace.regions, strict=True) if t.calls == 1]
        marks = [named[r.module] for r in once]
        try:
            found = _simulate(model, run, example_inputs, example_kwargs, trace, settings, p, marks)
        finally:
            unapply(model)
        at = dict(zip((r.module for r in once), found.backward_at, strict=True))
        regions = [replace(r, backward_at=at.get(r.module)) for r in p.regions]
        predicted[0] += 1
        tell(0, predicted[0], None)
        return replace(p, peak_bytes=found.peak_bytes, timeline=found.timeline, regions=regions)

    opts = {
        "solver": settings.solver,
        "estimator": settings.estimator,
        "time_limit": settings.time_limit,
        "offload": settings.offload,
    }
    peak = settings.peak_bytes
    try:
        made = plan_predicted(trace, settings.budget, peak, predict, excluded=left_out, **opts)  # type: ignore[arg-type]
    except PreviewError:
        if peak is not None:
            raise  # a peak budget needs the peak
        # the plan stands; its peak is unknown
        made = plan_trace(trace, settings.budget, excluded=left_out, **opts)  # type: ignore[arg-type]
    tell(0, 1, 1)
    return noted(made, trace)


def _check_model(model: nn.Module) -> None:
    """A model budget.apply can plan: a module with no plan applied, and (a transformers
    model training with ``config.use_cache`` updates its key-value cache in every layer)
    no cache a checkpointed layer would update again when it is recomputed."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"budget.apply takes an nn.Module; got {type(model).__name__}")
    if getattr(model, _PLAN, None) is not None:
        raise ValueError(
            "this model has a plan applied: budget.unapply(model) first, or call "
            "budget.apply(model, ...) again (it re-plans from the original model)"
        )
    compiled = [  # (nothing is compiled before torch.compile loads dynamo)
        name or type(model).__name__
        for name, m in model.named_modules()
        if "torch._dynamo" in sys.modules
        and (isinstance(m, T.OptimizedModule) or getattr(m, "_compiled_call_impl", None))
    ]
    if compiled:
        raise ValueError(
            f"budget.apply plans eager steps, and {compiled[0]} is compiled (torch.compile "
            "or .compile()): tracing it would leave dynamo running it eagerly from then on. "
            "Give torch.compile budget's backend instead: torch.compile(model, "
            "backend=budget.backend(memory_budget=...)), or apply to the uncompiled model"
        )
    config = getattr(model, "config", None)
    if model.training and getattr(config, "use_cache", False) is True:
        raise ValueError(
            f"{type(model).__name__} has config.use_cache=True: its layers update a "
            "key-value cache, which a checkpointed layer would update again when it is "
            "recomputed. Set model.config.use_cache = False for training (transformers "
            "does the same under gradient checkpointing)"
        )


def _check_trace(trace: Trace) -> None:
    if not any(
        v.meta["val"].requires_grad
        for v in trace.inputs
        if isinstance(v.meta.get("val"), torch.Tensor)
    ):
        raise ValueError(
            "nothing in the step requires grad: budget.apply plans a training step "
            "(parameters with requires_grad=True)"
        )


def _simulate(
    model: nn.Module,
    run: Callable[..., Any],
    args: tuple,
    kwargs: dict[str, Any],
    trace: Trace,
    settings: PlanSettings,
    plan: EagerPlan,
    marks: list[nn.Module] | None = None,
) -> EagerPeak:
    """The peak of the step as ``model`` is now, ``plan`` applied
    (:func:`budget.eager.peak.simulate`)."""
    try:
        return simulate(
            model,
            run,
            args,
            kwargs,
            trace,
            measure_workspace=settings.measure_workspace,
            marks=marks,
            regions=plan.regions,
        )
    except (T.DataDependentOutputException, T.DynamicOutputShapeException) as e:
        raise PreviewError(
            "cannot predict this step's peak: run with the plan applied, the step read a "
            "tensor's value in Python, or made a tensor whose size depends on values, "
            f"where the trace read none of that op ({e}), so the fake run has no value to "
            "give it; plan without a peak budget, or leave that module out (modules=)"
        ) from e


_make_plan = plan


def apply(
    model: nn.Module,
    *example_inputs: Any,
    memory_budget: float | str | None = None,
    peak_memory_budget: str | None = None,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    step: Callable[..., Any] | None = None,
    modules: Sequence[ModuleSpec] | ModuleSpec | None = None,
    solver: str | None = None,
    estimator: str | None = None,
    time_limit: float | None = None,
    peak_search: str | None = None,
    offload: bool | None = None,
    plan: EagerPlan | None = None,
    progress: Callable[[int, int, int | None], None] | None = None,
    **example_kwargs: Any,
) -> EagerPlan:
    """Plan ``model``'s training step and checkpoint it in place; returns the plan.

    ``memory_budget`` is a fraction in [0, 1] of the saved activation memory eager
    checkpointing can reach (1.0: nothing checkpointed; 0.0: the least memory with every
    candidate module checkpointed), or a size (``"512MiB"``); default
    ``budget.config.activation_memory_budget``. ``peak_memory_budget`` (a size; default
    ``budget.config.peak_memory_budget``): the plan with the least recompute, within the
    memory budget, whose predicted peak of the step (forward and backward, above the
    parameters, inputs and gradients) is at most that. ``modules``: the candidate modules
    (qualified names or classes; default: the blocks of the model's ModuleLists and
    Sequentials). ``plan``: apply this plan (made for this model) instead of planning.
    ``progress``: told as planning goes (:func:`plan`). A model that has a plan applied
    is restored first (:func:`unapply`).
    """
    if plan is not None and example_inputs:
        raise ValueError("pass example inputs to plan, or plan= to apply a plan, not both")
    if plan is not None:  # the plan-or-budget check
        resolve_settings(
            memory_budget=memory_budget, peak_memory_budget=peak_memory_budget, plan=plan
        )
    unapply(model)
    if plan is None:
        plan = _make_plan(
            model,
            *example_inputs,
            memory_budget=memory_budget,
            peak_memory_budget=peak_memory_budget,
            loss_fn=loss_fn,
            step=step,
            modules=modules,
            solver=solver,
            estimator=estimator,
            time_limit=time_limit,
            peak_search=peak_search,
            offload=offload,
            progress=progress,
            **example_kwargs,
        )
    install(model, plan)
    return plan


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
