"""Parametric min-cut: the convex hull of the memory/recompute frontier in polynomial time.

Without the memory row, the closure model of DESIGN.md ("The optimisation, exactly") with
the Lagrangian objective ``saved_bytes + lam * recompute_cost`` is one s-t minimum cut.
Sweeping ``lam`` finds every vertex of the lower convex hull of the Pareto frontier
(Eisner-Severance parametric search: two cuts per hull point found, minus one). This gives
fast plans (each hull vertex is Pareto-optimal), a proven lower bound for any byte target
(Lagrangian duality), and the exact minimum-bytes plan. The sweep contracts: minimal sink
sides shrink as lam grows (Gallo-Grigoriadis-Tarjan), so a cut between two known ones only
solves the nodes where those two differ, and a sweep costs little more than a few cuts.
Models with identical layers tie at every breakpoint, so their hull has few vertices and
long edges; the solver also walks the minimum cuts along the edge that crosses its target
(Picard-Queyranne), which gives plans between the vertices at the hull's cost.

The network and its numerics are in :mod:`budget.solvers.mincut.network`, the parametric model
(cuts, sweep, hull edges, bounds) in :mod:`budget.solvers.mincut.parametric`; this module holds
the public functions and the solver.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from fractions import Fraction
from typing import ClassVar

from ...core.problem import Problem
from ..base import InfeasibleError, Request, Search, SolverBase, cached_by_fingerprint
from .network import _PRODUCT_BITS, _build
from .parametric import _Cut, _lower_hull, _Model

_REL_TOL = 1e-12  # float rounding allowed when a cost is compared with the bound


_CACHE: OrderedDict[bytes, _Model] = OrderedDict()


def _model(problem: Problem) -> _Model:
    model = cached_by_fingerprint(_CACHE, problem, _build)
    model.problem = problem
    return model


# ---- public functions ------------------------------------------------------------------------


def lagrangian_plan(problem: Problem, lam: float) -> list[int]:
    """A valid saved set minimising ``saved_bytes + lam * recompute_cost``, by one min cut.

    Exactly optimal when every shared storage is a view group (``exact_groups``, always so
    without shared storages) and the weights needed no rounding (module docstring);
    otherwise valid and optimal for the cut's weights (members pay their storage each).
    ``lam = 0`` gives the fewest bytes (then least cost), ``lam = inf`` the least cost
    (then fewest bytes). The set is already pruned (``Problem.prune_unused`` keeps it).
    """
    lam = float(lam)
    if not lam >= 0:
        raise ValueError(f"lam must be a non-negative number, got {lam!r}")
    model = _model(problem)
    if lam == 0:
        c, _ = model.lex("bytes")
    elif math.isinf(lam):
        c, _ = model.lex("cost")
    else:
        c, _ = model.cut(*_rational(lam / (model.byte_unit * model.cost_scale), model))
    return c.saved


def _rational(lam_q: float, model: _Model) -> tuple[int, int]:
    """``lam_q`` as p/q small enough for int64 capacities; extremes become lexicographic."""
    sb, sc = max(int(model.w_save.sum()), 1), max(model.sum_cost, 1)
    if lam_q > sb:  # one unit of cost outweighs every byte: least cost, then fewest bytes
        return sb + 1, 1
    if lam_q * (sc + 1) < 1:  # every unit of cost weighs less than one byte
        return 1, sc + 1
    limit = max(1, min((1 << _PRODUCT_BITS) // sb, int((1 << _PRODUCT_BITS) / (lam_q * sc))))
    f = Fraction(lam_q).limit_denominator(limit)
    if f == 0:
        return 1, sc + 1
    return f.numerator, f.denominator


def hull(problem: Problem) -> list[tuple[int, float, list[int]]]:
    """(bytes, cost, saved) at each vertex of the frontier's lower convex hull.

    Sorted by bytes; costs strictly decrease. The first is the fewest-bytes plan (then least
    cost), the last the least-cost plan (then fewest bytes). With exact groups and weights
    every vertex is Pareto-optimal: no plan has as few bytes and less cost.
    """
    pts = _model(problem).points()
    keep = set(_lower_hull([(pt.bytes, pt.cost) for pt in pts]))
    return [(pt.bytes, pt.cost, pt.saved) for pt in pts if (pt.bytes, pt.cost) in keep]


def lower_bound(problem: Problem, target_bytes: int | None) -> float:
    """A proven lower bound on the least recompute cost of a plan with bytes <= target.

    Lagrangian duality: for every lam > 0 and every plan P with bytes(P) <= T,
    ``cost(P) >= (L(lam) - T) / lam`` with ``L(lam) = min_P bytes + lam * cost``; the best
    such bound over lam is the lower convex hull of the (bytes, cost) frontier evaluated at
    T. Computed on weights that never exceed the true ones (floored, shared storages split
    among members where the cut cannot be exact), so it holds for the true problem.
    ``inf`` when no plan can fit; ``target_bytes=None`` gives the least cost of any plan.
    """
    return _model(problem).cost_bound(target_bytes)


# ---- solver ----------------------------------------------------------------------------------


class MinCutSolver(SolverBase):
    """Parametric min-cut: plans on the frontier's convex hull, with a proven bound.

    ``minimize="cost"``: the cheapest hull vertex under the target, or, better, a minimum
    cut on the hull edge that crosses the target (``_Model.fill``); "optimal" only when
    the lower bound proves it, else "feasible" with that bound. Not exact: a target
    strictly inside a hull edge may have cheaper plans off the hull. ``minimize="bytes"``:
    the lam -> 0+ cut (fewest bytes, then least cost), exact with exact groups and costs.
    Polynomial, so ``time_limit`` is not needed.
    """

    name: ClassVar[str] = "mincut"
    exact: ClassVar[bool] = False
    requires: ClassVar[str] = "ortools"
    # building the network checks more than Problem.require_plannable (a node whose
    # inputs can never be available), with its own message
    check_plannable: ClassVar[bool] = False

    def _search(self, request: Request) -> Search:
        problem, target_bytes, minimize, _ = request  # polynomial: no time limit needed
        model = _model(problem)
        if minimize == "bytes":
            low, _ = model.lex("bytes")
            saved, nbytes = low.saved, low.bytes
            if target_bytes is not None and nbytes > target_bytes:
                raise InfeasibleError(
                    f"no plan saves at most {target_bytes} bytes; the smallest reachable "
                    f"is {nbytes} bytes",
                    min_bytes=nbytes,
                )
            bound = model.bytes_bound()
            # Fewest bytes is proven by the (relaxed) bound; the cheapest among them needs
            # exact costs, and exact groups unless no storage is saved at all (the
            # lexicographic cut then ranks every plan of that size by its true cost).
            optimal = nbytes <= bound and model.cost_exact and (model.exact_groups or nbytes == 0)
            return Search(saved, optimal, float(bound), self._info(model))

        pts = model.points()
        fits = [pt for pt in pts if target_bytes is None or pt.bytes <= target_bytes]
        if not fits:
            smallest = min(pt.bytes for pt in pts)
            raise InfeasibleError(
                f"no plan on the mincut hull saves at most {target_bytes} bytes; the smallest "
                f"reachable is {smallest} bytes",
                min_bytes=smallest,
            )
        best = min(fits, key=lambda pt: (pt.cost, pt.bytes))
        bound = model.cost_bound(target_bytes)
        if target_bytes is not None and not _proven(model, best, target_bytes):
            edge = model.edge_after(best)
            if edge is not None:
                filled = model.fill(*edge, target_bytes)
                if filled is not None and (filled.cost, filled.bytes) < (best.cost, best.bytes):
                    best = filled
        return Search(best.saved, _proven(model, best, target_bytes), bound, self._info(model))

    @staticmethod
    def _info(model: _Model) -> dict[str, object]:
        return {
            "backend": "OR-Tools max flow",
            "cuts": model.cuts,  # max flows solved on this problem so far (cached model)
            "hull_points": len(model._sweeps.get("save", [])),
            "exact_groups": model.exact_groups,
            "exact_weights": model.bytes_exact and model.cost_exact,
        }


def _proven(model: _Model, best: _Cut, target_bytes: int | None) -> bool:
    """Is ``best`` provably the least cost under the target, and fewest bytes at that cost?

    Its cost must reach the lower bound at the target, and the bound one byte below its
    own bytes must exceed its cost (no plan with fewer bytes is as cheap). Exact rational
    arithmetic when the costs needed no rounding, else float with a 1e-12 tolerance.
    """
    if model.cost_exact:
        at_target = model.cost_bound_q(target_bytes)
        below = model.cost_bound_q(best.bytes - 1) if best.bytes > 0 else None
        return (
            at_target is not None
            and best.cost_q <= at_target
            and (below is None or below > best.cost_q)
        )
    tol = _REL_TOL * max(abs(best.cost), 1.0)
    below_f = model.cost_bound(best.bytes - 1) if best.bytes > 0 else math.inf
    return best.cost <= model.cost_bound(target_bytes) + tol and below_f > best.cost + tol
