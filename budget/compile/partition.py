"""The partitioner: joint graph -> (forward graph, backward graph) following a Plan.

Mirrors ``torch._functorch.partitioners.min_cut_rematerialization_partition`` step by step
(same preprocessing, same classification, same extraction), replacing only the choice of
saved values with budget's plan. The backward recomputes exactly the forward values the
plan does not save, from what it saves and the graph inputs.

The plan is solved for the graph at hand, or, when the backend was given saved plans
(``budget.backend(plan="plan.json")``), taken from the plan made for this graph (matched
by graph hash and checked node by node, :mod:`budget.core.plan_files`); never both.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
import torch.fx as fx

from ..core.plan import Plan
from ..core.plan_files import saved_indices
from ..core.problem import Problem
from ..core.settings import PlanLog, PlanSettings
from ..core.sizes import format_bytes
from ..errors import SolverTimeout
from ..planning.planner import plan_like, solve_problem, solve_sweep
from ..runtime import _torch_private as T
from ..runtime.collector import gc_paused
from ..runtime.frames import on_fresh_stack
from . import offload, ranks
from .dynamo_graph import tokens_ahead
from .graph import build_problem, estimator_for, graph_hash
from .layout import copied_inputs_bound
from .peak_plan import plan_for_peak
from .rng_states import rng_states_bound
from .split import Partitions, b1_saved_set
from .tie_break import tie_break
from .torch_plan import torch_plan

_log = logging.getLogger(__name__)


def prepare_joint(joint_module: fx.GraphModule) -> fx.GraphModule:
    """torch's preprocessing of a joint graph before it chooses what to save."""
    joint_module.graph.eliminate_dead_code()
    joint_module.recompile()
    if T.functorch_config.cse:
        joint_module.graph = T.fx_graph_cse(joint_module.graph)
    if T.has_recomputable_ops(joint_module):
        joint_module = T.cleanup_recompute_tags(joint_module, is_default_partition=False)
    if not T.functorch_config.unsafe_allow_optimization_of_collectives:
        T.force_save_collectives(joint_module)
    T.force_save_effectful_ops(joint_module)
    T.force_save_bw_mutation_src(joint_module)
    return joint_module


def _charge_fixed(problem: Problem, graph: fx.Graph, node_info: T.NodeInfo, compiler: str) -> None:
    """Charge ``problem`` the bounds of what every plan saves outside its decisions: the
    layout copies and the generator states (partitioning replaces each with its own)."""
    problem.rng_state_bytes = rng_states_bound(graph, node_info)
    problem.fixed_bytes = copied_inputs_bound(graph, node_info, compiler) + problem.rng_state_bytes


def _set_dist_from_bw(graph: fx.Graph, node_info: T.NodeInfo) -> None:
    # torch's min-cut reads node.dist_from_bw; computed exactly as torch does.
    for node in reversed(graph.nodes):
        if node.op == "output" or node_info.is_required_fw(node):
            node.dist_from_bw = int(1e9)
            if node.op != "output":
                for user in node.users:
                    node.dist_from_bw = min(node.dist_from_bw, user.dist_from_bw + 1)
        else:
            node.dist_from_bw = 0


def budget_partition(
    joint_module: fx.GraphModule,
    joint_inputs: Sequence[Any],
    *,
    num_fwd_outputs: int,
    settings: PlanSettings,
    log: PlanLog,
    static_lifetime_input_indices: list[int] | None = None,
    outputs_held: bool = True,
    held_inputs: frozenset[int] = frozenset(),
    **_: Any,
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """torch's partitioner signature; plans (or applies a saved plan) and partitions,
    writing what it made to ``log``. ``outputs_held``: the caller holds the forward's
    outputs through the backward (not where the graph ends at a graph break:
    :func:`budget.compile.peak.predict_peak`); ``held_inputs``: the inputs (by index) the
    user holds anyway, which the backward does not keep (``Plan.kept_input_bytes``)."""
    with gc_paused():
        try:
            # the frames of torch.compile under this call leave planning at a depth where
            # CPython 3.11-3.12 can unmap and map a stack chunk per call
            # (budget/runtime/frames.py)
            return on_fresh_stack(
                _partition,
                joint_module,
                joint_inputs,
                num_fwd_outputs,
                settings,
                log,
                static_lifetime_input_indices,
                outputs_held,
                held_inputs,
            )
        except SolverTimeout as e:  # the solver cannot know where the limit was set
            raise SolverTimeout(
                f"{e} (now {settings.time_limit:g} s: time_limit= of budget.backend and "
                "budget.plan, or budget.config.time_limit)"
            ) from None


def _partition(
    joint_module: fx.GraphModule,
    joint_inputs: Sequence[Any],
    num_fwd_outputs: int,
    settings: PlanSettings,
    log: PlanLog,
    static_lifetime_input_indices: list[int] | None,
    outputs_held: bool,
    held_inputs: frozenset[int],
) -> tuple[fx.GraphModule, fx.GraphModule]:
    t0 = time.perf_counter()
    joint_module = prepare_joint(joint_module)
    graph = joint_module.graph
    # dynamo's input indices (torch's static ones too) as the joint graph's: past its tokens
    ahead = tokens_ahead(graph)
    static_lifetime_input_indices = [i + ahead for i in static_lifetime_input_indices or []]
    held_inputs = frozenset(i + ahead for i in held_inputs)
    node_info = T.classify_nodes(joint_module, static_lifetime_input_indices, num_fwd_outputs)
    if len(node_info.required_bw_nodes) == 0:
        return T.default_partition(
            joint_module,
            joint_inputs,
            num_fwd_outputs=num_fwd_outputs,
            static_lifetime_input_indices=static_lifetime_input_indices,
            static_lifetime_input_nodes=node_info.static_lifetime_input_nodes,
        )
    _set_dist_from_bw(graph, node_info)
    if settings.book is not None:
        return _apply_saved_plan(
            joint_module,
            node_info,
            num_fwd_outputs,
            settings,
            log,
            t0,
            static_lifetime_input_indices,
            outputs_held,
            held_inputs,
        )
    min_cuts: dict = {}  # solved once per graph (Partitions.min_cuts): b=1's min-cut here
    reference = b1_saved_set(graph, node_info, min_cuts)
    t1 = time.perf_counter()
    estimator = estimator_for(settings.estimator, settings.compiler)
    problem, nodes = build_problem(graph, node_info, estimator, reference)
    _charge_fixed(problem, graph, node_info, settings.compiler)
    if settings.offload:
        forward = node_info.required_fw_nodes
        terms = offload.terms_for(problem, nodes, num_fwd_outputs, settings.estimator, forward)
        problem = replace(problem, offload=terms)
    t2 = time.perf_counter()
    log.problems.append(problem)
    timings = {"classify": t1 - t0, "estimate": t2 - t1}
    partitions = Partitions(
        joint_module,
        nodes,
        node_info,
        num_fwd_outputs,
        settings,
        static_lifetime_input_indices or [],
        reference,
        outputs_held,
        min_cuts,
        held_inputs,
        _partitioned_progress(log, settings),
        log.predictions,
        problem.graph_hash,
        offload.timing(estimator, nodes, settings.estimator),
    )
    rank, size = ranks.world()
    if size > 1:  # one plan on every rank: rank 0's
        ranks.agree_on_graph(problem.graph_hash)
        if rank != 0:
            made = ranks.share_plan(None)
            plan = _remake(problem, made, settings.estimator, "rank 0's plan", timings, t2)
            return _finish(partitions, plan, log)
    try:
        plan = _solve(partitions, problem, settings, log, timings)
    except Exception as e:
        if size > 1:  # the other ranks are waiting for this plan
            ranks.share_plan(e)
        raise
    if size > 1:
        ranks.share_plan(plan)
    return _finish(partitions, plan, log)


def _vs_torch(partitions: Partitions, problem: Problem, plan: Plan) -> Plan:
    """``plan`` with torch's plan at its fraction beside it, where a preview asks
    (``PlanSettings.vs_torch``: :mod:`budget.compile.torch_plan`)."""
    if not partitions.settings.vs_torch:
        return plan
    return replace(plan, torch_plan=torch_plan(partitions, problem, plan))


def _partitioned_progress(log: PlanLog, settings: PlanSettings) -> Callable[[int], None] | None:
    """Each plan a peak search partitions, told to ``log.progress`` as it goes, with no
    total: how many it tries depends on what fits."""
    progress = log.plan_progress()
    if progress is None or settings.peak_bytes is None or settings.sweep:
        return None
    return lambda done: progress(done, None)


def _solve(
    partitions: Partitions,
    problem: Problem,
    settings: PlanSettings,
    log: PlanLog,
    timings: dict[str, float],
) -> Plan:
    """The plan for this graph: a sweep's first (previews), the peak budget's choice, or
    the memory budget's optimum."""
    if settings.sweep:
        sweep = solve_sweep(
            problem,
            list(settings.sweep),
            solver=settings.solver,
            estimator=settings.estimator,
            time_limit=settings.time_limit,
            timings=timings,
            progress=log.sweep_progress(),
        )
        # each with the tie-break a single budget gets, so a sweep's row is that plan
        sweep = [_vs_torch(partitions, problem, tie_break(partitions, problem, p)) for p in sweep]
        # the first is applied (and predicted) by _finish, which puts it in place here
        log.sweeps.append([sweep[0], *(partitions.predicted(p) for p in sweep[1:])])
        return sweep[0]
    progress = log.plan_progress()
    if progress is not None:
        progress(0, 1)
    if settings.peak_bytes is not None:
        goal = settings.graphs_peak_bytes
        _log.info(
            "graph %s: searching the plans predicted to peak under %s",
            problem.graph_hash[:8],
            "the lowest peak" if not goal else format_bytes(goal),
        )
        plan = plan_for_peak(partitions, problem, settings, timings)
    else:
        plan = solve_problem(
            problem,
            settings.budget,
            solver=settings.solver,
            estimator=settings.estimator,
            time_limit=settings.time_limit,
            timings=timings,
        )
        plan = _vs_torch(partitions, problem, tie_break(partitions, problem, plan))
    partitions.on_partitioned = None  # the search is over: what follows is not told
    if progress is not None:
        progress(1, 1)
    return plan


def _remake(
    problem: Problem,
    made: Plan,
    estimator: str,
    source: str,
    timings: dict[str, float],
    start: float,
) -> Plan:
    """``made`` (a plan file's, or rank 0's) as this graph's plan: checked node by node
    against ``problem`` and priced by it, keeping the budget, ends, status, solver and
    peak budget it was made with."""
    saved = saved_indices(problem, made, source)
    index = {name: i for i, name in enumerate(problem.names)}
    timings = {**timings, "apply": time.perf_counter() - start}
    plan = plan_like(
        problem,
        saved,
        made,
        offloaded=[index[name] for name in made.offloaded],
        status=made.status,
        gap=made.gap,
        estimator=estimator,
        timings=timings,
    )
    offload_cost = plan.offload_cost if problem.offload is not None else made.offload_cost
    return replace(plan, peak_target_bytes=made.peak_target_bytes, offload_cost=offload_cost)


def _apply_saved_plan(
    joint_module: fx.GraphModule,
    node_info: T.NodeInfo,
    num_fwd_outputs: int,
    settings: PlanSettings,
    log: PlanLog,
    t0: float,
    static_lifetime_input_indices: list[int] | None,
    outputs_held: bool,
    held_inputs: frozenset[int],
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Partition by the saved plan made for this graph (no solve, no torch min-cut)."""
    assert settings.book is not None
    saved_plan = settings.book.for_graph(
        graph_hash(joint_module.graph), settings.compiler, torch.__version__
    )
    # Price with the plan's own estimator when it is known, so the plan reads the same.
    try:
        estimator = estimator_for(saved_plan.estimator, settings.compiler)
    except ValueError:
        estimator = estimator_for(settings.estimator, settings.compiler)
    t1 = time.perf_counter()
    problem, nodes = build_problem(joint_module.graph, node_info, estimator)
    _charge_fixed(problem, joint_module.graph, node_info, settings.compiler)
    t2 = time.perf_counter()
    log.problems.append(problem)
    timings = {"classify": t1 - t0, "estimate": t2 - t1}
    spec = getattr(estimator, "spec", estimator.name)
    plan = _remake(problem, saved_plan, spec, settings.book.source, timings, t2)
    partitions = Partitions(
        joint_module,
        nodes,
        node_info,
        num_fwd_outputs,
        settings,
        static_lifetime_input_indices or [],
        outputs_held=outputs_held,
        held_inputs=held_inputs,
        offload_timing=offload.timing(estimator, nodes, spec),
    )
    return _finish(partitions, plan, log)


def _finish(
    partitions: Partitions, plan: Plan, log: PlanLog
) -> tuple[fx.GraphModule, fx.GraphModule]:
    t3 = time.perf_counter()
    fw, bw, told = partitions.graphs(plan)
    done = replace(told, timings={**told.timings, "partition": time.perf_counter() - t3})
    if log.sweeps and log.sweeps[-1] and log.sweeps[-1][0] is plan:
        log.sweeps[-1][0] = done
    log.add_plan(done)
    return fw, bw
