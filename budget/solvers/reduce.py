"""The problem reduction as a solver wrapper: ``Reduced(solver)`` solves the reduced
problem (:mod:`budget.solvers.reduce_rules`: a smaller Problem with the same optimum) and
answers for the original one. :func:`budget.solvers.get_solver` wraps the solvers whose
class sets ``reduce``. Reductions are cached by problem content, so the two ends and every
budget of a sweep share one.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from typing import ClassVar

from ..core.problem import Problem
from .base import (
    InfeasibleError,
    Request,
    Search,
    Solution,
    Solver,
    SolverBase,
    cached_by_fingerprint,
)
from .reduce_rules import Reduction, identity, reduce_problem

__all__ = ["Reduced", "Reduction", "cached_reduction", "identity", "reduce_problem"]


# ---- a cache, so the ends and every budget of a sweep share one reduction ---------------------

_CACHE: OrderedDict[bytes, Reduction] = OrderedDict()


def cached_reduction(problem: Problem) -> Reduction:
    return cached_by_fingerprint(_CACHE, problem, reduce_problem)


# ---- the wrapper every solver with ``reduce = True`` gets from ``get_solver`` ------------------


class Reduced(SolverBase):
    """``solver`` on the reduced problem; plans, objectives and bounds of the original.

    The expanded plan is re-checked and re-priced on the original problem, and must
    price exactly at the reduced plan's price plus the offsets (anything else is a bug
    in a rule, raised rather than returned). Statuses, gaps and tie-break flags are the
    inner solver's: the reduction keeps optima and bounds. Infeasibility is the inner
    solver's to report (an infeasible problem is not reduced).
    """

    check_plannable: ClassVar[bool] = False

    def __init__(self, solver: Solver) -> None:
        self.solver = solver
        self.name = solver.name  # type: ignore[misc]
        self.exact = solver.exact  # type: ignore[misc]
        self.requires = solver.requires  # type: ignore[misc]
        self.plans_offload = getattr(solver, "plans_offload", False)  # type: ignore[misc]

    def available(self) -> bool:  # type: ignore[override]
        return self.solver.available()

    def _search(self, request: Request) -> Search:
        problem, target_bytes, minimize, time_limit = request
        start = time.perf_counter()
        red = cached_reduction(problem)
        if red.identity:
            return Search.of(
                self.solver.solve(problem, target_bytes, minimize=minimize, time_limit=time_limit)
            )
        target = None if target_bytes is None else target_bytes - red.bytes_offset
        try:
            sol = self.solver.solve(
                red.problem,
                target,
                minimize=minimize,
                time_limit=time_limit - (time.perf_counter() - start),
            )
        except InfeasibleError as e:
            low = None if e.min_bytes is None else e.min_bytes + red.bytes_offset
            more = "" if low is None else f"; the smallest reachable is {low} bytes"
            raise InfeasibleError(
                f"no plan saves at most {target_bytes} bytes{more}", min_bytes=low
            ) from None
        want = _price(red.problem, sol.saved, sol.offloaded)
        want = (want[0] + red.cost_offset, want[1] + red.bytes_offset, want[2])

        def verify(out: Solution) -> None:
            got = _price(problem, out.saved, out.offloaded)
            if not math.isclose(got[0], want[0], rel_tol=1e-9, abs_tol=1e-9) or got[1:] != want[1:]:
                raise RuntimeError(
                    f"{self.name}: the reduced plan expands to {got} (cost, device bytes, "
                    f"host bytes), expected {want}"
                )

        offset = red.cost_offset if minimize == "cost" else red.bytes_offset
        return Search(
            red.expand(sol.saved),
            optimal=sol.status == "optimal",
            bound=None if sol.bound is None else sol.bound + offset,
            info={**sol.info, "reduced": red.summary()},
            verify=verify,
            offloaded=red.expand_offloaded(sol.offloaded),
        )


def _price(p: Problem, saved: list[int], offloaded: list[int]) -> tuple[float, int, int]:
    """A plan's recompute cost plus offload price, device bytes and host bytes."""
    cost = p.recompute_cost(saved) + (p.offload_cost(offloaded) if offloaded else 0.0)
    return cost, p.saved_bytes(saved, offloaded), p.host_bytes(offloaded)
