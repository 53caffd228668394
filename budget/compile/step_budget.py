"""A peak memory budget is the step's: each graph gets what the step leaves it.

After a graph break the step holds, while a later graph runs, what the graphs run before
it save and keep for their backward (``Plan.held_bytes``), and the later graph's own
inputs its backward keeps (``Plan.kept_input_bytes``). Its peak within the step is those
plus its own (``Plan.step_peak_bytes``), so it is planned for the budget less what the
graphs before it hold (:func:`share`), and where its kept inputs then put the step over
the budget, once more for that less its kept inputs too (:func:`excess`, the backend's
retry). A graph that cannot fit its share is refused with the share explained
(:func:`refusal`). Eager code's saves between graphs are not seen in training (a preview
counts them), so they are not in the share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..core.plan import Plan
from ..core.settings import PlanSettings
from ..core.sizes import format_bytes
from ..errors import BudgetTooSmallError


def held_before(plans: Sequence[Plan]) -> int:
    """What the graphs compiled so far save and keep for their backward, each once."""
    return sum(p.saved_bytes + p.kept_input_bytes for p in plans)


def share(settings: PlanSettings, outside: int, graph: int) -> PlanSettings:
    """``settings`` for a graph while the step holds ``outside`` bytes outside it: its peak
    budget is the step's less those. Unchanged without a peak budget or with nothing
    outside; a step budget ``outside`` already fills is refused."""
    if settings.peak_bytes is None or outside <= 0:
        return settings
    left = settings.peak_bytes - outside
    if left <= 0:
        raise BudgetTooSmallError(
            f"peak_memory_budget {format_bytes(settings.peak_bytes)} is the step's peak, and "
            f"while graph {graph + 1} runs the step already holds {format_bytes(outside)} "
            "outside it (what the graphs before it save and keep for their backward, and "
            "its inputs its backward keeps): ask for more, or fewer graph breaks",
            lowest_peak_bytes=outside,
        )
    return replace(settings, peak_bytes=left, search_peak_bytes=None)


def excess(settings: PlanSettings, plans: Sequence[Plan]) -> tuple[int, int]:
    """How far the step's peak while one graph runs (its ``plans``) is over the step's
    peak budget (0: within it, or no budget, or unknown), and that graph's kept inputs."""
    if settings.peak_bytes is None:
        return 0, 0
    over, kept = 0, 0
    for plan in plans:
        kept = max(kept, plan.kept_input_bytes)
        peak = plan.step_peak_bytes
        if peak is not None:
            over = max(over, peak - settings.peak_bytes)
    return over, kept


def refusal(
    settings: PlanSettings, outside: int, graph: int, e: BudgetTooSmallError
) -> BudgetTooSmallError:
    """``e`` (a graph's refusal of its share) told as the step's: the share and what the
    step holds outside the graph, the lowest peak as the step's."""
    assert settings.peak_bytes is not None
    lowest = None if e.lowest_peak_bytes is None else e.lowest_peak_bytes + outside
    told = (
        f"graph {graph + 1} of the step gets {format_bytes(settings.peak_bytes - outside)} of "
        f"the step's peak_memory_budget {format_bytes(settings.peak_bytes)} (the step holds "
        f"{format_bytes(outside)} outside it while it runs): {e}"
    )
    if lowest is not None:
        told += f" (the step's lowest peak with this graph: {format_bytes(lowest)})"
    return BudgetTooSmallError(told, e.min_bytes, lowest)


def over_budget(settings: PlanSettings, over: int, graph: int) -> BudgetTooSmallError:
    """The error for a graph whose step peak stays ``over`` the budget after its retry."""
    assert settings.peak_bytes is not None
    return BudgetTooSmallError(
        f"peak_memory_budget {format_bytes(settings.peak_bytes)} is the step's peak, and "
        f"with graph {graph + 1} the step's predicted peak is {format_bytes(over)} over it "
        "(what the graphs before it hold, its kept inputs and its own peak): ask for more",
        lowest_peak_bytes=settings.peak_bytes + over,
    )
