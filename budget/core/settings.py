"""What decides a plan, apart from what planning produced.

:class:`PlanSettings` is frozen: the budget, peak budget, solver, estimator, time
limit, compiler and saved plans that together determine every plan of a step (what a
cache key must cover). :class:`PlanLog` is where the partitioner writes what it made, graph by graph, and
tells the observers (``on_plan``, ``progress``) as it goes. A backend holds one of each.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .plan import Plan
from .plan_files import PlanBook
from .problem import Problem
from .report import plan_line
from .sizes import MemoryBudget

_log = logging.getLogger(__name__)

# A graphs' peak target no plan meets: the search then names the lowest it predicts.
LOWEST_PEAK = 0


@dataclass(frozen=True)
class PlanSettings:
    """Everything a plan depends on besides the graph itself."""

    budget: MemoryBudget
    """The memory budget: a fraction of each graph's own range, or a size, the step's saved
    activation memory (a graph after others gets what they leave: compile/step_budget)."""
    solver: str
    """Registered solver name (``budget.available_solvers()``)."""
    estimator: str
    """Estimator spec, device included (``"roofline:h100"``)."""
    time_limit: float
    """Seconds each solve may take."""
    peak_bytes: int | None = None
    """The most the step may use at its peak (``peak_memory_budget``), or None. The
    user's budget: a search never changes it (see ``search_peak_bytes``)."""
    search_peak_bytes: int | None = None
    """The target the graphs' peak search is run for in this attempt, where it is not
    ``peak_bytes``: under Inductor a plan is checked on its compiled code and the graphs
    are searched again for other targets (:mod:`budget.compile.peak_check`);
    ``LOWEST_PEAK`` (0) asks for the plan the graphs predict lowest. None: ``peak_bytes``."""
    saved_cap_bytes: int | None = None
    """The most this graph may save (saved bytes), on top of the memory budget: a step's
    peak budget divided across its graphs (:mod:`budget.compile.step_budget`) leaves a
    later graph room by capping what the graphs before it keep. None: no cap."""
    peak_search: str = "grid"
    """How a peak budget is searched: "grid" (the best plans of a grid of memory budgets,
    then recomputing values again) or "exact" (then CP-SAT over the plans that recompute
    each value once, cheapest first, under a bound of their peaks:
    :mod:`budget.compile.peak_search`)."""
    compiler: str = ""
    """The compile pipeline planned for ("inductor" or "eager"): the joint graph differs."""
    book: PlanBook | None = None
    """Saved plans to apply instead of solving (``budget.backend(plan=...)``)."""
    sweep: tuple[MemoryBudget, ...] = ()
    """Previews only: plan each of these budgets too (the first is the one applied)."""
    vs_torch: bool = False
    """Previews only: each plan carries torch's own beside it (``Plan.torch_plan``): on the
    compiled path, of a memory budget, its partitioner's at the same fraction
    (:mod:`budget.compile.torch_plan`); for budget.apply, its checkpointing of every module
    (:mod:`budget.eager.torch_plan`)."""
    offload: bool = False
    """Whether the solver may keep saved values in host memory (budget.core.offload):
    offloaded, copied back for the backward. Off by default."""
    conv_workspace: str = "measure"
    """How the peak models price a CPU convolution's (and bf16 matmul's) workspace:
    "measure" (once per call shape on this host) or "rule" (budget's fitted rule)."""

    buffer_reuse: bool | str = "neutral"
    """Whether Inductor may reuse a dead buffer for a later one of its size, one allocator
    call fewer, which shortens launch-bound GPU steps. "neutral" (the default): only where
    the step's peak stays where it is without reuse, judged on the generated code
    (:mod:`budget.compile.reuse`). False: no reuse. True: Inductor's own rule, whose
    estimate lets a reused buffer held across the peak raise it. Compiled peaks are read
    from the code either way."""
    fusion_distance: int | None = 32
    """Inductor fuses no two nodes more than this many places apart in its order (1:
    neighbours only) and unrolls no small reduction into its readers, so that a recomputation
    runs where the partitioned graphs place it and the code peaks where they predict
    (:mod:`budget.compile.fusion`); None: Inductor's own rules."""

    @property
    def graphs_peak_bytes(self) -> int | None:
        """The target of the graphs' peak search: ``search_peak_bytes``, else the budget."""
        return self.peak_bytes if self.search_peak_bytes is None else self.search_peak_bytes

    @property
    def measure_workspace(self) -> bool:
        return self.conv_workspace == "measure"


@dataclass
class PlanLog:
    """What planning produced, one entry per compiled graph, in compilation order."""

    plans: list[Plan] = field(default_factory=list)
    sweeps: list[list[Plan]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    on_plan: Callable[[Plan], None] | None = None
    """Called with each plan as it is made."""
    progress: Callable[[int, int, int | None], None] | None = None
    """``progress(graph, done, total)``, graphs counted from 0: a sweep tells each of its
    budgets planned, a single budget 0 of 1 as a graph's planning starts and 1 of 1 once
    it is planned; in between, a peak search tells each plan it partitions (``done``: how
    many so far) with ``total`` None, since how many it tries depends on what fits."""
    predictions: dict[tuple, Any] | None = None
    """What partitioning a saved set of a joint graph told (its predicted peak, the values
    recomputed again, ...), by the graph's hash and the set, where kept: shared by the logs
    of the attempts that plan one graph again (budget.compile.peak_check), whose searches
    try many of the same sets; each attempt partitions only the plan it keeps."""
    compiling: Callable[[PlanLog, Plan], None] | None = None
    """``compiling(log, plan)`` as each plan is added (by partitioning, before its graphs
    are compiled); raises to stop the compile (an attempt's plan compiled before:
    budget.compile.attempts)."""

    def add_plan(self, plan: Plan) -> None:
        """A graph's plan, made; observers hear of it once its compile is done
        (:meth:`announce`), with what the compile told (its graph break, its code's peak)."""
        self.plans.append(plan)
        if self.compiling is not None:
            self.compiling(self, plan)

    def mark(self) -> tuple[int, int, int]:
        """Where the log stands: :meth:`rewind` drops what was added after it."""
        return len(self.plans), len(self.sweeps), len(self.problems)

    def rewind(self, mark: tuple[int, int, int]) -> None:
        """Drop the plans, sweeps and problems added since ``mark`` (a graph planned again
        before anyone was told of it)."""
        del self.plans[mark[0] :], self.sweeps[mark[1] :], self.problems[mark[2] :]

    def update(self, index: int, **told: Any) -> None:
        """Plan ``index`` with what a later stage found out (``dataclasses.replace``: plans
        are never changed in place), here and as the first plan of its sweep."""
        old = self.plans[index]
        self.plans[index] = replace(old, **told)
        for sweep in self.sweeps:
            if sweep and sweep[0] is old:
                sweep[0] = self.plans[index]

    def announce(self, first: int) -> None:
        """Tell ``on_plan`` of the plans from index ``first`` on: a graph's, complete;
        and the ``budget`` logger, at INFO."""
        for plan in self.plans[first:]:
            if _log.isEnabledFor(logging.INFO):
                _log.info("planned %s", plan_line(plan))
            if self.on_plan is not None:
                self.on_plan(plan)

    def sweep_progress(self) -> Callable[[int, int | None], None] | None:
        """``progress`` bound to the graph being swept now (the next entry of ``sweeps``)."""
        return self._bound(len(self.sweeps))

    def plan_progress(self) -> Callable[[int, int | None], None] | None:
        """``progress`` bound to the graph being planned now (the next entry of ``plans``)."""
        return self._bound(len(self.plans))

    def _bound(self, graph: int) -> Callable[[int, int | None], None] | None:
        if self.progress is None:
            return None
        report = self.progress

        def bound(done: int, total: int | None) -> None:
            report(graph, done, total)

        return bound
