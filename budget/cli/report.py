"""What the commands print: ``budget solve``'s report, ``budget sweep``'s table, CSV and
JSON. Built from the plan reports of :mod:`budget.core.report`; returns text, prints nothing
(the command does)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence

from ..core.plan import Plan
from ..core.report import (
    budget_cell,
    cost_scale,
    format_cost,
    format_flops,
    format_seconds,
    format_status,
    plan_report,
    wrap_items,
)
from ..core.sizes import format_bytes


def solve_report(
    plans: Sequence[Plan],
    target: str,
    *,
    depth: int = 2,
    top: int = 10,
    timings: Mapping[str, float] | None = None,
) -> str:
    """What ``budget solve`` prints: the target, a report per graph, step totals when the
    step has several graphs, and the command's own ``timings`` (load, trace, ...)."""
    parts = ["\n".join(wrap_items("budget solve", target.split(), sep=""))]
    for i, plan in enumerate(plans):
        parts.append(plan_report(plan, index=i, count=len(plans), depth=depth, top=top))
    if len(plans) > 1:
        units = {p.cost_unit for p in plans}
        cost = (
            format_cost(sum(p.recompute_cost for p in plans), plans[0].cost_unit)
            if len(units) == 1
            else "mixed units"
        )
        parts.append(
            f"step ({len(plans)} graphs): saved "
            f"{format_bytes(sum(p.saved_bytes for p in plans))}, recompute {cost}, "
            f"{format_flops(sum(p.recompute_flops for p in plans))}"
        )
    if timings:
        items = [f"{k} {format_seconds(v)}" for k, v in timings.items()]
        parts.append("\n".join(wrap_items("wall time", items)))
    return "\n\n".join(parts)


# --------------------------------------------------------------------------- sweeps


def sweep_table(sweeps: Sequence[Sequence[Plan]], target: str = "") -> str:
    """The Pareto table of a sweep: one block per graph, one row per budget."""
    parts = ["\n".join(wrap_items("budget sweep", target.split(), sep=""))]
    for i, plans in enumerate(sweeps):
        if not plans:
            continue
        first = plans[0]
        parts.append(
            f"graph {first.graph_hash} ({i + 1} of {len(sweeps)}): range "
            f"{format_bytes(first.min_bytes)} .. {format_bytes(first.max_bytes)}\n"
            f"  solver {first.solver if first.status != 'reference' else plans[-1].solver}, "
            f"estimator {first.estimator}"
            + (f", compiler {first.compiler}" if first.compiler else "")
        )
        unit = first.cost_unit
        scale = cost_scale([p.recompute_cost for p in plans], unit)
        flop_scale = cost_scale([p.recompute_flops for p in plans], "flop")
        with_flops = unit != "flop"
        head = f"  {'budget':>9} {'target':>11} {'saved':>11} {'recompute':>13}"
        head += f" {'FLOPs':>13}" if with_flops else ""
        head += "  status"
        rows = [head]
        for p in plans:
            row = (
                f"  {budget_cell(p.budget):>9} {format_bytes(p.target_bytes):>11} "
                f"{format_bytes(p.saved_bytes):>11} "
                f"{format_cost(p.recompute_cost, unit, scale):>13}"
            )
            if with_flops:
                row += f" {format_cost(p.recompute_flops, 'flop', flop_scale):>13}"
            status = p.status if p.status != "feasible" else format_status(p).replace(", gap", "")
            rows.append(f"{row}  {status}")
        parts.append("\n".join(rows))
    return "\n\n".join(parts)


SWEEP_CSV_COLUMNS = (
    "graph",
    "graph_hash",
    "budget",
    "target_bytes",
    "saved_bytes",
    "min_bytes",
    "max_bytes",
    "recompute_cost",
    "cost_unit",
    "recompute_flops",
    "status",
    "gap",
    "solver",
    "estimator",
)


def sweep_csv(sweeps: Sequence[Sequence[Plan]]) -> str:
    """The sweep as CSV, one row per (graph, budget), exact numbers."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(SWEEP_CSV_COLUMNS)
    for i, plans in enumerate(sweeps):
        for p in plans:
            writer.writerow(
                [
                    i,
                    p.graph_hash,
                    p.budget,
                    p.target_bytes,
                    p.saved_bytes,
                    p.min_bytes,
                    p.max_bytes,
                    repr(p.recompute_cost),
                    p.cost_unit,
                    repr(p.recompute_flops),
                    p.status,
                    "" if p.gap is None else repr(p.gap),
                    p.solver,
                    p.estimator,
                ]
            )
    return buf.getvalue().rstrip("\n")


def sweep_json(sweeps: Sequence[Sequence[Plan]], target: str = "") -> str:
    """The sweep as JSON: ``{"target": ..., "graphs": [[plan, ...] per graph]}``."""
    data = {
        "target": target,
        "graphs": [[p.to_dict() for p in plans] for plans in sweeps],
    }
    return json.dumps(data, indent=2)
