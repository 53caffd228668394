"""Plans cheapest first, each judged: the loop of both exact peak searches (the compiled
path's :mod:`budget.compile.peak_search`, the eager path's :mod:`budget.eager.peak_rows`).

An exact model (:class:`~budget.solvers.mip.enumerated.Enumerated`) gives the cheapest
plan it has left, and the front end predicts that plan's peak (``fits``):

- a plan that fits becomes the best; from then on only cheaper plans are asked for;
- one that does not is excluded with every plan that recomputes the same values and
  saves more (they hold more for the same work, so they cannot peak lower); when the
  front end learned from the miss (``learn``: its rows were refined or recalibrated), the
  model is rebuilt, with every exclusion and the best cost so far;
- when the model proves that no plan is left, the best is the optimum among them
  (``proven``).

It stops earlier at the time limit or after ``max_plans`` predictions, keeping the best
found.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from ..core.plan import Plan
from ..core.problem import Problem

if TYPE_CHECKING:
    from ..solvers.mip.enumerated import Enumerated

P = TypeVar("P", bound=Plan)  # a front end's plan type


@dataclass
class Enumeration(Generic[P]):
    """What the loop did: the best plan that fits (the one it started from, when none it
    found is cheaper; None if none fits), whether it is proven the cheapest, the plans it
    had predicted, and why it stopped."""

    best: P | None
    proven: bool = False
    tried: list[P] = field(default_factory=list)
    stopped: str = ""


def cheapest_first(
    problem: Problem,
    build: Callable[[], Enumerated | None],
    make: Callable[[list[int]], P],
    fits: Callable[[P], bool],
    learn: Callable[[P, list[int], list[int]], bool],
    *,
    best: P | None = None,
    time_limit: float,
    max_plans: int,
) -> Enumeration[P]:
    """Enumerate the plans of ``problem`` cheapest first (see the module docstring).

    ``build()``: a fresh model (None: nothing to build one from yet, and the loop stops);
    ``make(saved)``: the plan saving ``saved``; ``fits(plan)``: predicts it and says
    whether it fits; ``learn(plan, saved, recomputed)``: learns from a plan that missed
    and says whether the model must be rebuilt; ``best``: a plan known to fit.
    """
    start = time.perf_counter()
    result: Enumeration[P] = Enumeration(best=best)
    excluded: list[tuple[list[int], list[int]]] = []

    def fresh() -> Enumerated | None:
        model = build()
        if model is not None:
            for saved, recomputed in excluded:
                model.exclude(saved, recomputed)
            if result.best is not None:
                model.cheaper_than(result.best.total_recompute_cost)
        return model

    model = fresh()
    while model is not None:
        left = time_limit - (time.perf_counter() - start)
        if left <= 0:
            result.stopped = "time limit"
            break
        if len(result.tried) >= max_plans:
            result.stopped = f"{max_plans} plans predicted"
            break
        found = model.next(left)
        if found.exhausted:
            result.proven, result.stopped = True, "no cheaper plan left"
            break
        if found.saved is None:
            result.stopped = "time limit"
            break
        saved = problem.prune_unused(found.saved)
        recomputed = problem.recompute_closure(saved)
        plan = make(saved)
        result.tried.append(plan)
        excluded.append((saved, recomputed))
        if fits(plan):
            cost = plan.total_recompute_cost
            if result.best is None or cost < result.best.total_recompute_cost:
                result.best = plan
            model.exclude(saved, recomputed)
            model.cheaper_than(result.best.total_recompute_cost)
        elif learn(plan, saved, recomputed):
            model = fresh()
        else:
            model.exclude(saved, recomputed)
    else:
        result.stopped = "no model to ask"
    return result
