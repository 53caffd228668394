"""Problem + budget -> Plan: the budget semantics of DESIGN.md, in one place.

- fraction 1.0: torch's own runtime-optimised min-cut choice, unchanged (``max_bytes``).
- fraction 0.0: the fewest bytes any valid plan can save (``min_bytes``), cheapest such.
- fraction b:   target ``min + b * (max - min)``; minimise recompute cost under it.
- a size:       that target directly; below ``min_bytes`` it is an error naming the minimum.

Bytes every plan saves outside its decisions (``Problem.fixed_bytes``: Inductor's layout
copies, the generator states of random ops a user's checkpoint recomputes) are part of
every plan's figures (saved, min, max, target) and are taken off the target the solvers
are given.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..core.plan import Decision, Plan
from ..core.problem import Problem
from ..core.sizes import MemoryBudget, format_bytes, parse_budget
from ..errors import BudgetTooSmallError
from ..solvers import Solution, Solver, get_solver


@dataclass
class Ends:
    """The two ends of a graph's budget range, solved once and reused across budgets."""

    reference: list[int]  # torch's b=1.0 choice
    max_bytes: int
    min_bytes: int
    low: Solution  # the cheapest plan among those saving min_bytes


# Saved-memory fractions tried for a peak budget: peak is not monotone in saved memory
# (saving less can mean recomputing more at once), so a grid first; only between the
# grid's cheapest fit and the cheaper miss above it do the peak searches bisect.
PEAK_GRID = tuple(k / 20 for k in range(21))
PEAK_REFINE_STEPS = 6  # bisection steps between a peak search's cheapest fit and miss


def bisect_target(lo: int, hi: int, fits_at: Callable[[int], bool]) -> None:
    """Bisect a saved-memory target between ``lo`` (its plan's peak fits) and ``hi``
    (its plan's does not, and recomputes less), ``PEAK_REFINE_STEPS`` times: the grid's
    5% steps can leave recompute on the table. ``fits_at(target)`` plans, predicts and
    records; a peak search then chooses among what it recorded."""
    for _ in range(PEAK_REFINE_STEPS):
        if hi - lo <= 1:
            return
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits_at(mid) else (lo, mid)


def cheapest_fit(
    fits: Sequence[Plan],
    tried: Sequence[Plan],
    peak_bytes: int,
    searched: str,
    floor_bytes: int | None = None,
    *,
    others: int = 0,
) -> Plan:
    """The plan of ``fits`` with the least recompute (ties: the lower peak, then fewer
    saved bytes), marked with the peak budget; when none fits, BudgetTooSmallError naming
    the lowest predicted peak of ``tried`` (``searched``: what was tried, for the
    message; ``others``: plans tried besides, known to peak no lower) and, when given,
    ``floor_bytes``: a bound no plan's predicted peak is below."""
    if not fits:
        lowest = min(p.peak_bytes or 0 for p in tried)
        floor = ""
        if floor_bytes is not None:
            floor = (
                f"; no plan of this graph is predicted to peak below {format_bytes(floor_bytes)} "
                f"({floor_bytes} bytes)"
                if floor_bytes > peak_bytes
                else f"; no plan is predicted below {format_bytes(floor_bytes)} ({floor_bytes} "
                'bytes), so one may fit: peak_search="exact" searches further'
            )
        raise BudgetTooSmallError(
            f"peak memory budget {format_bytes(peak_bytes)} ({peak_bytes} bytes) is below "
            f"the lowest predicted peak of the {len(tried) + others} {searched}: "
            f"{format_bytes(lowest)} ({lowest} bytes){floor}",
            lowest_peak_bytes=lowest,
        )
    best = min(fits, key=lambda p: (p.total_recompute_cost, p.peak_bytes or 0, p.saved_bytes))
    return replace(best, peak_target_bytes=peak_bytes)


def solve_ends(problem: Problem, backend: Solver, time_limit: float) -> Ends:
    reference = problem.reference_saved
    if problem.check(reference):  # should not happen; fall back to solving for b=1
        reference = []
    max_bytes = problem.saved_bytes(reference)
    low = backend.solve(problem, None, minimize="bytes", time_limit=time_limit)
    min_bytes = int(low.objective)
    if reference and max_bytes < min_bytes:  # a time-limited floor above torch's own choice
        min_bytes = max_bytes
    return Ends(reference, max_bytes, min_bytes, low)


def target_bytes(budget: MemoryBudget, ends: Ends, fixed_bytes: int = 0) -> int:
    """The byte target of ``budget`` for a graph, with the ``fixed_bytes`` every plan
    saves in it (``Problem.fixed_bytes``); raises when a size is unreachable."""
    return budget_target(budget, ends.min_bytes, ends.max_bytes, fixed_bytes=fixed_bytes)


def budget_target(
    budget: MemoryBudget,
    min_bytes: int,
    max_bytes: int,
    *,
    fixed_bytes: int = 0,
    scope: str = "for this graph",
) -> int:
    """The byte target of ``budget`` in the range ``min_bytes`` .. ``max_bytes`` (both
    front ends' budget semantics), with the ``fixed_bytes`` every plan saves beside it;
    a size below the range raises BudgetTooSmallError naming the least (``scope``: what
    the range is of, for the message)."""
    low = min_bytes + fixed_bytes
    if budget.fraction is not None:
        return low + math.floor(budget.fraction * max(0, max_bytes - min_bytes))
    target = int(budget.nbytes or 0)
    if target < low:
        copies = (
            f", of which {format_bytes(fixed_bytes)} every plan saves beside its choices "
            "(Inductor's layout copies of graph inputs, which "
            "torch._inductor.config.layout_optimization = False frees; the generator "
            "states of random ops the model's own checkpointing recomputes)"
            if fixed_bytes
            else ""
        )
        raise BudgetTooSmallError(
            f"memory budget {budget} ({target} bytes) is below the smallest reachable "
            f"saved activation memory {scope}: {format_bytes(low)} "
            f"({low} bytes){copies}",
            min_bytes=low,
        )
    return target


def solve_sweep(
    problem: Problem,
    budgets: Sequence[MemoryBudget],
    *,
    solver: str = "cpsat",
    estimator: str = "flops",
    time_limit: float = 60.0,
    timings: dict[str, float] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[Plan]:
    """Plans for many budgets of one problem, solving its two ends only once.

    ``progress(done, total)`` is called before the first solve (``done=0``) and after each
    budget is planned, so a caller can show progress; the library itself prints nothing.
    """
    if progress is not None:
        progress(0, len(budgets))
    backend = get_solver(solver)
    start = time.perf_counter()
    ends = solve_ends(problem, backend, time_limit)
    ends_time = time.perf_counter() - start
    plans = []
    for i, b in enumerate(budgets):
        t = dict(timings or {})
        if i == 0:
            t["ends"] = ends_time
        plans.append(
            solve_problem(
                problem,
                b,
                solver=solver,
                estimator=estimator,
                time_limit=time_limit,
                timings=t,
                ends=ends,
            )
        )
        if progress is not None:
            progress(i + 1, len(budgets))
    return plans


def solve_problem(
    problem: Problem,
    budget: MemoryBudget,
    *,
    solver: str = "cpsat",
    estimator: str = "flops",
    time_limit: float = 60.0,
    timings: dict[str, float] | None = None,
    ends: Ends | None = None,
) -> Plan:
    timings = dict(timings or {})
    backend = get_solver(solver)
    start = time.perf_counter()
    if ends is None:
        ends = solve_ends(problem, backend, time_limit)
    reference, low = ends.reference, ends.low
    fixed = problem.fixed_bytes  # saved by every plan: off the solver's target
    target = target_bytes(budget, ends, fixed)

    sol: Solution
    status: str
    offloaded: list[int] = []
    if budget.fraction == 1.0 and reference:
        saved, status, gap = reference, "reference", 0.0
    elif budget.fraction == 0.0 or target - fixed == ends.min_bytes:
        saved, status, gap, offloaded = low.saved, low.status, low.gap, low.offloaded
    else:
        sol = backend.solve(problem, target - fixed, minimize="cost", time_limit=time_limit)
        saved, status, gap, offloaded = sol.saved, sol.status, sol.gap, sol.offloaded
    timings["solve"] = time.perf_counter() - start
    return make_plan(
        problem,
        saved,
        offloaded=offloaded,
        budget=budget,
        target_bytes=target,
        min_bytes=ends.min_bytes + fixed,
        max_bytes=ends.max_bytes + fixed,
        status=status,
        gap=gap,
        solver=backend.name,
        estimator=estimator,
        timings=timings,
    )


def make_plan(
    problem: Problem,
    saved: list[int],
    *,
    offloaded: Sequence[int] = (),
    budget: MemoryBudget,
    target_bytes: int,
    min_bytes: int,
    max_bytes: int,
    status: str,
    gap: float | None,
    solver: str,
    estimator: str,
    timings: dict[str, float],
) -> Plan:
    """The Plan of ``problem`` that keeps ``saved`` for the backward, ``offloaded`` of it
    in host memory (checked: a plan over its target is a bug)."""
    errors = problem.check(saved, offloaded)
    if errors:
        raise RuntimeError(f"internal error: invalid plan from {solver}: {errors[:3]}")
    saved_bytes = problem.saved_bytes(saved, offloaded) + problem.fixed_bytes
    if saved_bytes > target_bytes and status != "reference":
        raise RuntimeError(
            f"internal error: {solver} returned {saved_bytes} bytes for a target of {target_bytes}"
        )
    recompute = problem.recompute_closure(saved)
    decisions = _decisions(problem, saved, offloaded, set(recompute))
    bounded, guessed = set(problem.bounded_sizes), set(problem.guessed_sizes)
    return Plan(
        budget=budget.to_json(),
        target_bytes=int(target_bytes),
        saved_bytes=saved_bytes,
        min_bytes=int(min_bytes),
        max_bytes=int(max_bytes),
        recompute_cost=problem.recompute_cost(saved),
        recompute_flops=problem.recompute_flops(saved),
        cost_unit=problem.cost_unit,
        status=status,  # type: ignore[arg-type]
        gap=gap,
        solver=solver if status != "reference" else "torch-mincut",
        estimator=estimator,
        torch_version="",  # provenance of the compile pipeline: set by budget.compile
        graph_hash=problem.graph_hash,
        decisions=decisions,
        timings=timings,
        bounded_sizes=[d.name for d in decisions if d.name in bounded],
        guessed_sizes=[d.name for d in decisions if d.name in guessed],
        copied_input_bytes=problem.fixed_bytes - problem.rng_state_bytes,
        rng_state_bytes=problem.rng_state_bytes,
        # where offload is not priced (a plan file applied): 0 here, the file's own figure
        # kept by the caller
        offload_cost=problem.offload_cost(offloaded) if problem.offload is not None else 0.0,
        offloaded_bytes=problem.host_bytes(offloaded),
        offload_transfer=(
            float(problem.offload.transfer[list(offloaded)].sum())
            if problem.offload is not None and len(offloaded)
            else 0.0
        ),
    )


def _decisions(
    problem: Problem, saved: Sequence[int], offloaded: Sequence[int], recomputed: set[int]
) -> list[Decision]:
    """One Decision per value the backward reads: a storage's bytes on its first saved
    value only (what the plan's saved bytes count), a value's own elsewhere."""
    saved_set = set(saved)
    away = set(offloaded)
    counted: set[int] = set()
    decisions: list[Decision] = []
    for v in range(problem.n):
        if problem.is_input[v]:
            if not problem.needed[v]:
                continue
            choice = "input"
        elif v in away:
            choice = "offload"
        elif v in saved_set:
            choice = "save"
        elif v in recomputed:
            choice = "recompute"
        else:
            continue
        g = int(problem.storage[v])
        nbytes = 0
        if choice == "save" and g >= 0 and g not in counted:
            counted.add(g)
            nbytes = int(problem.storage_bytes[g])
        decisions.append(
            Decision(
                name=problem.names[v],
                op=problem.ops[v],
                bytes=nbytes if choice == "save" else problem.node_bytes(v),
                cost=float(problem.cost[v]),
                flops=float(problem.flops[v]),
                decision=choice,  # type: ignore[arg-type]
                module=problem.modules[v],
            )
        )
    return decisions


def plan_like(
    problem: Problem,
    saved: list[int],
    like: Plan,
    *,
    offloaded: Sequence[int] = (),
    status: str = "feasible",
    gap: float | None = None,
    solver: str | None = None,
    estimator: str | None = None,
    timings: dict[str, float] | None = None,
) -> Plan:
    """The plan of ``problem`` saving ``saved``, with ``like``'s budget, target and ends
    (another plan of the same graph: a candidate beside it, a plan file's, rank 0's); its
    solver, estimator and timings unless given."""
    return make_plan(
        problem,
        saved,
        offloaded=offloaded,
        budget=parse_budget(like.budget),
        target_bytes=like.target_bytes,
        min_bytes=like.min_bytes,
        max_bytes=like.max_bytes,
        status=status,
        gap=gap,
        solver=like.solver if solver is None else solver,
        estimator=like.estimator if estimator is None else estimator,
        timings=like.timings if timings is None else timings,
    )
