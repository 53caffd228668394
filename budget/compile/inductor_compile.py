"""One graph compiled with Inductor: its attempts, torch's compile caches, its code's peak.

:func:`compile_within_peak` is what :class:`budget.compile.backend.BudgetBackend` does
with a graph under Inductor (previews aside, but compiled ones: ``GraphJob.code_only``): it
compiles one attempt after another (:mod:`budget.compile.peak_check`) until a plan's code
holds the budget, each plan once (:mod:`budget.compile.attempts`), and keeps one. :func:`compile_cached` is one attempt:
Inductor's compile with budget's partitioner, through torch's FX graph and AOTAutograd
caches and budget's plan cache (:mod:`budget.compile.plan_cache`), reading the peak of
the code it generates (:mod:`budget.compile.compiled_peak`).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import torch

from ..core.plan import Plan
from ..core.plan_files import PlanBook
from ..core.settings import PlanLog, PlanSettings
from . import kernels, plan_cache, ranks
from .attempts import Attempt, CompiledBefore, compiling_once, stop_if_compiled
from .compiled_peak import CodeCapture
from .fusion import fusion_within
from .inductor_hooks import InductorPartitioner
from .layout import backward_keeps_layouts
from .peak_check import fit_compiled_peak, hold_b1_peak
from .reuse import neutral_reuse


class GraphJob(NamedTuple):
    """One graph to compile: dynamo's graph and inputs, the settings it is planned with
    (the backend's, or its share of the step's peak budget), whether the caller holds
    its outputs through the backward (not past a graph break: budget.compile.peak), and
    which of its inputs the user holds anyway."""

    gm: torch.fx.GraphModule
    example_inputs: Sequence[Any]
    settings: PlanSettings
    outputs_held: bool
    held_inputs: frozenset[int]  # its inputs the user holds (dynamo_graph.held_inputs)
    # a preview (budget.plans(..., compile=True)): each attempt's code is generated and
    # read, its kernels never built; the graphs run as they are (on fake tensors)
    code_only: bool = False


@dataclass
class _Planning:
    """What one attempt's partitioner plans for: its settings and its own log."""

    settings: PlanSettings
    log: PlanLog


def compile_within_peak(log: PlanLog, job: GraphJob) -> Any:
    """Compile with Inductor; the plan carries its code's peak (``compiled_peak``), which
    holds a peak budget (``peak_check.fit_compiled_peak``: planned and compiled again) and,
    under a memory budget alone, b=1's code peak (``peak_check.hold_b1_peak``). Each attempt
    plans into a log of its own, sharing ``PlanLog.predictions``; the kept attempt's plans
    go to ``log`` (``backend.plans``, ``on_plan``). A plan compiled before is not compiled
    again (``attempts``). Only the kept attempt's kernels are built, none for a compiled
    preview (``code_only``). ``log.progress`` hears of the graph as its first attempt
    starts (0 of 1) and once one is kept (1 of 1); in between, of every plan a peak
    search partitions, counted over all the attempts (no total)."""
    progress = log.plan_progress()
    if progress is not None:
        progress(0, 1)
    once = attempts_of(job, progress)
    kept = hold_b1_peak(job.settings, once, fit_compiled_peak(job.settings, once))
    if not job.code_only:
        kernels.build(kept.unbuilt)
    log.problems.extend(kept.log.problems)
    for plan in kept.log.plans:
        log.add_plan(plan)
    if progress is not None:
        progress(1, 1)
    return kept.compiled


def attempts_of(
    job: GraphJob, progress: Callable[[int, int | None], None] | None = None
) -> Callable[[PlanSettings], Attempt]:
    """A compile of ``job``'s graph for other settings, one attempt each, that compiles
    each plan once (``attempts``); the attempts share what partitioning told
    (``PlanLog.predictions``), and tell ``progress(done, None)`` of each plan their peak
    searches partition (``done``: how many in all the attempts so far)."""
    predictions: dict[tuple, Any] = {}
    searched = _SearchCount(progress)

    def compile_fresh(settings: PlanSettings, compiling: Callable[..., None]) -> Attempt:
        told = searched.attempt()
        log = PlanLog(predictions=predictions, compiling=compiling, progress=told)
        planning = _Planning(settings, log)
        partitioner = InductorPartitioner(planning, job.outputs_held, held_inputs=job.held_inputs)
        with kernels.deferred() as unbuilt:  # built for the attempt kept only
            compiled = compile_cached(partitioner, job.gm, job.example_inputs, job.code_only)
        return Attempt(compiled, planning.log, unbuilt)

    return compiling_once(compile_fresh)


@dataclass
class _SearchCount:
    """The plans a graph's peak searches partitioned, over all its attempts (each attempt's
    search counts from 1 again), told to ``progress`` as ``(done, None)``. The graph's start
    and end (0 and 1 of 1) are told once, by :func:`compile_within_peak`, not per attempt."""

    progress: Callable[[int, int | None], None] | None
    done: int = 0

    def attempt(self) -> Callable[[int, int, int | None], None] | None:
        """An attempt's ``PlanLog.progress``."""
        if self.progress is None:
            return None
        report, before = self.progress, self.done

        def told(_graph: int, done: int, total: int | None) -> None:
            if total is None:  # a plan partitioned (the attempt's log has one graph)
                self.done = before + done
                report(self.done, None)

        return told


def compile_cached(
    partitioner: InductorPartitioner,
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    code_only: bool = False,
) -> Any:
    """Compile with torch's FX graph and AOTAutograd caches (as configured; their keys
    hold the partitioner's uuid), the plans of an AOTAutograd hit read from the plan cache.

    AOTAutograd's cache skips the partitioner, so it is used only where the plans it
    skips can be had: with the plan cache on. On several ranks the partitioner's
    collectives pair up only if every rank runs it, so the ranks first agree (one
    collective) on whether each holds the same cached plans for this graph: if so, torch's
    cache is on and a rank that misses it applies the cached plans, with no collective; if
    not, they plan together with torch's cache off, and cache the plans for the next start.
    The FX graph cache stays on in every case: it caches code generated from the
    partitioned graphs, after planning. An attempt stopped as a plan compiled before
    (``attempts``) stores its plans too, and a cached plan compiled before stops the
    attempt before partitioning (every rank alike: after the ranks agree). A compiled
    preview (``code_only``) uses neither AOTAutograd's cache (a hit would hand it code to
    run on fake tensors) nor the plan cache (its keys would hold the fake inputs); the code
    it generates goes to the FX graph cache, where training finds it.
    """
    from ..runtime._torch_private import functorch_config

    log = partitioner.planning.log
    first = len(log.plans)
    compile_fx = _compile_reading_peak(partitioner, code_only)
    if code_only or not plan_cache.enabled():  # a preview's plans are keyed on fake inputs
        with functorch_config.patch(enable_autograd_cache=False):
            return compile_fx(gm, example_inputs)
    key = plan_cache.graph_key(gm, example_inputs, partitioner.uuid())
    cached = plan_cache.load(key)
    try:
        if ranks.world()[1] > 1:
            if not ranks.all_hold(plan_cache.plans_digest(cached)):  # plan together
                with functorch_config.patch(enable_autograd_cache=False):
                    compiled = compile_fx(gm, example_inputs)
                plan_cache.store(key, log.plans[first:])
                return compiled
            assert cached is not None
            partitioner.book = PlanBook(cached, "the plan cache")
        if cached is not None:
            stop_if_compiled(log, cached)  # no search, no compile: the attempt before's code
        return _compile_or_hit(compile_fx, key, cached, partitioner, gm, example_inputs)
    except CompiledBefore as e:
        if len(log.plans) > first and partitioner.calls:  # partitioned, then stopped: kept
            # with the peak of the code compiled before (its code), so that a later start
            # stops before partitioning, or on a hit of torch's cache knows its code's peak
            *made, stopped = log.plans[first:]
            assert e.attempt.plan is not None  # what it compiled, the same partition
            peak = e.attempt.plan.compiled_peak_bytes
            plan_cache.store(key, [*made, replace(stopped, compiled_peak_bytes=peak)])
        raise


def _compile_or_hit(
    compile_fx: Callable[..., Any],
    key: str,
    cached: list[Plan] | None,
    partitioner: InductorPartitioner,
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
) -> Any:
    """Compile through torch's AOTAutograd cache; on a hit the plans are the cached ones,
    or, where none are, made again (the FX graph cache holds the code)."""
    from ..runtime._torch_private import counters, functorch_config

    log = partitioner.planning.log
    first = len(log.plans)
    hits = counters["aot_autograd"]["autograd_cache_hit"]
    compiled = compile_fx(gm, example_inputs)
    hit = counters["aot_autograd"]["autograd_cache_hit"] > hits
    if partitioner.calls or not hit:  # planned here (or nothing to plan)
        plan_cache.store(key, log.plans[first:])
    elif cached is not None:  # torch skipped the partitioner: the plans it made before
        for plan in cached:
            log.add_plan(plan)
    else:  # torch hit, budget has no plans for it: plan and compile again, for the plans
        # and the peak of their code
        plan_cache.stats["replans"] += 1
        with functorch_config.patch(enable_autograd_cache=False):
            compiled = compile_fx(gm, example_inputs)
        plan_cache.store(key, log.plans[first:])
    return compiled


def _compile_reading_peak(
    partitioner: InductorPartitioner, code_only: bool = False
) -> Callable[..., Any]:
    """Inductor's ``compile_fx`` with budget's partitioner and settings, that records the
    peak of the code it generates on the plan it made (``compiled_peak_bytes``); with
    ``code_only`` the compiled graphs are the partitioned ones, run as they are."""
    from ..runtime._torch_private import compile_fx, functorch_config

    settings, log = partitioner.settings, partitioner.planning.log
    # Buffer reuse (PlanSettings.buffer_reuse): by default only where the step's peak stays
    # put (compile/reuse.py); a dead buffer kept for a later one can hold what a plan frees.
    reuse = settings.buffer_reuse
    patches = {"custom_partitioner_fn": partitioner, "allow_buffer_reuse": bool(reuse)}
    reusing = neutral_reuse if reuse == "neutral" else contextlib.nullcontext

    def compile_and_read_peak(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        first = len(log.plans)
        capture = CodeCapture()
        near = fusion_within(settings.fusion_distance)  # compile/fusion.py
        # the backward compiled now, not at the first backward: the compiled peak needs both
        with functorch_config.patch(force_non_lazy_backward_lowering=True), reusing(), near:
            inner = backward_keeps_layouts(reading_only(capture) if code_only else capture)
            compiled = compile_fx(gm, example_inputs, inner_compile=inner, config_patches=patches)
        if len(log.plans) == first + 1:
            peak = capture.peak(
                partitioner.num_fwd_outputs,
                outputs_held=partitioner.outputs_held,
                measure_workspace=settings.measure_workspace,
            )
            log.update(first, compiled_peak_bytes=peak)
        return compiled

    return compile_and_read_peak


def reading_only(inner_compile: Callable[..., Any]) -> Callable[..., Any]:
    """An Inductor ``inner_compile`` that has ``inner_compile`` generate a graph's code
    (to be read) and returns the graph as it was handed over, to run as it is."""
    from .inductor_hooks import run_uncompiled

    def compile_graph(
        gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any
    ) -> Any:
        runnable = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))  # Inductor edits gm
        inner_compile(gm, example_inputs, **kwargs)
        return run_uncompiled(runnable, example_inputs)

    return compile_graph
