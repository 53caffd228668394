"""``budget.apply``: an eager training step planned and checkpointed in place; its
previews, ``budget.eager.plan`` and ``budget.eager.sweep``.

``apply(model, *example_inputs, memory_budget=...)`` traces one training step on fake
tensors (:mod:`budget.eager.trace`: nothing computed, no buffer changes), plans it with the
configured solver and estimator (:mod:`budget.eager.planner`; which plan a budget gets:
:mod:`budget.eager.search`), predicts each plan's peak by running the step on fake tensors
with the plan installed (:mod:`budget.eager.peak`) and installs the plan it chose
(:mod:`budget.eager.install`): the chosen modules checkpointed with per-op policies,
offloaded saves under saved-tensor hooks. Applying again re-plans from the original model
(what was applied is undone first).
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from ..core.plan import TorchPlan
from ..core.report import plan_line
from ..core.settings import PlanSettings
from ..core.sizes import MemoryBudget, parse_budget
from ..errors import PreviewError
from ..estimators import get_estimator
from ..planning.options import resolve_settings
from ..runtime import _torch_private as T
from .install import applied_plan, install, unapply
from .peak import EagerPeak, simulate
from .plan import EagerPlan
from .planner import plan_key, plan_trace
from .problem import CostCache
from .regions import ModuleSpec, excluded, noted, select_candidates
from .search import plan_predicted
from .step import step_of
from .torch_plan import full_checkpointing
from .trace import trace_step
from .traced import Trace

_log = logging.getLogger(__name__)


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
    vs_torch: bool = False,
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
    depends on what fits), then 1 of 1; nothing is printed. ``vs_torch``: the plan carries
    torch's checkpointing of every module it may checkpoint, each whole (``torch_plan``:
    :mod:`budget.eager.torch_plan`), with its predicted peak (one fake run more, told too).
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
    settings = replace(settings, vs_torch=vs_torch)
    traced = _Traced(model, example_inputs, example_kwargs, loss_fn, step, modules, settings)
    tell = progress or (lambda graph, done, total: None)
    tell(0, 0, 1)
    traced.tell = tell
    made = traced.plan_at(settings.budget)
    tell(0, 1, 1)
    return made


def sweep(
    model: nn.Module,
    *example_inputs: Any,
    budgets: Sequence[float | str],
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    step: Callable[..., Any] | None = None,
    modules: Sequence[ModuleSpec] | ModuleSpec | None = None,
    solver: str | None = None,
    estimator: str | None = None,
    time_limit: float | None = None,
    offload: bool | None = None,
    progress: Callable[[int, int, int | None], None] | None = None,
    vs_torch: bool = False,
    **example_kwargs: Any,
) -> list[EagerPlan]:
    """The eager plans of ``model``'s training step at each of ``budgets`` (fractions or
    sizes), from one trace: each the plan :func:`plan` makes at that budget, peak
    tie-break and predicted peak included. The step is traced once, each set of
    checkpointed modules' problem built and priced once, each distinct plan's peak
    predicted once. ``progress(0, done, len(budgets))`` as each budget is planned; a peak
    budget (``budget.config.peak_memory_budget``) does not apply to sweeps. ``vs_torch``: as
    :func:`plan`, the same torch plan beside every budget's.
    """
    if isinstance(budgets, (str, float, int)) or not budgets:
        raise ValueError(
            "budgets must name at least one budget, a list of fractions in [0, 1] or sizes; "
            f"got {budgets!r}"
        )
    _check_model(model)
    parsed = [parse_budget(b) for b in budgets]
    settings = resolve_settings(
        memory_budget=budgets[0],
        solver=solver,
        estimator=estimator,
        time_limit=time_limit,
        offload=offload,
    )
    settings = replace(settings, peak_bytes=None, vs_torch=vs_torch)
    traced = _Traced(model, example_inputs, example_kwargs, loss_fn, step, modules, settings)
    tell = progress or (lambda graph, done, total: None)
    tell(0, 0, len(parsed))
    costs = CostCache(get_estimator(settings.estimator))
    made = []
    for i, b in enumerate(parsed):
        made.append(traced.plan_at(b, costs))
        tell(0, i + 1, len(parsed))
    return made


class _Traced:
    """The step traced once for ``settings``: the trace, the candidate modules left out
    (and why); the plan of a budget (:meth:`plan_at`) with its peak (:meth:`predict`: the
    step run on fake tensors with the plan installed, each distinct plan once, then
    ``tell(0, k, None)`` when set); with ``settings.vs_torch``, each plan carries torch's
    checkpointing of every module beside it, made (and its fake run) once."""

    def __init__(
        self,
        model: nn.Module,
        args: tuple,
        kwargs: dict[str, Any],
        loss_fn: Callable[[Any], torch.Tensor] | None,
        step: Callable[..., Any] | None,
        modules: Sequence[ModuleSpec] | ModuleSpec | None,
        settings: PlanSettings,
    ) -> None:
        self.model, self.args, self.kwargs, self.settings = model, args, kwargs, settings
        candidates = select_candidates(model, modules, offload=settings.offload)
        self.run = step_of(model, loss_fn, step)
        self.trace = trace_step(model, self.run, args, kwargs, candidates)
        _check_trace(self.trace)
        self.left_out = excluded(self.trace, given=modules is not None)
        self.tell: Callable[[int, int, int | None], None] | None = None
        self.found: dict[tuple, EagerPeak] = {}
        self._whole: list[TorchPlan | None] = []  # torch's plan (settings.vs_torch), once made

    def plan_at(self, budget: MemoryBudget, costs: CostCache | None = None) -> EagerPlan:
        """The plan at ``budget`` with its peak (:func:`plan_predicted`); where the peak
        cannot be predicted and no peak budget needs it, the plan without it."""
        settings, trace = self.settings, self.trace
        costs = CostCache(get_estimator(settings.estimator)) if costs is None else costs
        opts = {"solver": settings.solver, "estimator": settings.estimator}
        opts |= {"time_limit": settings.time_limit, "offload": settings.offload}
        opts |= {"excluded": self.left_out, "costs": costs}
        peak = settings.peak_bytes
        try:
            made = plan_predicted(trace, budget, peak, self.predict, **opts)  # type: ignore[arg-type]
        except PreviewError:
            if peak is not None:
                raise  # a peak budget needs the peak
            # the plan stands; its peak is unknown
            made = plan_trace(trace, budget, **opts)  # type: ignore[arg-type]
        if settings.vs_torch:
            if not self._whole:
                at = functools.partial(plan_trace, trace, **opts)
                whole = full_checkpointing(trace, costs, self.left_out, self.predict, at)
                self._whole.append(whole)
            made = replace(made, torch_plan=self._whole[0])
        return noted(made, trace)

    def predict(self, p: EagerPlan) -> EagerPlan:
        """``p`` with the peak of the step it makes."""
        key = plan_key(p)
        ran = [
            r
            for r, t in zip(p.regions, self.trace.regions, strict=True)
            if t.calls and not t.nested
        ]
        if key not in self.found:
            install(self.model, p)
            named = dict(self.model.named_modules())
            marks = [(named[r.module], r.call) for r in ran]
            try:
                self.found[key] = _simulate(
                    self.model,
                    self.run,
                    self.args,
                    self.kwargs,
                    self.trace,
                    self.settings,
                    p,
                    marks,
                )
            finally:
                unapply(self.model)
            if self.tell is not None:
                self.tell(0, len(self.found), None)
        found = self.found[key]
        at = dict(zip((r.key for r in ran), found.backward_at, strict=True))
        regions = [replace(r, backward_at=at.get(r.key)) for r in p.regions]
        return replace(p, peak_bytes=found.peak_bytes, timeline=found.timeline, regions=regions)


def _check_model(model: nn.Module) -> None:
    """A model budget.apply can plan: a module with no plan applied, and (a transformers
    model training with ``config.use_cache`` updates its key-value cache in every layer)
    no cache a checkpointed layer would update again when it is recomputed."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"budget.apply takes an nn.Module; got {type(model).__name__}")
    if applied_plan(model) is not None:
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
    if _log.isEnabledFor(logging.INFO):
        on = sum(r.checkpoint for r in plan.regions)
        _log.info(
            "applied to %s, checkpointing %d of %d candidate modules: %s",
            type(model).__name__,
            on,
            len(plan.regions),
            plan_line(plan),
        )
    return plan
