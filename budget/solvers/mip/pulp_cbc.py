"""Exact closure ILP (DESIGN.md) through PuLP, solved with CBC.

Variables: ``s_v`` (saved) and ``r_v`` (recomputed) for each non-input node that allows
them, ``y_g`` for each storage with bytes (on the device), and where the problem prices
offload ``o_v`` for each offloadable saved node and two continuous exposures
(:mod:`budget.solvers.mip.model`). Objectives and the memory row are in integer
units (:class:`~budget.solvers.mip.model.MipWeights`), so a proof with an absolute gap below
one unit is a proof of the exact optimum. Ties are broken exactly by a second solve
(:func:`~budget.solvers.mip.driver.solve_lexicographic`): first minimise the primary
objective, then cap it at its optimum and minimise the other. Measured on the bench
graphs, CBC proves these two stages far more reliably than the single weighted
objective the other MIP backends use, and without a warm start (CBC's warm start made
the second stage run to its time limit on instances it proves quickly cold;
``python bench/solvers.py``). CBC reports no bound through PuLP, so a time-limited solve is "feasible"
with an unknown gap. PuLP is imported only when a problem is solved, so ``import budget``
stays light; OR-Tools is loaded before it (see :func:`_import_pulp`).
"""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any, ClassVar

from ...core.problem import Problem
from .driver import MipResult, MipSolver, Plan
from .model import ClosureModel, MipObjective, MipWeights


def _import_pulp() -> Any:
    """PuLP, imported after OR-Tools.

    ``import pulp`` imports ``highspy`` when it is installed; ``highspy`` >= 1.15 and the
    ``ortools`` wheel ship incompatible libraries of the same name (``libhighs.so.1``), so
    whichever loads first breaks the other (google/or-tools#5246). Loading OR-Tools first
    keeps CP-SAT and the min-cut working in this process (PuLP then only finds its HiGHS
    interface unavailable, which ``ilp`` does not use).
    """
    if importlib.util.find_spec("ortools") is not None:
        import ortools.graph.python.max_flow  # noqa: F401  (loads libortools)
    import pulp

    return pulp


class PulpModel:
    """The closure model as a PuLP problem (a :class:`~budget.solvers.mip.driver.MipModel`),
    with offload where ``weights`` has it (:mod:`budget.solvers.mip.model`)."""

    def __init__(self, pulp: Any, problem: Problem, m: ClosureModel, weights: MipWeights) -> None:
        self.pulp, self.problem = pulp, problem
        model = pulp.LpProblem("budget", pulp.LpMinimize)
        s = {v: model.add_variable(f"s{v}", cat="Binary") for v in m.save}
        r = {v: model.add_variable(f"r{v}", cat="Binary") for v in m.recompute}
        y = {g: model.add_variable(f"y{g}", cat="Binary") for g in m.groups}
        o = {v: model.add_variable(f"o{v}", cat="Binary") for v in m.offload}
        for v in m.need:
            model += pulp.lpSum(x[v] for x in (s, r) if v in x) >= 1, f"need{v}"
        for k, (v, u) in enumerate(m.closure):
            model += r[v] <= pulp.lpSum(x[u] for x in (s, r) if u in x), f"closure{k}"
        for v, g in m.store:  # on the device unless offloaded
            model += y[g] + o.get(v, 0) >= s[v], f"store{v}"
        size = pulp.lpSum(weights.size[g] * y[g] for g in y)
        if weights.capacity is not None:
            model += size <= weights.capacity, "memory"
        self.objectives = {
            "cost": pulp.lpSum(int(weights.cost[v]) * r[v] for v in r if weights.cost[v] > 0)
            + self._offload(model, weights, s, o),
            "bytes": size,
            "host": pulp.lpSum(weights.host[v] * x for v, x in o.items()),
        }
        self.model, self.s, self.r, self.y, self.o = model, s, r, y, o
        self.variables = len(s) + len(r) + len(y) + len(o) + (2 if o else 0)

    def _offload(
        self, model: Any, weights: MipWeights, s: dict[int, Any], o: dict[int, Any]
    ) -> Any:
        """The offload rows (o_v <= s_v; per window, e >= link - window with e >= 0) and
        the offload part of the cost objective (tails and exposures)."""
        pulp, units = self.pulp, weights.offload
        for v, x in o.items():
            model += x <= s[v], f"offload{v}"
        if units is None or not o:
            return 0
        link = pulp.lpSum(units.transfer[v] * x for v, x in o.items() if units.transfer[v])
        total = sum(units.transfer.values())
        price = pulp.lpSum(units.tail[v] * x for v, x in o.items() if units.tail[v])
        for name, window in zip(("forward", "backward"), units.windows, strict=True):
            e = model.add_variable(f"exposed_{name}", lowBound=0, upBound=max(0, total - window))
            model += e >= link - window, f"exposure_{name}"
            price += e
        return price

    def minimize(
        self,
        objective: dict[MipObjective, float],
        time_limit: float,
        hint: Plan | None,
        gap: float = 0.5,
    ) -> MipResult:
        """As the protocol; ``hint`` is ignored (module docstring)."""
        pulp, model = self.pulp, self.model
        model.setObjective(pulp.lpSum(w * self.objectives[k] for k, w in objective.items()))
        with warnings.catch_warnings():
            # PuLP 3.3 deprecates its bundled CBC in favour of pulp[cbc] for 4.0; we pin pulp<4.
            warnings.simplefilter("ignore", DeprecationWarning)
            # gapRel 0 and an absolute gap below one unit: "optimal" is the exact optimum
            # (the offload cost's own gap aside, MipWeights.cost_gap).
            command = pulp.PULP_CBC_CMD(
                msg=False,
                timeLimit=max(1, int(time_limit)),
                threads=1,
                gapRel=0.0,
                gapAbs=gap,
            )
            model.solve(command)
        if model.status == pulp.LpStatusInfeasible:
            return MipResult("infeasible", [])
        if model.sol_status == pulp.LpSolutionOptimal:
            status = "optimal"
        elif model.sol_status == pulp.LpSolutionIntegerFeasible:
            status = "feasible"
        else:
            return MipResult("none", [])
        saved = sorted(v for v, x in self.s.items() if (x.varValue or 0) > 0.5)
        away = sorted(v for v, x in self.o.items() if (x.varValue or 0) > 0.5)
        return MipResult(status, saved, offloaded=away)  # type: ignore[arg-type]

    def cap(self, which: MipObjective, units: int) -> None:
        self.model += self.objectives[which] <= units + 0.5, f"cap_{which}"


class PulpILP(MipSolver):
    name: ClassVar[str] = "ilp"
    requires: ClassVar[str] = "pulp"
    one_solve: ClassVar[bool] = False  # two stages (module docstring)

    def build(
        self, problem: Problem, m: ClosureModel, weights: MipWeights
    ) -> tuple[PulpModel, dict[str, object]]:
        pulp_model = PulpModel(_import_pulp(), problem, m, weights)
        return pulp_model, {"backend": "CBC", "variables": pulp_model.variables}
