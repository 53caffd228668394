"""Exact closure ILP (DESIGN.md) with OR-Tools CP-SAT.

Same model as ``ilp`` (s, r, y booleans; need, closure, storage and memory rows) with
integer coefficients: bytes exactly, costs rounded to integers after scaling so the
largest is ~1e9 (FLOP counts are integers already and stay exact below that). CP-SAT
reports a proven bound, so a time-limited solve returns its gap. Ties are broken by a
second solve that caps the first objective at its optimum (plus the rounding's slack),
hinted with the first plan. With offload the cost's solve stops within
``OffloadTerms.gap`` of its bound (CP-SAT's ``absolute_gap_limit``; DESIGN.md, "Offload").
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import ClassVar

from ...core.problem import Problem
from ..base import InfeasibleError, Objective, Request, Search, SolverBase, no_plan_in_time
from .model import closure_model, integer_costs, offload_units, proof_gap, unit_scale


class CpSat(SolverBase):
    name: ClassVar[str] = "cpsat"
    exact: ClassVar[bool] = True
    reduce: ClassVar[bool] = True  # measured faster on the bench graphs (bench/solvers.py)
    requires: ClassVar[str] = "ortools"
    plans_offload: ClassVar[bool] = True

    def __init__(self, workers: int = 1, seed: int = 0, hint: Sequence[int] | None = None) -> None:
        """``hint``: a valid saved set of the problems to be solved, to start from (a warm
        start; ``auto`` gives CP-SAT the min-cut's plan)."""
        self.workers = workers
        self.seed = seed
        self.hint = hint

    def _search(self, request: Request) -> Search:
        from ortools.sat.python import cp_model

        problem, target_bytes, minimize, time_limit = request
        start = time.perf_counter()
        model = cp_model.CpModel()
        s, r, y, o, offload_expr = _build(model, problem, target_bytes)
        if self.hint is not None:
            _add_hint(model, problem, self.hint, s, r, y)
        w = integer_costs(problem)
        cost_expr = sum(int(w[v]) * r[v] for v in r if w[v] > 0) + offload_expr
        bytes_expr = sum(int(problem.storage_bytes[g]) * y[g] for g in y)
        first, second = (cost_expr, bytes_expr) if minimize == "cost" else (bytes_expr, cost_expr)
        # Costs rounded to units can part plans whose costs are equal: each term is off by
        # at most half a unit, so the tie-break admits the cheapest cost plus one unit per
        # rounded term (a relative 1e-9 each) rather than miss the plan with fewer bytes.
        rounded = minimize == "cost" and unit_scale(problem) != 1.0
        slack = (sum(1 for v in r if w[v] > 0) + 2 * len(o)) if rounded else 0

        # the cost is proven to within its gap where something may be offloaded (exact
        # otherwise: MipWeights.cost_gap)
        def gap(goal: object) -> float:
            return proof_gap(problem, bool(o)) if goal is cost_expr else 0.5

        model.minimize(first)
        solver, status = self._run(cp_model, model, time_limit, gap(first))
        if status == cp_model.INFEASIBLE:
            raise InfeasibleError(f"no plan saves at most {target_bytes} bytes")
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            raise no_plan_in_time(self.name, time_limit, problem)
        optimal = status == cp_model.OPTIMAL
        tie_break = "not run"
        bound = solver.best_objective_bound
        best_value = solver.objective_value
        values = {v: solver.value(x) for v, x in s.items()}
        away = {v: solver.value(x) for v, x in o.items()}
        # Ties go to the other objective, then (with offload) to the fewest host bytes:
        # nothing is offloaded that neither saves time nor frees device memory.
        host_expr = sum(problem.node_bytes(v) * x for v, x in o.items())
        stages = [(first, best_value, slack), (second, None, 0)]
        if o:
            stages.append((host_expr, None, 0))
        for (capped, value, extra), (goal, _, _) in zip(stages, stages[1:], strict=False):
            remaining = time_limit - (time.perf_counter() - start)
            if not optimal or remaining <= 0 or tie_break == "not proven":
                break
            model.clear_hints()  # a variable hinted twice makes the model invalid
            for x in (*s.values(), *r.values(), *y.values(), *o.values()):
                model.add_hint(x, solver.value(x))
            model.add(
                capped <= int(round(solver.objective_value if value is None else value)) + extra
            )
            model.minimize(goal)
            solver, status = self._run(cp_model, model, remaining, gap(goal))
            if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                tie_break = "not proven"
                break
            values = {v: solver.value(x) for v, x in s.items()}
            away = {v: solver.value(x) for v, x in o.items()}
            tie_break = "optimal" if status == cp_model.OPTIMAL else "not proven"
        return Search(
            sorted(v for v, val in values.items() if val),
            optimal=optimal,
            bound=_unscale(bound, problem, minimize),
            info={
                "backend": "CP-SAT",
                "variables": len(s) + len(r) + len(y) + len(o),
                "tie_break": tie_break,
            },
            offloaded=sorted(v for v, val in away.items() if val),
        )

    def _run(self, cp_model, model, time_limit: float, gap: float):  # type: ignore[no-untyped-def]
        """One CP-SAT solve of ``model`` to within an absolute ``gap`` (units): the
        CpSolver (its values) and the status.

        One worker (deterministic) with the LP of CP-SAT's ``max_lp_sym`` subsolver: the
        full linear relaxation, with the symmetries presolve finds kept in the LP. A model
        of identical layers (the same choices priced the same in each) is symmetric: the
        default single worker can run to its time limit there without the proof this bound
        gives (tests/solvers/test_cpsat.py holds such a problem)."""
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = max(0.1, float(time_limit))
        solver.parameters.num_workers = self.workers
        solver.parameters.random_seed = self.seed
        solver.parameters.linearization_level = 2
        solver.parameters.use_symmetry_in_lp = True
        solver.parameters.absolute_gap_limit = gap
        status = solver.solve(model)
        if status == cp_model.MODEL_INVALID:  # a bug of ours, never a user error
            raise RuntimeError(f"cpsat: invalid model: {model.validate()}")
        return solver, status


def _unscale(bound: float, problem: Problem, minimize: Objective) -> float:
    if minimize == "bytes":
        return float(bound)
    return float(bound) / unit_scale(problem)


def _add_hint(model, problem: Problem, saved: Sequence[int], s, r, y) -> None:  # type: ignore[no-untyped-def]
    kept = set(saved)
    redo = set(problem.recompute_closure(kept))
    groups = {int(problem.storage[v]) for v in kept if problem.storage[v] >= 0}
    for v, x in s.items():
        model.add_hint(x, v in kept)
    for v, x in r.items():
        model.add_hint(x, v in redo)
    for g, x in y.items():
        model.add_hint(x, g in groups)


def _build(model, problem: Problem, target_bytes: int | None):  # type: ignore[no-untyped-def]
    """The closure model's variables and rows (DESIGN.md), with offload where the problem
    plans it: o_v keeps a saved value on the host (o_v -> s_v; its storage is then on the
    device only through another saved value), priced by its tail and by the two passes'
    link time beyond their windows (budget.core.offload). Returns s, r, y, o and the
    offload part of the cost objective."""
    m = closure_model(problem)
    units = offload_units(problem, m)
    s = {v: model.new_bool_var(f"s{v}") for v in m.save}
    r = {v: model.new_bool_var(f"r{v}") for v in m.recompute}
    y = {g: model.new_bool_var(f"y{g}") for g in m.groups}
    o = {v: model.new_bool_var(f"o{v}") for v in (units.transfer if units else ())}
    for v in m.need:
        model.add_bool_or([x[v] for x in (s, r) if v in x])
    for v, u in m.closure:
        options = [x[u] for x in (s, r) if u in x]
        if options:
            model.add_bool_or(options).only_enforce_if(r[v])
        else:
            model.add(r[v] == 0)
    for v, g in m.store:
        if v in o:  # on the device unless offloaded
            model.add_bool_or([y[g], o[v]]).only_enforce_if(s[v])
        else:
            model.add_implication(s[v], y[g])
    for v, x in o.items():
        model.add_implication(x, s[v])
    if target_bytes is not None:
        model.add(sum(int(problem.storage_bytes[g]) * y[g] for g in y) <= int(target_bytes))
    offload_expr = 0
    if units is not None and o:
        link = sum(units.transfer[v] * o[v] for v in o)
        total = sum(units.transfer.values())
        offload_expr = sum(units.tail[v] * o[v] for v in o if units.tail[v])
        for window in (units.forward_window, units.backward_window):
            exposed = model.new_int_var(0, max(0, total - window), "exposed")
            model.add(exposed >= link - window)
            offload_expr += exposed
    return s, r, y, o, offload_expr
