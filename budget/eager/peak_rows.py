"""The eager peak search's second stage: plans cheapest first under rows calibrated on
predicted steps.

The grid (:mod:`budget.planning.peak_grid`) offers the plans of uniform saved-bytes
targets. But a saved value counts at the peak only while it is alive, and in the backward
a candidate module's saved values live until its own backward has run: a value saved in
the last module counts at fewer moments than one saved in the first. The rows here say
so. The moments of a step are its forward, the backward before any candidate module's
(the loss and what comes after the last module: the *head*), and each candidate module's
backward, from where the gradient of its output is made to where the next module's is
(:attr:`RegionChoice.backward_at`). A moment's row counts the saved storages alive there
(forward and head: all; a module's: those made before that module, outside every
module or in one before it), plus what is alive there whatever the plan saves,
*calibrated* on predicted steps: the moment's highest live bytes less the row's storages
that step saved, the largest over the steps predicted.

CP-SAT gives the cheapest plans under the rows (:mod:`budget.solvers.mip.rows`), one by
one (:func:`~budget.planning.cheapest_first.cheapest_first`), and each step is predicted on
fake tensors (the search's judge, as the grid's); a plan that does not fit recalibrates
the rows. The search stops when no plan is left, at the time limit, or after
``MAX_PLANS`` predictions; it can only add plans to the grid's, so the grid's cheapest
fit stands unless it finds a cheaper one.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import torch.fx as fx

from ..core.problem import Problem
from ..planning.cheapest_first import cheapest_first
from ..planning.peak_grid import PeakGrid
from ..solvers.mip.rows import RowModel
from .plan import EagerPlan
from .traced import Trace

MAX_PLANS = 6  # steps the search may predict (each a run on fake tensors)
FORWARD, HEAD = -2, -1  # the moments before the modules' backwards


def moments(plan: EagerPlan, rank: dict[tuple[str, int], int]) -> dict[int, int]:
    """A predicted plan's highest live bytes at each moment: ``FORWARD``, ``HEAD``, and
    each region's backward by its ``rank`` (its place in the forward)."""
    points = plan.timeline
    first = next((i for i, p in enumerate(points) if p.phase != "forward"), len(points))
    starts = sorted(
        (r.backward_at, rank[r.key])
        for r in plan.regions
        if r.backward_at is not None and r.key in rank
    )
    bounds = [(0, FORWARD), (first, HEAD), *starts, (len(points), None)]
    out: dict[int, int] = {}
    for (lo, key), (hi, _) in zip(bounds, bounds[1:], strict=False):
        if key is not None and hi > lo:
            most = max(p.peak_bytes or p.live_bytes for p in points[lo:hi])
            out[key] = max(out.get(key, 0), most)
    return out


def row_groups(key: int, group_rank: dict[int, int]) -> list[int]:
    """The storage groups a moment's row counts (a group's rank: the module it is made
    in, -1 outside every module)."""
    if key in (FORWARD, HEAD):
        return list(group_rank)
    return [g for g, r in group_rank.items() if r < key]


class Calibration:
    """Each moment's bytes alive whatever the plan saves: the largest seen."""

    def __init__(
        self, problem: Problem, group_rank: dict[int, int], rank: dict[tuple[str, int], int]
    ) -> None:
        self.problem, self.group_rank, self.rank = problem, group_rank, rank
        self.rest: dict[int, int] = {}

    def learn(self, plan: EagerPlan, saved: Sequence[int]) -> None:
        kept = {int(self.problem.storage[v]) for v in saved if self.problem.storage[v] >= 0}
        for key, live in moments(plan, self.rank).items():
            counted = sum(
                int(self.problem.storage_bytes[g])
                for g in row_groups(key, self.group_rank)
                if g in kept
            )
            self.rest[key] = max(self.rest.get(key, live - counted), live - counted)

    def rows(self, limit: int) -> list[tuple[list[int], int]]:
        return [(row_groups(k, self.group_rank), limit - rest) for k, rest in self.rest.items()]


class RowSearch:
    """The search over the plans of ``problem`` (every candidate module of ``usable``
    checkpointed; ``nodes``: the fx node behind each problem index), calibrated on the
    plans that checkpoint them all; ``saved_of(plan)``: a plan's saved problem indices."""

    def __init__(
        self,
        trace: Trace,
        problem: Problem,
        nodes: Sequence[fx.Node | None],
        usable: Sequence[int],
        saved_of: Callable[[EagerPlan], list[int]],
    ) -> None:
        order = sorted(usable, key=lambda r: trace.regions[r].start)
        rank = {trace.regions[r].key: i for i, r in enumerate(order)}
        by_region = {r: rank[trace.regions[r].key] for r in usable}
        group_rank: dict[int, int] = {}
        for v, n in enumerate(nodes):
            g = int(problem.storage[v])
            if g >= 0 and problem.can_save[v]:
                own = by_region.get(trace.region_of_value(n), -1)  # type: ignore[arg-type]
                group_rank[g] = min(group_rank.get(g, own), own)
        self.problem, self.saved_of = problem, saved_of
        self.calibration = Calibration(problem, group_rank, rank)

    def run(
        self,
        grid: PeakGrid,
        make: Callable[[list[int]], EagerPlan],
        cap_bytes: int | None,
        *,
        key: Callable[[EagerPlan], Hashable],
        time_limit: float,
        max_plans: int = MAX_PLANS,
    ) -> None:
        """Add to ``grid`` the plans the rows find, cheapest first (see the module
        docstring); ``make(saved)``: the plan saving ``saved``, not yet predicted."""
        problem, cal = self.problem, self.calibration
        for p in grid.tried.values():
            if {r.key for r in p.regions if r.checkpoint} == set(cal.rank):
                cal.learn(p, self.saved_of(p))  # type: ignore[arg-type]

        def build() -> RowModel | None:
            rows = cal.rows(grid.peak_bytes)
            return RowModel(problem, cap_bytes, rows) if rows else None

        def learn(plan: EagerPlan, saved: list[int], _recomputed: list[int]) -> bool:
            told = grid.tried.get(key(plan))
            if told is None:  # not predicted: it saves more than the peak budget
                return False
            cal.learn(told, saved)  # type: ignore[arg-type]
            return True  # recalibrated: the rows change

        cheapest = min(grid.fits, key=lambda f: f.total_recompute_cost, default=None)
        cheapest_first(
            problem,
            build,
            make,
            grid.try_plan,
            learn,
            best=cheapest,
            time_limit=time_limit,
            max_plans=max_plans,
        )
