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

import contextlib
import gc
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from ..core.plan import Plan
from ..core.plan_files import saved_indices
from ..core.planner import (
    make_plan,
    solve_problem,
    solve_sweep,
)
from ..core.problem import Problem
from ..core.settings import PlanLog, PlanSettings
from ..core.sizes import parse_budget
from ..errors import SolverTimeout
from ..estimators import get_estimator
from . import _torch_private as T
from . import ranks
from .graph import build_problem, graph_hash, kept_inputs
from .layout import copied_inputs, copied_inputs_bound, has_convolution, runs_channels_last
from .peak import Memo, PeakPrediction, predict_peak
from .peak_plan import plan_for_peak
from .schedule import lower_peak, pin_order


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


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (and restore its state after).

    Planning allocates many small objects (fx nodes, sets, dicts) and frees few, which
    triggers full collections of the whole compiler heap at random points of a plan (a
    large share of planning time on deep models: bench/README.md). Nothing planning
    creates needs collecting early.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def b1_saved_set(graph: fx.Graph, node_info: T.NodeInfo) -> list[fx.Node]:
    """torch's saved set at memory budget 1 (its min-cut): the b=1 end of every plan."""
    with T.boykov_kolmogorov_cuts():
        return T.choose_saved_values_set(graph, node_info, memory_budget=1.0)


def budget_partition(
    joint_module: fx.GraphModule,
    joint_inputs: Sequence[Any],
    *,
    num_fwd_outputs: int,
    settings: PlanSettings,
    log: PlanLog,
    static_lifetime_input_indices: list[int] | None = None,
    **_: Any,
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """torch's partitioner signature; plans (or applies a saved plan) and partitions,
    writing what it made to ``log``."""
    with gc_paused():
        try:
            return _partition(
                joint_module,
                joint_inputs,
                num_fwd_outputs,
                settings,
                log,
                static_lifetime_input_indices,
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
) -> tuple[fx.GraphModule, fx.GraphModule]:
    t0 = time.perf_counter()
    joint_module = prepare_joint(joint_module)
    graph = joint_module.graph
    node_info = T.classify_nodes(joint_module, static_lifetime_input_indices or [], num_fwd_outputs)
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
        )
    reference = b1_saved_set(graph, node_info)
    t1 = time.perf_counter()
    problem, nodes = build_problem(graph, node_info, get_estimator(settings.estimator), reference)
    problem.fixed_bytes = copied_inputs_bound(graph, node_info, settings.compiler)
    t2 = time.perf_counter()
    log.problems.append(problem)
    timings = {"classify": t1 - t0, "estimate": t2 - t1}
    partitions = _Partitions(
        joint_module,
        nodes,
        node_info,
        num_fwd_outputs,
        settings,
        static_lifetime_input_indices or [],
        reference,
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


def _solve(
    partitions: _Partitions,
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
        for p in sweep[1:]:  # the first is applied (and predicted) by _finish
            partitions.graphs(p)
        log.sweeps.append(sweep)
        return sweep[0]
    if settings.peak_bytes is not None:
        return plan_for_peak(partitions, problem, settings, timings)
    return solve_problem(
        problem,
        settings.budget,
        solver=settings.solver,
        estimator=settings.estimator,
        time_limit=settings.time_limit,
        timings=timings,
    )


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
    plan = make_plan(
        problem,
        saved,
        budget=parse_budget(made.budget),
        target_bytes=made.target_bytes,
        min_bytes=made.min_bytes,
        max_bytes=made.max_bytes,
        status=made.status,
        gap=made.gap,
        solver=made.solver,
        estimator=estimator,
        timings={**timings, "apply": time.perf_counter() - start},
    )
    plan.peak_target_bytes = made.peak_target_bytes
    return plan


def _apply_saved_plan(
    joint_module: fx.GraphModule,
    node_info: T.NodeInfo,
    num_fwd_outputs: int,
    settings: PlanSettings,
    log: PlanLog,
    t0: float,
    static_lifetime_input_indices: list[int] | None,
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Partition by the saved plan made for this graph (no solve, no torch min-cut)."""
    assert settings.book is not None
    saved_plan = settings.book.for_graph(
        graph_hash(joint_module.graph), settings.compiler, torch.__version__
    )
    # Price with the plan's own estimator when it is known, so the plan reads the same.
    try:
        estimator = get_estimator(saved_plan.estimator)
    except ValueError:
        estimator = get_estimator(settings.estimator)
    t1 = time.perf_counter()
    problem, nodes = build_problem(joint_module.graph, node_info, estimator)
    problem.fixed_bytes = copied_inputs_bound(joint_module.graph, node_info, settings.compiler)
    t2 = time.perf_counter()
    log.problems.append(problem)
    timings = {"classify": t1 - t0, "estimate": t2 - t1}
    spec = getattr(estimator, "spec", estimator.name)
    plan = _remake(problem, saved_plan, spec, settings.book.source, timings, t2)
    partitions = _Partitions(
        joint_module,
        nodes,
        node_info,
        num_fwd_outputs,
        settings,
        static_lifetime_input_indices or [],
    )
    return _finish(partitions, plan, log)


def _finish(
    partitions: _Partitions, plan: Plan, log: PlanLog
) -> tuple[fx.GraphModule, fx.GraphModule]:
    t3 = time.perf_counter()
    fw, bw = partitions.graphs(plan)
    plan.timings["partition"] = time.perf_counter() - t3
    log.add_plan(plan)
    return fw, bw


class _Partitions:
    """The forward and backward graphs of the plans of one joint graph, each saved set
    partitioned once (sweeps and peak searches meet the same plan at several budgets),
    with the predicted peak and the layout copies written into every plan asked for.

    A plan whose predicted peak is above the b=1 plan's (``reference``: torch's choice at
    b=1, found here when not given) has its backward rescheduled to recompute values again
    rather than hold them (:mod:`budget.compile.schedule`): no plan peaks above b=1's for
    want of a schedule."""

    def __init__(
        self,
        joint_module: fx.GraphModule,
        nodes: list[fx.Node],
        node_info: T.NodeInfo,
        num_fwd_outputs: int,
        settings: PlanSettings,
        static_lifetime_input_indices: Sequence[int] = (),
        reference: Sequence[fx.Node] | None = None,
    ) -> None:
        self.joint_module, self.nodes, self.node_info = joint_module, nodes, node_info
        self.num_fwd_outputs, self.settings = num_fwd_outputs, settings
        self._made: dict[tuple[tuple[str, ...], int | None], _Made] = {}
        # parameters and buffers (dynamo's static inputs): resident, not the step's values
        self.static_inputs = {node_info.inputs[i].name for i in static_lifetime_input_indices}
        self._reference = reference
        self._reference_peak: int | None = None

    def _extract(self, saved_names: set[str], recomputed: frozenset[str]) -> _Made:
        saved = [n for n in self.nodes if n.name in saved_names]
        # the inputs are saved too, each once: torch's b=1 set names them already, and with
        # dynamic shapes an input handed over twice became two placeholders of one name
        # in the backward ("duplicate argument"), which fx refuses to build
        saved = list(dict.fromkeys([*saved, *self.node_info.inputs]))
        fw, bw = extract(self.joint_module, saved, self.node_info, self.num_fwd_outputs)
        copies = copied_inputs(fw, self.num_fwd_outputs, self.settings.compiler)
        kept = kept_inputs(fw, self.num_fwd_outputs, self.static_inputs)
        channels_last = runs_channels_last(fw, self.settings.compiler)

        memo = Memo()  # each node's storages, until its value is replaced

        def predict(backward: fx.GraphModule, names: frozenset[str]) -> PeakPrediction:
            return predict_peak(
                fw,
                backward,
                names,
                num_user_outputs=self.num_fwd_outputs,
                copied=frozenset(copies),
                channels_last=channels_last,
                memo=memo,
            )

        return _Made(fw, bw, predict(bw, recomputed), sum(copies.values()), kept, predict)

    def reference_peak(self) -> int:
        """The predicted peak of the b=1 plan (torch's saved set at b=1)."""
        if self._reference_peak is None:
            if self._reference is None:
                self._reference = b1_saved_set(self.joint_module.graph, self.node_info)
            names = {n.name for n in self._reference}
            made = self._extract(names, frozenset())
            self._reference_peak = made.prediction.peak_bytes
        return self._reference_peak

    def graphs(self, plan: Plan, limit: int | None = None) -> tuple[fx.GraphModule, fx.GraphModule]:
        """Partition by ``plan`` (once per saved set and limit), predict the step's peak
        into the plan, with the pipeline's provenance, and return the graphs. The backward
        recomputes values again while that lowers a predicted peak above ``limit``; by
        default the b=1 plan's peak, or the plan's peak budget where that is lower (so a
        plan chosen for a peak budget partitions the same again, from a file or a rank)."""
        plan.compiler, plan.torch_version = self.settings.compiler, torch.__version__
        recomputed = frozenset(plan.recomputed)
        goal = None
        if recomputed:
            goal = limit
            if goal is None:
                goal = self.reference_peak()
                if plan.peak_target_bytes is not None:
                    goal = min(goal, plan.peak_target_bytes)
        key = (tuple(plan.saved), goal)
        if key not in self._made:
            made = self._extract(set(plan.saved), recomputed)
            # Under Inductor a rescheduled convnet backward peaks well above its
            # prediction, even with its extra recomputations pinned (pin_order): on the
            # bench convnet 35.43 MiB compiled against 29.94 predicted. Such graphs are
            # rescheduled only for a peak budget, whose compiled peak is checked and
            # planned again where it misses (peak_check), not for a memory budget alone.
            checked = self.settings.peak_bytes is not None or plan.peak_target_bytes is not None
            blind = (
                self.settings.compiler == "inductor" and has_convolution(made.fw) and not checked
            )
            if goal is not None and made.prediction.peak_bytes > goal and not blind:
                lowered = lower_peak(
                    made.bw,
                    recomputed,
                    goal,
                    made.predict,
                    {d.name: d.cost for d in plan.decisions},
                    fw_steps=len(made.fw.graph.nodes),
                )
                if lowered is not None:
                    made.prediction, made.again = lowered.prediction, lowered.again
                    if self.settings.compiler == "inductor":
                        pin_order(made.bw, set(lowered.nodes))
            self._made[key] = made
        made = self._made[key]
        plan.peak_bytes, plan.timeline = made.prediction.peak_bytes, list(made.prediction.timeline)
        plan.reference_peak_bytes = self.reference_peak() if recomputed else None
        by_name = {d.name: d for d in plan.decisions}
        plan.recomputed_again = list(made.again)
        plan.again_cost = sum(by_name[n].cost for n in made.again if n in by_name)
        plan.again_flops = sum(by_name[n].flops for n in made.again if n in by_name)
        plan.kept_input_bytes = made.kept
        # the copies this forward makes, in place of the planner's bound (never above it)
        plan.saved_bytes += made.copied - plan.copied_input_bytes
        plan.copied_input_bytes = made.copied
        if plan.saved_bytes > plan.target_bytes and plan.status != "reference":
            raise RuntimeError(
                f"internal error: {plan.saved_bytes} bytes saved with layout copies, over "
                f"the target of {plan.target_bytes}"
            )
        return made.fw, made.bw


@dataclass
class _Made:
    """One saved set's graphs, their predicted peak, copies, kept inputs, and the extra
    recomputations of its rescheduled backward."""

    fw: fx.GraphModule
    bw: fx.GraphModule
    prediction: PeakPrediction
    copied: int
    kept: int
    predict: Callable[[fx.GraphModule, frozenset[str]], PeakPrediction]
    again: list[str] = field(default_factory=list)


def extract(
    joint_module: fx.GraphModule,
    saved: list[fx.Node],
    node_info: T.NodeInfo,
    num_fwd_outputs: int,
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Forward and backward modules for a saved set, with torch's post-processing."""
    sym = [n for n in saved if T.is_sym_node(n)]
    opaque = [n for n in saved if T.is_opaque_node(n)]
    values = [n for n in saved if not T.is_sym_node(n) and not T.is_opaque_node(n)]
    fw, bw = T._extract_fwd_bwd_modules(
        joint_module,
        values,
        saved_sym_nodes=sym,
        saved_opaque_nodes=opaque,
        num_fwd_outputs=num_fwd_outputs,
        static_lifetime_input_nodes=node_info.static_lifetime_input_nodes,
    )
    if T.has_recomputable_rng_ops(joint_module):
        fw, bw = T.functionalize_rng_ops(joint_module, fw, bw, len(sym))
    bw = T.reordering_to_mimic_autograd_engine(bw)
    fw = T.raise_getitems(fw)
    bw = T.raise_getitems(bw)
    fw = T.thread_graphsafe_rng_from_hops(fw, is_backward=False)
    bw = T.thread_graphsafe_rng_from_hops(bw, is_backward=True)
    return fw, bw
