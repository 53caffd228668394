"""What the commands print: ``budget solve``'s report, ``budget sweep``'s table, CSV and
JSON. Built from the plan reports of :mod:`budget.core.report`; returns text, prints nothing
(the command does)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..core.plan import Plan, step_peak, sweep_peaks
from ..core.report import format_status, plan_report
from ..core.sizes import format_bytes
from ..core.text import (
    budget_cell,
    cost_scale,
    format_cost,
    format_flops,
    format_seconds,
    wrap_items,
)
from ..core.versus import equal_memory_ratio, recompute_ratio, sweep_scale
from ..planning.tie_break import TIE_TOLERANCE

if TYPE_CHECKING:
    from ..eager.plan import EagerPlan


def solve_report(
    plans: Sequence[Plan],
    target: str,
    *,
    depth: int = 2,
    top: int = 10,
    timings: Mapping[str, float] | None = None,
    compiled: bool = False,
    size: int | None = None,
) -> str:
    """What ``budget solve`` prints: the target, a report per graph, step totals when the
    step has several graphs, and the command's own ``timings`` (load, trace, ...).
    ``compiled``: the plans are a compiled preview's (``--compile``: training's compiles,
    their code's peaks), not a plain preview's. ``size``: a
    memory budget given as a size, the step's, whose share each graph's budget line shows."""
    parts = ["\n".join(wrap_items("budget solve", target.split(), sep=""))]
    for i, plan in enumerate(plans):
        parts.append(plan_report(plan, index=i, count=len(plans), depth=depth, top=top))
    if len(plans) > 1:
        units = {p.cost_unit for p in plans}
        cost = (
            format_cost(sum(p.total_recompute_cost for p in plans), plans[0].cost_unit)
            if len(units) == 1
            else "mixed units"
        )
        kept = sum(p.kept_input_bytes for p in plans)
        eager = sum(p.eager_saved_bytes for p in plans)
        outside = (
            f"\n  after graph breaks, {format_bytes(kept)} of activations of the code between "
            "graphs are kept for the backward by later graphs, and eager code between graphs "
            f"saves {format_bytes(eager)} for its own: outside the plans"
            if kept or eager or any(p.graph_break for p in plans)
            else ""
        )
        parts.append(
            f"step ({len(plans)} graphs): saved "
            f"{format_bytes(sum(p.saved_bytes for p in plans))}, recompute {cost}, "
            f"{format_flops(sum(p.recompute_flops + p.again_flops for p in plans))}{outside}"
            f"{_step_size_line(plans, size)}{_step_peak_line(plans)}"
        )
    if not compiled and any(_previewed_under_inductor(p) for p in plans):
        parts.append(
            "peaks are predicted from the graphs; Inductor fuses and reorders them, so its\n"
            "code peaks elsewhere (most often lower, on some models a little higher):\n"
            "--compile gives the peak of the generated code, which training checks a peak\n"
            "budget on"
        )
    if timings:
        items = [f"{k} {format_seconds(v)}" for k, v in timings.items()]
        parts.append("\n".join(wrap_items("wall time", items)))
    return "\n\n".join(parts)


def _step_size_line(plans: Sequence[Plan], size: int | None) -> str:
    """What the step keeps for the backward against a size memory budget: the most, over
    its graphs, of what a graph keeps with what is held outside it (its runs counted)."""
    if size is None:
        return ""
    keeps = max(p.step_keeps_bytes or p.saved_bytes + p.kept_input_bytes for p in plans)
    return (
        f"\n  memory budget {format_bytes(size)} is the step's: it keeps {format_bytes(keeps)} "
        "for the backward (each graph's budget above is its share)"
    )


def _step_peak_line(plans: Sequence[Plan]) -> str:
    """The step's predicted peak, where it is met, and what is held outside that graph."""
    found = step_peak(plans)
    if found is None:
        return ""
    peak, at = found
    outside = (plans[at].held_bytes or 0) + plans[at].kept_input_bytes
    return (
        f"\n  peak {format_bytes(peak)} predicted for the step, while graph {at + 1} runs: "
        f"{format_bytes(outside)} held outside it by the code before it"
    )


def _previewed_under_inductor(plan: Plan) -> bool:
    return (
        plan.compiler == "inductor"
        and plan.peak_bytes is not None
        and (plan.compiled_peak_bytes is None)
    )


def eager_solve_report(
    plan: EagerPlan,
    target: str,
    *,
    depth: int = 2,
    top: int = 10,
    timings: Mapping[str, float] | None = None,
) -> str:
    """What ``budget solve --eager`` prints: the target, the plan's report, its modules
    and their per-op policies, and the command's own ``timings``."""
    from ..eager.report import eager_report

    parts = ["\n".join(wrap_items("budget solve --eager", target.split(), sep=""))]
    parts.append(eager_report(plan, depth=depth, top=top, ops=True))
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
        better = dominating_peaks(plans)
        rows = [*_sweep_rows(plans, better), *_sweep_notes(plans, better), *_torch_rows(plans)]
        parts.append("\n".join(rows))
    return "\n\n".join(parts)


def _torch_rows(plans: Sequence[Plan]) -> list[str]:
    """torch's own plan at each budget (``vs_torch``): what it saves, its graphs' predicted
    peak (a prediction under a compiled sweep too: torch's code is not generated) and its
    recompute, as a multiple of budget's; none where no plan carries one."""
    if all(p.torch_plan is None for p in plans):
        return []
    unit, scale = plans[0].cost_unit, sweep_scale(plans)
    head = f"  {'budget':>9} {'saved':>10} {'predicted':>10} {'recompute':>11}  vs budget's"
    equal = any(
        p.torch_plan is not None and p.torch_plan.budget_recompute_cost is not None for p in plans
    )
    if equal:  # torch's recompute over budget's plan's at the bytes torch's plan saves
        head += "  at its bytes"
    if any(p.torch_plan is not None and p.torch_plan.modules for p in plans):
        # an eager sweep's: torch's checkpointing of every module, the same at every budget
        what = "  torch's checkpoint_wrapper on every module (each whole), beside each budget:"
    else:
        what = "  torch's partitioner at the same budgets (activation_memory_budget):"
    inside = max((p.torch_plan.kept_inside_bytes for p in plans if p.torch_plan), default=0)
    if inside:  # what budget keeps in the modules that torch would run again
        what += f"\n  (but for {format_bytes(inside)} in them budget never recomputes)"
    rows = ["", what, head]
    for p in plans:
        theirs = p.torch_plan
        if theirs is None:
            continue
        peak = "-" if theirs.peak_bytes is None else format_bytes(theirs.peak_bytes)
        peak = "refused" if theirs.refused else peak
        ratio, at_bytes = recompute_ratio(p), equal_memory_ratio(p)
        times = "" if ratio is None else f"{ratio:.2f}x"
        if equal:
            cell = "" if at_bytes is None else f"{at_bytes:.2f}x"
            if theirs.budget_recompute_cost == 0 and theirs.recompute_cost > 0:
                cell = "budget: 0"  # budget recomputes nothing saving as much
            times = f"{times:>11}  {cell:>12}"
        rows.append(
            f"  {budget_cell(p.budget):>9} {format_bytes(theirs.saved_bytes):>10} {peak:>10} "
            f"{format_cost(theirs.recompute_cost, unit, scale):>11}  {times}".rstrip()
        )
    return rows


def _sweep_rows(plans: Sequence[Plan], better: Mapping[int, int]) -> list[str]:
    """One graph's header and a row per budget; the peak the rows are compared on (the
    code's where compiled: ``sweep_peaks``) is flagged ``!`` where a plan of no more
    recompute peaks lower (``better``)."""
    unit = plans[0].cost_unit
    scale = cost_scale([p.total_recompute_cost for p in plans], unit)
    flop_scale = cost_scale([p.recompute_flops + p.again_flops for p in plans], "flop")
    with_flops = unit != "flop"
    with_peak = any(p.peak_bytes is not None for p in plans)
    with_code = any(p.compiled_peak_bytes is not None for p in plans)
    with_host = any(p.offloaded_bytes for p in plans)
    head = f"  {'budget':>9} {'target':>10} {'saved':>10}"
    head += f" {'offloaded':>10}" if with_host else ""
    head += f" {'peak':>10}" if with_peak else ""
    head += f" {'compiled':>10}" if with_code else ""
    head += f" {'recompute':>11}"
    head += f" {'FLOPs':>12}" if with_flops else ""
    rows = [head + "  status"]
    for i, p in enumerate(plans):
        row = (
            f"  {budget_cell(p.budget):>9} {format_bytes(p.target_bytes):>10} "
            f"{format_bytes(p.saved_bytes):>10}"
        )
        if with_host:
            row += f" {format_bytes(p.offloaded_bytes):>10}"
        for shown, nbytes, compared in (
            (with_peak, p.peak_bytes, not with_code),
            (with_code, p.compiled_peak_bytes, with_code),
        ):
            if shown:
                mark = "!" if i in better and compared else ""
                row += f" {('-' if nbytes is None else format_bytes(nbytes)) + mark:>10}"
        row += f" {format_cost(p.total_recompute_cost, unit, scale):>11}"
        if with_flops:
            flops = p.recompute_flops + p.again_flops
            row += f" {format_cost(flops, 'flop', flop_scale):>12}"
        rows.append(f"{row}  {_status_cell(p)}")
    return rows


def _sweep_notes(plans: Sequence[Plan], better: Mapping[int, int]) -> list[str]:
    """What a graph's ``!`` and ``tie-break`` cells mean, where it has them."""
    notes, peaks = [], sweep_peaks(plans)
    for i, j in better.items():
        a, b = plans[i], plans[j]
        notes.append(
            f"  ! budget {budget_cell(a.budget)}: {format_bytes(peaks[i] or 0)} "
            f"peak; budget {budget_cell(b.budget)}: {format_bytes(peaks[j] or 0)}, "
            "no more recompute"
        )
    if any(_status_cell(p) == "tie-break" for p in plans):
        notes.append(
            f"  tie-break: up to {TIE_TOLERANCE:.1%} of the forward's recompute more, "
            "for a lower peak"
        )
    return notes


def _status_cell(plan: Plan) -> str:
    """A sweep row's status: the solver's, or ``tie-break`` where the tie-break gave a
    plan of a little more recompute than the budget's cheapest (its gap is that, not a
    solver's shortfall)."""
    if plan.tie_broken and plan.status == "feasible":
        return "tie-break"
    return plan.status if plan.status != "feasible" else format_status(plan).replace(", gap", "")


def dominating_peaks(plans: Sequence[Plan]) -> dict[int, int]:
    """Plans whose peak (``sweep_peaks``: all the code's, or all the graphs') is above that
    of a plan with no more recompute: index -> the index of the lowest-peak such plan (a
    sweep flags them: the user pays recompute for nothing, or worse)."""
    out: dict[int, int] = {}
    peaks = sweep_peaks(plans)
    for i, p in enumerate(plans):
        mine = peaks[i]
        if mine is None:
            continue
        rivals = [
            j
            for j, q in enumerate(plans)
            if (theirs := peaks[j]) is not None
            and theirs < mine
            and q.total_recompute_cost <= p.total_recompute_cost
        ]
        if rivals:
            out[i] = min(rivals, key=lambda j: (peaks[j], plans[j].total_recompute_cost))
    return out


SWEEP_CSV_COLUMNS = (
    "graph",
    "graph_hash",
    "budget",
    "target_bytes",
    "saved_bytes",
    "peak_bytes",
    "compiled_peak_bytes",
    "min_bytes",
    "max_bytes",
    "recompute_cost",
    "cost_unit",
    "recompute_flops",
    "again_cost",
    "again_flops",
    "status",
    "gap",
    "solver",
    "estimator",
    # torch's own plan at the budget (sweeps with vs_torch; empty otherwise)
    "torch_saved_bytes",
    "torch_peak_bytes",
    "torch_recompute_cost",
    "torch_recompute_flops",
    # what budget's plan saving as much as torch's recomputes (TorchPlan.budget_recompute_cost)
    "budget_recompute_cost_at_torch_bytes",
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
                    "" if p.peak_bytes is None else p.peak_bytes,
                    "" if p.compiled_peak_bytes is None else p.compiled_peak_bytes,
                    p.min_bytes,
                    p.max_bytes,
                    repr(p.recompute_cost),
                    p.cost_unit,
                    repr(p.recompute_flops),
                    repr(p.again_cost),
                    repr(p.again_flops),
                    p.status,
                    "" if p.gap is None else repr(p.gap),
                    p.solver,
                    p.estimator,
                    *_torch_cells(p),
                ]
            )
    return buf.getvalue().rstrip("\n")


def _torch_cells(plan: Plan) -> list[object]:
    theirs = plan.torch_plan
    if theirs is None:
        return ["", "", "", "", ""]
    peak = "" if theirs.peak_bytes is None else theirs.peak_bytes
    ours = theirs.budget_recompute_cost
    return [
        theirs.saved_bytes,
        peak,
        repr(theirs.recompute_cost),
        repr(theirs.recompute_flops),
        "" if ours is None else repr(ours),
    ]


def sweep_json(sweeps: Sequence[Sequence[Plan]], target: str = "") -> str:
    """The sweep as JSON: ``{"target": ..., "graphs": [[plan, ...] per graph]}``."""
    data = {
        "target": target,
        "graphs": [[p.to_dict() for p in plans] for plans in sweeps],
    }
    return json.dumps(data, indent=2)
