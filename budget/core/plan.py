"""``Plan``: the save/recompute decisions for one graph, with totals and provenance.

A Plan is the product users see and trust before training: what is saved, what is
recomputed, what that costs, how it was found. It is plain data that round-trips through
JSON (``plan.to_json()`` / ``Plan.from_json(text)``) with a format version, and prints as
a readable report (:mod:`budget.core.report`). Files holding the plans of a whole step (one per
graph) are read and written by :mod:`budget.core.plan_files`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .problem import Problem

PLAN_FORMAT_VERSION = 14
# version 1: no peak_bytes, no timeline; version 2: no recomputed_again, again_cost/flops
# version 3: no eager_saved_bytes; version 4: no compiled_peak_bytes; version 5: no
# reference_peak_bytes; version 6: no tie_break, previewed_on, held_bytes; version 7: no
# offload (offload_cost, offloaded_bytes, offload_transfer, the "offload" decision);
# version 8: no reference_compiled_peak_bytes, training_check; version 9: no
# LivePoint.peak_bytes, no RegionChoice.backward_at (eager plans); version 10: no
# guessed_sizes; version 11: no torch_plan; version 12: no bounded_sizes,
# TorchPlan.budget_recompute_cost or TorchPlan.kept_inside_bytes; version 13: no
# eager_guessed_at
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14)
# how the note of a peak tie-break that keeps the budget's cheapest plan begins (the notes:
# budget.planning.tie_break)
TIE_KEPT_NOTE = "the cheapest plan peaks lowest"
# "offload": saved, but kept in host memory between the forward and the backward
Choice = Literal["save", "offload", "recompute", "input"]


@dataclass
class Decision:
    name: str
    op: str
    bytes: int  # bytes of the node's storage (0 for inputs and shared storages)
    # (offloaded values: the host bytes they take)
    cost: float  # recompute cost in the plan's cost unit
    flops: float
    decision: Choice
    module: str = ""


@dataclass
class LivePoint:
    """Live bytes right after ``node`` ran (its outputs made, nothing freed yet)."""

    node: str
    phase: Literal["forward", "backward", "recompute"]
    live_bytes: int
    # the most alive while it ran, where more (eager plans: a kernel's own workspace, and
    # what was made since the point before), else None
    peak_bytes: int | None = None


@dataclass(frozen=True)
class TorchPlan:
    """torch's own plan of the same step, priced and predicted as budget's plans are, for
    a preview to set beside budget's: on the compiled path the saved set
    ``activation_memory_budget`` makes torch's partitioner choose at the same fraction (its
    ``choose_saved_values_set``); for an eager plan, torch's activation checkpointing of
    every module budget.apply may checkpoint, each recomputed whole."""

    # the compiled path: torch's activation_memory_budget (a size budget: where it falls);
    # None for an eager plan's, which checkpoints ``modules``
    fraction: float | None
    saved_bytes: int
    recompute_cost: float  # in the plan's cost unit
    recompute_flops: float
    # the graphs' predicted peak, as budget's ``peak_bytes`` (no extra recomputation:
    # torch's partitioner schedules none); None where budget refuses the set
    peak_bytes: int | None
    # why budget refuses torch's set (a random op recomputed with a fresh sample, ...);
    # [] where it is a valid plan
    refused: list[str] = field(default_factory=list)
    # an eager plan's (budget.apply): the modules torch's activation checkpointing
    # (checkpoint_wrapper) checkpoints whole, every one budget.apply may checkpoint
    modules: list[str] = field(default_factory=list)
    # what budget's plan saving no more than torch's set (as budget prices it) costs, on
    # the preview's solver (its optimum with an exact one; offloads' exposed copies in):
    # the comparison at equal memory; None where not solved (a set budget refuses, a
    # solver that found no plan there)
    budget_recompute_cost: float | None = None
    # of an eager plan's saved bytes, those of values in ``modules`` that budget never
    # recomputes (an in-place write, a module's own cache) and torch's checkpointing would
    # run again: kept, so the plan differs from torch's there
    kept_inside_bytes: int = 0

    @classmethod
    def priced(cls, problem: Problem, saved: Sequence[int], **rest: Any) -> TorchPlan:
        """torch's set ``saved`` of ``problem`` on the planner's figures: its bytes (layout
        copies and generator states at their bounds), recompute cost and FLOPs; ``rest``:
        the other fields."""
        return cls(
            saved_bytes=problem.saved_bytes(saved) + problem.fixed_bytes,
            recompute_cost=problem.recompute_cost(saved),
            recompute_flops=problem.recompute_flops(saved),
            **rest,
        )


@dataclass(frozen=True)
class Plan:
    """One graph's plan. Made once and never changed in place: a stage that learns more
    (partitioning: the predicted peak; Inductor: its code's peak; the backend: a graph
    break) makes a new Plan with ``dataclasses.replace``."""

    # ---- what was asked, and what the solver chose
    budget: float | str  # the budget asked for: a fraction, or a size like "36MiB"
    target_bytes: int
    saved_bytes: int  # device bytes: offloaded values are in ``offloaded_bytes``
    min_bytes: int
    max_bytes: int
    recompute_cost: float
    recompute_flops: float
    cost_unit: str
    status: Literal["optimal", "feasible", "reference"]
    gap: float | None
    solver: str
    estimator: str
    torch_version: str
    graph_hash: str
    decisions: list[Decision] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    # the compile pipeline whose joint graph was planned ("inductor" or "eager"): the graph,
    # and so the plan, differ between them ("" in plans from before this field)
    compiler: str = ""
    # ---- the peak figures: the graphs', the generated code's, the reference, the budget
    # the graphs' predicted peak of the step above what is resident before it
    # (budget.compile.peak; eager plans: budget.eager.peak), and the live bytes after each
    # node of the forward and backward graphs (eager plans: each op call); the peak can
    # exceed the timeline's maximum by a kernel's own workspace (CPU convolutions). None
    # and [] in plans made without the graphs (plan files of format version 1)
    peak_bytes: int | None = None
    timeline: list[LivePoint] = field(default_factory=list)
    # training under Inductor: the peak of the code Inductor generated for this plan's
    # graphs, run on meta tensors (budget.compile.compiled_peak); None where no code was
    # generated (previews, compiler="eager"), a compile cache skipped it, or the code was
    # not run (cpp_wrapper code, or code the meta run failed on). A peak budget
    # is checked against it: this is the peak the step has, where peak_bytes is the
    # graphs' (Inductor fuses and reorders them)
    compiled_peak_bytes: int | None = None
    # the reference: the predicted peak of the b=1 plan of the same graph (torch's saved
    # set at budget 1), which no plan's backward is left to peak above for want of a
    # schedule (budget.compile.schedule), and under Inductor the check of a fraction's
    # compiled peak against b=1's (budget.compile.peak_check.hold_b1_peak); None where the
    # plan recomputes nothing, in plans for eager training loops (budget.eager), and in
    # plan files before version 6
    reference_peak_bytes: int | None = None
    # under Inductor, a memory budget alone: the compiled peak of the b=1 plan of the same
    # graph, where it was compiled to hold this plan's code to it (budget.compile.
    # peak_check.hold_b1_peak); a compiled_peak_bytes above it is the lowest found within
    # the budget. None where no such check ran
    reference_compiled_peak_bytes: int | None = None
    # a preview under Inductor: what training checks on the code Inductor generates and
    # may change this plan for (budget.compile.peak_check.training_check); "" where
    # training keeps the preview's plan as it is
    training_check: str = ""
    # the peak the plan was chosen for, in bytes (None: no peak budget): the graphs' target
    # of the search that chose it; for a memory budget alone under Inductor, the b=1 plan's
    # compiled peak where the plan was planned again to stay under it
    # (budget.compile.peak_check.hold_b1_peak)
    peak_target_bytes: int | None = None
    # how the peak tie-break chose among the plans of (nearly) the least recompute for a
    # memory budget (budget.planning.tie_break): which plan, its predicted peak and the
    # cheapest's; "" where it did not run (b=1, a peak budget, a plan file)
    tie_break: str = ""
    # the values among the decisions whose size depends on tensor values (data-dependent
    # ops such as nonzero under dynamo's capture of them), which the graph does not know
    # (budget.runtime.values.data_dependent): bounded_sizes are priced at their upper
    # bounds (torch's value ranges), each never under the step's; guessed_sizes, with
    # some dimension torch does not bound, at budget.runtime.values.FALLBACK_SIZE, an
    # estimate; [] where every size is known
    bounded_sizes: list[str] = field(default_factory=list)
    guessed_sizes: list[str] = field(default_factory=list)
    # ---- memory outside the decisions, and what partitioning added
    # bytes of graph inputs the compiled forward saves as copies in another layout
    # (Inductor's channels-last convolution inputs and weights: budget.compile.layout),
    # counted in saved_bytes, min_bytes and max_bytes; 0 where there are none
    copied_input_bytes: int = 0
    # bytes of the generator states the forward saves for random ops the model's own
    # checkpointing makes the backward recompute (budget.compile.rng_states), counted in
    # saved_bytes, min_bytes and max_bytes; 0 where there are none
    rng_state_bytes: int = 0
    # bytes of its inputs its backward reads that the user does not hold (parameters,
    # buffers and the tensors given to the compiled call aside): activations of the code
    # before it (after a graph break, or in a module's frame user code calls between
    # graphs), and numbers dynamo makes a tensor of at every call; alive for the backward,
    # and no plan of this graph can free them
    kept_input_bytes: int = 0
    # why dynamo ended this graph early, where ("" if the graph ran to the step's end):
    # what comes after it runs eagerly or in another graph, outside this plan
    graph_break: str = ""
    # forward values the backward recomputes a second time (or more) rather than hold them
    # across its peak (budget.compile.schedule), one name per extra recomputation, and what
    # those cost: on top of recompute_cost and recompute_flops, which count each once
    recomputed_again: list[str] = field(default_factory=list)
    again_cost: float = 0.0
    again_flops: float = 0.0
    # previews only: bytes that eager code run after this graph (until the next graph; for
    # the first graph, also before it) saves for its own backward, outside every plan:
    # distinct storages autograd packs outside compiled graphs during the preview's fake
    # run, parameters and inputs aside (budget.compile.preview); 0 in training, which
    # does not measure it
    eager_saved_bytes: int = 0
    # where that code is: eager_saved_bytes by the FILE:LINE of the step's code that saved
    # each (its innermost frame outside torch and budget; in an installed library, followed
    # by " from FILE:LINE" of the innermost frame outside libraries), the most first
    eager_saved_at: dict[str, int] = field(default_factory=dict)
    # the lines among those that saved a value whose size depends on tensor values in a
    # way torch's value ranges do not bound (a ``repeat_interleave`` by a tensor's
    # counts): each counted in eager_saved_bytes at budget.runtime.values.FALLBACK_SIZE's
    # guess, as the graphs' guessed_sizes are; [] where every eager save is known or bounded
    eager_guessed_at: list[str] = field(default_factory=list)
    # the step's bytes outside this graph while it runs: what the graphs run before it
    # save and keep for their backward, and (previews) what eager code before it saves;
    # where a graph runs several times in a step, its last run (previews: the runs as the
    # fake run met them; training: each earlier graph once, eager code's saves unknown).
    # None where not known (plan files before version 7)
    held_bytes: int | None = None
    # previews only: what the step ran on, "fake tensors" or, where code outside the
    # compiled graphs depends on tensor values, "the example inputs" (the forward ran for
    # real: budget.compile.preview); "" in training
    previewed_on: str = ""
    # ---- offload (budget.core.offload): the exposed time of the host-link copies of the
    # offloaded values, in the plan's cost unit, and the host bytes they take
    offload_cost: float = 0.0
    offloaded_bytes: int = 0
    # the host link's time for one way of those copies (the offloads, or the reloads)
    offload_transfer: float = 0.0
    # previews that ask for it (``vs_torch``): torch's own plan of this graph (compiled: at
    # the same fraction; eager: its checkpointing of every module), to compare with; None
    # otherwise (training, compiled peak budgets, plan files)
    torch_plan: TorchPlan | None = None
    version: int = PLAN_FORMAT_VERSION

    @property
    def step_keeps_bytes(self) -> int | None:
        """What the step keeps for the backward once this graph has run: what it holds
        outside the graph (``held_bytes``), the graph's kept inputs and its saves (against a
        memory budget given as a size, the step's); None where ``held_bytes`` is unknown."""
        if self.held_bytes is None:
            return None
        return self.held_bytes + self.kept_input_bytes + self.saved_bytes

    @property
    def own_peak_bytes(self) -> int | None:
        """This graph's peak as far as known: the code Inductor generated's where known
        (``compiled_peak_bytes``), else the graphs' prediction (``peak_bytes``)."""
        return self.peak_bytes if self.compiled_peak_bytes is None else self.compiled_peak_bytes

    @property
    def step_peak_bytes(self) -> int | None:
        """The step's predicted peak while this graph runs: what the step holds outside it
        (``held_bytes``, and its inputs its backward keeps) plus its own peak
        (``own_peak_bytes``); None where either is unknown."""
        own = self.own_peak_bytes
        if own is None or self.held_bytes is None:
            return None
        return self.held_bytes + self.kept_input_bytes + own

    @property
    def total_recompute_cost(self) -> float:
        """What the backward recomputes, in the plan's cost unit, extra recomputations in,
        with the offloads' exposed transfer time."""
        return self.recompute_cost + self.again_cost + self.offload_cost

    @property
    def tie_broken(self) -> bool:
        """Whether the peak tie-break gave this plan in place of its budget's cheapest (its
        note names another plan, one of a little more recompute or of the same)."""
        return bool(self.tie_break) and not self.tie_break.startswith(TIE_KEPT_NOTE)

    @property
    def saved(self) -> list[str]:
        return [d.name for d in self.decisions if d.decision == "save"]

    @property
    def offloaded(self) -> list[str]:
        """Values saved in host memory between the forward and the backward."""
        return [d.name for d in self.decisions if d.decision == "offload"]

    @property
    def kept(self) -> list[str]:
        """Every value the forward hands the backward: saved on the device or offloaded."""
        return [d.name for d in self.decisions if d.decision in ("save", "offload")]

    @property
    def recomputed(self) -> list[str]:
        return [d.name for d in self.decisions if d.decision == "recompute"]

    def to_dict(self) -> dict[str, Any]:
        """The plan as plain JSON-ready data (what :meth:`to_json` writes)."""
        return asdict(self)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"not a budget plan: invalid JSON ({e})") from None
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Any) -> Plan:
        """The plan in ``data`` as :meth:`to_dict` gives it; ValueError when it is not one."""
        if isinstance(data, dict) and isinstance(data.get("plans"), list):
            raise ValueError(
                f"this file holds {len(data['plans'])} plans (one per graph of a step with "
                "graph breaks): read it with budget.load_plans(path)"
            )
        if not isinstance(data, dict) or "version" not in data:
            raise ValueError("not a budget plan: no 'version' field")
        if data["version"] not in READABLE_VERSIONS:
            raise ValueError(
                f"plan format version {data['version']} is not supported "
                f"(this budget reads versions {', '.join(map(str, READABLE_VERSIONS))})"
            )
        try:
            decisions = [Decision(**d) for d in data.get("decisions", [])]
            timeline = [LivePoint(**p) for p in data.get("timeline", [])]
            theirs = data.get("torch_plan")
            torch_plan = None if theirs is None else TorchPlan(**theirs)
            fields = {**data, "decisions": decisions, "timeline": timeline}
            fields["torch_plan"] = torch_plan
            return cls(**{**fields, "version": PLAN_FORMAT_VERSION})
        except TypeError as e:
            raise ValueError(f"not a budget plan: {e}") from None

    def __str__(self) -> str:
        from .report import plan_report

        return plan_report(self)


def step_peak(plans: Sequence[Plan]) -> tuple[int, int] | None:
    """The step's predicted peak and the index of the graph it is met in, over the plans
    of one step in order (:attr:`Plan.step_peak_bytes`); None where a plan's is unknown."""
    peaks = [p.step_peak_bytes for p in plans]
    if not peaks or any(x is None for x in peaks):
        return None
    at = max(range(len(peaks)), key=lambda i: peaks[i] or 0)
    return peaks[at] or 0, at


def sweep_peaks(plans: Sequence[Plan]) -> list[int | None]:
    """One graph's plans at several budgets, each plan's peak on one kind for them all:
    the code's (``compiled_peak_bytes``) where any was compiled, None for one whose code's
    peak is unknown; else the graphs' prediction. A sweep compares its rows on these, never
    one row's code against another's prediction."""
    code = any(p.compiled_peak_bytes is not None for p in plans)
    return [p.compiled_peak_bytes if code else p.peak_bytes for p in plans]
