"""A plan as text: ``str(plan)``, and the pieces the command reports are made of.

Pure string formatting: every function takes plans and returns text; nothing here prints
or imports torch. Reports fit an 80-column terminal: long module and node names are
shortened in the middle. Costs are shown in the plan's own ``cost_unit`` (seconds, FLOPs,
ops...), never assumed; FLOPs are shown beside them when the unit is not FLOPs.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from .offload import PROOF_GAP
from .sizes import format_bytes
from .tables import largest_decisions, module_table
from .text import (
    WIDTH,
    describe_budget,
    format_seconds,
    shorten,
    with_unit,
    wrap_items,
)
from .versus import torch_lines

if TYPE_CHECKING:  # plan.py imports this module for Plan.__str__
    from .plan import Plan


def format_status(plan: Plan) -> str:
    """``optimal`` (for a plan that offloads: its cost to the offload's proof gap),
    ``feasible`` with its gap, or for a plan the tie-break took at more recompute than the
    optimum, that share (the tie-break's choice, not a solver's gap)."""
    if plan.status == "optimal" and plan.offloaded:
        return f"optimal to {PROOF_GAP:.1%} of the step"
    if plan.status != "feasible":
        return plan.status
    if plan.tie_broken:
        return "tie-break" + ("" if plan.gap is None else f": {plan.gap:.2%} over the optimum")
    return "feasible, gap ?" if plan.gap is None else f"feasible, gap {plan.gap:.2%}"


# --------------------------------------------------------------------------- one plan


def plan_header(plan: Plan, *, index: int = 0, count: int = 1) -> str:
    """Budget, target, both ends, saved bytes, recompute cost, solver, estimator, timings."""
    lines = [f"graph {plan.graph_hash} ({index + 1} of {count})" + _provenance(plan)]
    budget = describe_budget(plan.budget)
    lines.append(f"  budget     {budget} -> target {format_bytes(plan.target_bytes)}")
    lines.append(
        f"  range      {format_bytes(plan.min_bytes)} (budget 0) .. "
        f"{format_bytes(plan.max_bytes)} (budget 1)"
    )
    share = (
        f" ({plan.saved_bytes / plan.max_bytes:.1%} of the budget-1 end)" if plan.max_bytes else ""
    )
    lines.append(f"  saved      {format_bytes(plan.saved_bytes)}{share}")
    lines += _offload_lines(plan) + _outside_lines(plan) + _guessed_lines(plan)
    lines += _peak_lines(plan)
    lines.append(f"  recompute  {_cost_line(plan)}")
    lines += _again_lines(plan) + torch_lines(plan)
    if plan.graph_break:
        lines.append(f"  ends at    a graph break: {plan.graph_break}")
    if plan.previewed_on == "the example inputs":
        lines += [
            "  preview    ran on the example inputs (code outside the graphs reads tensor",
            "             values): the graphs and branches training meets with these inputs",
        ]
    lines.append(f"  solver     {plan.solver}: {format_status(plan)}; estimator {plan.estimator}")
    if plan.timings:
        items = [f"{k} {format_seconds(v)}" for k, v in plan.timings.items()]
        lines.extend(wrap_items("  timings   ", items))
    return "\n".join(lines)


def plan_line(plan: Plan) -> str:
    """The plan in one line, for a log: graph, budget, saved bytes, recompute, peak, status
    (the log's own time stamps say how long planning took)."""
    line = f"graph {plan.graph_hash[:8]}"
    line += f" ({plan.compiler})" if plan.compiler else ""
    line += f": budget {describe_budget(plan.budget)}"
    if plan.peak_target_bytes is not None:
        line += f", peak target {format_bytes(plan.peak_target_bytes)}"
    line += (
        f"; saves {format_bytes(plan.saved_bytes)} of {format_bytes(plan.max_bytes)}"
        f" (target {format_bytes(plan.target_bytes)})"
    )
    if plan.offloaded_bytes:
        line += f", offloads {format_bytes(plan.offloaded_bytes)}"
    line += f", recomputes {with_unit(plan.total_recompute_cost, plan.cost_unit)}"
    if plan.compiled_peak_bytes is not None:
        line += f", code peak {format_bytes(plan.compiled_peak_bytes)}"
    elif plan.peak_bytes is not None:
        line += f", predicted peak {format_bytes(plan.peak_bytes)}"
    # no total time: a peak search's timing spans the solves timed beside it
    line += f"; {format_status(plan)}"
    return line + (f"; ends at a graph break ({plan.graph_break})" if plan.graph_break else "")


def _outside_lines(plan: Plan) -> list[str]:
    """What the graph keeps outside its decisions: layout copies, inputs, eager saves."""
    lines = []
    if plan.copied_input_bytes:
        lines.append(
            f"             of which {format_bytes(plan.copied_input_bytes)}: Inductor's "
            "channels-last copies of conv inputs"
        )
    if plan.rng_state_bytes:
        lines.append(
            f"             of which {format_bytes(plan.rng_state_bytes)}: generator states "
            "for random ops the model's own checkpointing recomputes"
        )
    if plan.kept_input_bytes:
        lines.append(
            f"  inputs     {format_bytes(plan.kept_input_bytes)} kept for the backward: "
            "activations of the code before this graph, outside the plan"
        )
    if plan.eager_saved_bytes:
        lines.append(
            f"  eager      {format_bytes(plan.eager_saved_bytes)} saved for the backward by "
            "eager code after this graph, outside the plans"
        )
        most = [f"{_file_names(w)} ({format_bytes(n)})" for w, n in plan.eager_saved_at.items()]
        if most:
            lines.append("             at " + shorten(", ".join(most[:3]), WIDTH - 16))
        if plan.eager_guessed_at:
            guessed = ", ".join(_file_names(w) for w in plan.eager_guessed_at)
            lines += [
                "             of which a guess, sizes torch bounds nowhere (a",
                "             torch._check(n <= K) bounds them): " + shorten(guessed, WIDTH - 48),
            ]
    return lines


def _file_names(where: str) -> str:
    """``model.py:12 from train.py:3`` for the paths of ``Plan.eager_saved_at``'s keys."""
    return " from ".join(part.rsplit("/", 1)[-1] for part in where.split(" from "))


def _guessed_lines(plan: Plan) -> list[str]:
    """The values whose sizes depend on tensor values: at an upper bound, or at a guess."""
    lines = []
    for names, how, priced in (
        (plan.bounded_sizes, "bounded", "its upper bound, never under the step's:"),
        (plan.guessed_sizes, "guessed", "a guess (a torch._check(n <= K) bounds it):"),
    ):
        if names:
            n = len(names)
            values = "1 value's size depends" if n == 1 else f"{n} values' sizes depend"
            lines += [
                f"  {how:<10} {values} on tensor values, each priced at",
                f"             {priced}",
                "             " + shorten(", ".join(names), WIDTH - 13),
            ]
    return lines


def _peak_lines(plan: Plan) -> list[str]:
    """The predicted peak, against b=1's; the tie-break; the generated code's peak."""
    lines = []
    if plan.peak_bytes is not None:
        bound = (
            f", planned for at most {format_bytes(plan.peak_target_bytes)}"
            if plan.peak_target_bytes is not None
            else ""
        )
        lines.append(
            f"  peak       {format_bytes(plan.peak_bytes)} predicted (forward + backward){bound}"
        )
        if plan.reference_peak_bytes and plan.status != "reference":  # not b=1's itself
            ratio = plan.peak_bytes / plan.reference_peak_bytes
            lines.append(
                f"             {ratio:.2f}x the b=1 plan's {format_bytes(plan.reference_peak_bytes)}"
                " (torch's saved set at budget 1)"
            )
    if plan.tie_break:
        lines += textwrap.wrap(
            plan.tie_break, 80, initial_indent="  tie-break  ", subsequent_indent=" " * 13
        )
    if plan.training_check:
        lines += textwrap.wrap(
            plan.training_check, 80, initial_indent="  training   ", subsequent_indent=" " * 13
        )
    if plan.compiled_peak_bytes is not None:
        lines.append(
            f"  compiled   {format_bytes(plan.compiled_peak_bytes)} peak of the code Inductor "
            "generated (what the step peaks at)"
        )
        lines += _b1_code_lines(plan.compiled_peak_bytes, plan.reference_compiled_peak_bytes)
    return lines


def _b1_code_lines(compiled: int, b1: int | None) -> list[str]:
    """The generated code's peak against the b=1 plan's, where both were compiled."""
    if not b1:
        return []
    if compiled <= b1:
        return [f"             at most the b=1 plan's code ({format_bytes(b1)})"]
    return [
        f"             ABOVE the b=1 plan's code ({format_bytes(b1)}, {compiled / b1:.2f}x): "
        "the lowest found within this budget"
    ]


def _again_lines(plan: Plan) -> list[str]:
    """Values recomputed more than once, and the caution where Inductor may move them."""
    if not plan.recomputed_again:
        return []
    extra = with_unit(plan.again_cost, plan.cost_unit)
    if plan.cost_unit != "flop":
        extra += f", {with_unit(plan.again_flops, 'flop')}"
    lines = [
        f"  again      {len(plan.recomputed_again)} more recomputations of "
        f"{len(set(plan.recomputed_again))} values, rather than holding them through the "
        f"peak: +{extra}"
    ]
    if (
        plan.compiler == "inductor"
        and plan.peak_bytes is not None
        and plan.compiled_peak_bytes is None  # unchecked: a preview
        and _again_allocates(plan)
    ):
        # Inductor fuses and reorders a rescheduled backward (docs/USAGE.md, limitations):
        # the prediction is the op-by-op order's (bench/real_model_peaks.py measures the
        # gap). Views recomputed again allocate nothing, wherever they run.
        lines += [
            "  caution    under Inductor, values recomputed again may not run where planned,",
            "             and the code can peak above this prediction; --compile (training)",
            "             checks the peak on Inductor's code; compiler='eager' runs them as",
            "             predicted",
        ]
    return lines


def _offload_lines(plan: Plan) -> list[str]:
    """What is offloaded: host bytes, the link's time against what compute hides, names."""
    names = plan.offloaded
    if not names:
        return []
    lines = [
        f"  offload    {format_bytes(plan.offloaded_bytes)} in {len(names)} "
        f"value{'s' if len(names) != 1 else ''} kept in host "
        "memory, copied back for the backward",
        f"             copies {with_unit(plan.offload_transfer, plan.cost_unit)} each way, "
        f"{with_unit(plan.offload_cost, plan.cost_unit)} of that not hidden by compute",
    ]
    return lines + wrap_items(" " * 12, names)


def _again_allocates(plan: Plan) -> bool:
    """Whether a value recomputed again has a storage of its own (not a view's)."""
    sizes = {d.name: d.bytes for d in plan.decisions}
    return any(sizes.get(name, 1) > 0 for name in plan.recomputed_again)


def _provenance(plan: Plan) -> str:
    compiler = [f"compiler {plan.compiler}"] if plan.compiler else []
    return ", " + ", ".join([*compiler, f"torch {plan.torch_version}"])


def _cost_line(plan: Plan) -> str:
    cost = with_unit(plan.recompute_cost, plan.cost_unit)
    if plan.cost_unit == "flop":
        return f"{cost} (estimated FLOPs)"
    what = "estimated time" if plan.cost_unit == "s" else f"cost in {plan.cost_unit}"
    return f"{cost} ({what}), {with_unit(plan.recompute_flops, 'flop')}"


def plan_report(
    plan: Plan,
    *,
    index: int = 0,
    count: int = 1,
    depth: int = 2,
    top: int = 10,
) -> str:
    """Header, per-module table and largest decisions of one plan."""
    return "\n\n".join(
        [
            plan_header(plan, index=index, count=count),
            module_table(plan, depth),
            largest_decisions(plan, top),
        ]
    )
