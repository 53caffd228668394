"""torch's own plan beside budget's, as text: the ``vs torch`` lines of a plan's report.

A preview asked for it (``vs_torch``) carries torch's plan of the same graph at the same
fraction (``Plan.torch_plan``); these lines say what it saves, what it recomputes and how
high its graphs peak, each set against budget's plan: its recompute as a multiple of
budget's, its peak as a difference; and what budget's plan saving as much recomputes, the
comparison at equal memory. Pure formatting, like :mod:`budget.core.report`.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .sizes import format_bytes
from .text import WIDTH, cost_scale, with_unit

if TYPE_CHECKING:
    from .plan import Plan


def torch_lines(plan: Plan) -> list[str]:
    """The report's ``vs torch`` lines; none where the plan carries no torch plan."""
    theirs = plan.torch_plan
    if theirs is None:
        return []
    if theirs.modules:  # an eager plan's: torch's checkpointing of every module
        n = len(theirs.modules)
        asked = f"checkpoint_wrapper on {n} module{'s' if n > 1 else ''} (each whole"
        if theirs.kept_inside_bytes:  # kept in them, where torch would run them again
            inside = _kept(format_bytes(theirs.kept_inside_bytes))
            asked += f", but for {inside} budget never recomputes"
        asked += ")"
    elif theirs.fraction is not None:
        asked = f"activation_memory_budget={theirs.fraction:.3g}"
    else:
        asked = "torch's plan"
    text = (
        f"{asked}: saves "
        f"{_kept(format_bytes(theirs.saved_bytes))}, recomputes "
        f"{_kept(with_unit(theirs.recompute_cost, plan.cost_unit))}" + _times(plan)
    )
    if plan.cost_unit != "flop":
        text += f", {_kept(with_unit(theirs.recompute_flops, 'flop'))}"
    if theirs.refused:
        more = len(theirs.refused) - 1
        text += f"; budget refuses it: {theirs.refused[0]}" + (
            f" (and {more} more)" if more else ""
        )
    elif theirs.peak_bytes is not None and plan.peak_bytes is not None:
        gap = theirs.peak_bytes - plan.peak_bytes
        peak, diff = (_kept(format_bytes(n)) for n in (theirs.peak_bytes, abs(gap)))
        text += f", predicted peak {peak} ({'+' if gap >= 0 else '-'}{diff})"
    if theirs.budget_recompute_cost is not None:
        ours = _kept(with_unit(theirs.budget_recompute_cost, plan.cost_unit))
        ratio = equal_memory_ratio(plan)
        times = "" if ratio is None else f" (torch's:{_NBSP}{ratio:.2f}x)"
        text += f"; at its saved bytes budget's plan recomputes {ours}{times}"
    lead, indent = "  vs torch   ", " " * 13
    lines = textwrap.wrap(text, WIDTH, initial_indent=lead, subsequent_indent=indent)
    return [line.replace(_NBSP, " ") for line in lines]


_NBSP = "\u00a0"  # joins a quantity to its unit, so that no line breaks between them


def _kept(quantity: str) -> str:
    return quantity.replace(" ", _NBSP)


def recompute_ratio(plan: Plan) -> float | None:
    """torch's recompute as a multiple of budget's (all of it: values recomputed again,
    offloads' exposed copies); None where budget recomputes nothing or no torch plan is
    beside it."""
    theirs, ours = plan.torch_plan, plan.total_recompute_cost
    return None if theirs is None or ours <= 0 else theirs.recompute_cost / ours


def equal_memory_ratio(plan: Plan) -> float | None:
    """torch's recompute as a multiple of what budget's plan saving as much recomputes
    (``TorchPlan.budget_recompute_cost``); None where that is not known or budget
    recomputes nothing there."""
    theirs = plan.torch_plan
    ours = None if theirs is None else theirs.budget_recompute_cost
    return None if theirs is None or not ours else theirs.recompute_cost / ours


def sweep_scale(plans: Sequence[Plan]) -> tuple[float, str]:
    """(divisor, unit label) for a sweep's costs: its plans' recompute and that of the
    torch plans beside them, so that both are shown on one scale (table, plot)."""
    costs = [p.total_recompute_cost for p in plans]
    costs += [p.torch_plan.recompute_cost for p in plans if p.torch_plan is not None]
    return cost_scale(costs, plans[0].cost_unit)


def _times(plan: Plan) -> str:
    ratio = recompute_ratio(plan)
    if ratio is not None:
        return f" ({ratio:.2f}x{_NBSP}budget's)"
    theirs = plan.torch_plan
    return "" if theirs is None or theirs.recompute_cost == 0 else " (budget's: none)"
