"""The search that holds a peak budget by the compiled code's peak
(budget.compile.peak_check.fit_compiled_peak), with compiles stood in for by a table: for
each planning target, the plan the graphs' search picks, its predicted and compiled peaks
and its recompute. The oracle is the table itself, read by hand."""

from __future__ import annotations

import pytest
from helpers.plans import make_plan

from budget.compile.peak_check import PEAK_ATTEMPTS, Attempt, fit_compiled_peak
from budget.core.settings import PlanLog, PlanSettings
from budget.core.sizes import MemoryBudget
from budget.errors import BudgetTooSmallError


class Compiles:
    """``compile_with`` over a list of plans (name, predicted, compiled, recompute): the
    graphs' search picks the cheapest plan predicted at or under the target, and refuses
    (naming the lowest prediction) when there is none."""

    def __init__(self, *plans: tuple[str, int, int | None, float]) -> None:
        self.plans = plans
        self.targets: list[int] = []

    def __call__(self, settings: PlanSettings) -> Attempt:
        target = settings.peak_bytes
        self.targets.append(target)
        fits = [p for p in self.plans if target is None or p[1] <= target]
        if not fits:
            lowest = min(p[1] for p in self.plans)
            raise BudgetTooSmallError("none predicted that low", lowest_peak_bytes=lowest)
        name, predicted, compiled, cost = min(fits, key=lambda p: p[3])
        plan = make_plan(
            graph_hash=name,
            peak_bytes=predicted,
            compiled_peak_bytes=compiled,
            recompute_cost=cost,
            decisions=[d for d in make_plan().decisions if d.name != name],  # its saved set
            peak_target_bytes=target,
        )
        return Attempt(compiled=name, log=PlanLog(plans=[plan]))


def settings(peak: int | None) -> PlanSettings:
    return PlanSettings(MemoryBudget(fraction=1.0), "auto", "flops", 60.0, peak_bytes=peak)


def test_without_a_peak_budget_the_first_compile_is_kept():
    compiles = Compiles(("mm", 100, 150, 0.0))
    assert fit_compiled_peak(settings(None), compiles).compiled == "mm"


def test_a_plan_whose_code_misses_is_replaced_by_one_planned_lower():
    """'mm' is predicted at 100 but its code peaks at 125: the budget 100 is tried again
    at 100 * 100/125 = 80, where 'gelu' (compiled 95) fits; with 5% to spare it is tried
    at 84 too, which finds 'gelu' again and ends the search."""
    compiles = Compiles(("mm", 100, 125, 1.0), ("gelu", 80, 95, 2.0), ("exp", 50, 60, 9.0))
    kept = fit_compiled_peak(settings(100), compiles)
    assert kept.compiled == "gelu" and compiles.targets == [100, 80, 84]


def test_a_plan_whose_code_leaves_room_gives_way_to_a_cheaper_one_that_fits():
    """The graphs over-predict (as on a GPT under Inductor): 'gelu' is predicted at 100
    and compiles to 80, so the budget is tried again at 125, where the cheaper 'mm'
    (compiled 98, within 2% of 100) fits and ends the search."""
    compiles = Compiles(("mm", 120, 98, 1.0), ("gelu", 100, 80, 2.0))
    kept = fit_compiled_peak(settings(100), compiles)
    assert kept.compiled == "mm" and compiles.targets == [100, 125]


def test_a_cheaper_plan_that_misses_leaves_the_fitting_one():
    compiles = Compiles(("mm", 120, 110, 1.0), ("gelu", 100, 80, 2.0))
    kept = fit_compiled_peak(settings(100), compiles)
    assert kept.compiled == "gelu"  # 'mm' was tried (at 125) and its code missed
    assert compiles.targets[:2] == [100, 125]


def test_a_budget_below_every_prediction_tries_the_lowest_predicted_plan():
    """The graphs' search refuses 90 (nothing predicted under 100); the plan predicted
    lowest compiles to 85 and is kept."""
    compiles = Compiles(("mm", 100, 85, 1.0), ("gelu", 140, 120, 0.5))
    kept = fit_compiled_peak(settings(90), compiles)
    assert kept.compiled == "mm" and compiles.targets[:2] == [90, 100]


def test_a_budget_no_code_meets_is_refused_naming_the_lowest_compiled_peak():
    compiles = Compiles(("mm", 100, 130, 1.0), ("gelu", 90, 120, 2.0))
    with pytest.raises(BudgetTooSmallError, match="code Inductor generated") as info:
        fit_compiled_peak(settings(100), compiles)
    assert info.value.lowest_peak_bytes == 120
    assert len(compiles.targets) <= PEAK_ATTEMPTS


def test_a_refusal_before_any_compile_is_the_graphs_own():
    compiles = Compiles(("mm", 100, None, 1.0))
    with pytest.raises(BudgetTooSmallError, match="none predicted"):
        fit_compiled_peak(settings(50), compiles)


def test_an_unknown_compiled_peak_is_kept_first_but_never_after_a_retry():
    """A first compile with no compiled peak (CUDA code, say) stands as the graphs'
    search made it; after a retry, a plan nobody checked is not kept over one that fits."""
    assert fit_compiled_peak(settings(100), Compiles(("mm", 100, None, 1.0))).compiled == "mm"
    compiles = Compiles(("mm", 120, None, 1.0), ("gelu", 100, 80, 2.0))
    assert fit_compiled_peak(settings(100), compiles).compiled == "gelu"
    assert compiles.targets == [100, 125]  # 'mm' (unchecked) was compiled, then dropped
