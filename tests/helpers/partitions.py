"""The partitioner's state for one graph (its Partitions and Problem), captured while
budget.plan plans the step, for tests that partition and predict plans of their own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import budget
from budget.compile import partition, peak_plan
from budget.core.plan import Plan
from budget.core.problem import Problem
from budget.core.sizes import MemoryBudget
from budget.models import Example
from budget.planning.planner import make_plan

ONCE = peak_plan.ONCE  # a limit no prediction is over: each value recomputed once


@dataclass
class Captured:
    partitions: Any  # budget.compile.split.Partitions
    problem: Problem

    def plan(self, saved: list[int], limit: int | None = ONCE) -> Plan:
        """The plan saving ``saved`` (pruned), partitioned and predicted: each value
        recomputed once by default, or rescheduled down to ``limit`` (None: the b=1
        plan's peak)."""
        saved = self.problem.prune_unused(saved)
        plan = make_plan(
            self.problem,
            saved,
            budget=MemoryBudget(fraction=1.0),
            target_bytes=1 << 62,
            min_bytes=0,
            max_bytes=0,
            status="feasible",
            gap=None,
            solver="test",
            estimator="flops",
            timings={},
        )
        return self.partitions.predicted(plan, limit=limit)


def capture(example: Example, compiler: str = "inductor") -> Captured:
    """Plan ``example``'s step and keep the first graph's partitioner and problem."""
    found: list[Captured] = []
    solve = partition._solve

    def spy(partitions, problem, settings, log, timings):  # type: ignore[no-untyped-def]
        found.append(Captured(partitions, problem))
        return solve(partitions, problem, settings, log, timings)

    partition._solve = spy
    try:
        budget.plan(example.step, *example.args, compiler=compiler)
    finally:
        partition._solve = solve
    return found[0]
