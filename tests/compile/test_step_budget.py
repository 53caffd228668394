"""budget.compile.step_budget on hand-made settings and plans: a graph's share of the
step's peak budget, how far a graph's step peak is over it, and the refusals' words."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers.plans import KiB, make_plan

from budget.compile.step_budget import excess, over_budget, refusal, share
from budget.core.settings import PlanSettings
from budget.core.sizes import parse_budget
from budget.errors import BudgetTooSmallError


def _settings(peak: int | None) -> PlanSettings:
    return PlanSettings(parse_budget(1.0), "auto", "flops", 60.0, peak_bytes=peak)


def test_a_graph_gets_the_budget_less_what_the_step_holds_outside_it():
    settings = _settings(1024 * KiB)
    assert share(settings, 0, 0) is settings  # the first graph: the whole budget
    assert share(_settings(None), 512 * KiB, 1).peak_bytes is None  # no peak budget
    assert share(settings, 256 * KiB, 1).peak_bytes == 768 * KiB
    searched = replace(settings, search_peak_bytes=1)
    assert share(searched, 1, 1).search_peak_bytes is None  # the share is searched afresh
    with pytest.raises(BudgetTooSmallError, match="step's peak.*graph 2 runs.*1.00 MiB") as e:
        share(settings, 1024 * KiB, 1)
    assert e.value.lowest_peak_bytes == 1024 * KiB


def test_the_step_peak_over_the_budget_and_the_kept_inputs():
    """A plan's step peak is what the step holds outside it, its kept inputs and its own
    peak (the compiled one where known): 100 + 50 + 900 KiB against 1000."""
    plan = make_plan(held_bytes=100 * KiB, kept_input_bytes=50 * KiB, peak_bytes=900 * KiB)
    assert excess(_settings(1000 * KiB), [plan]) == (50 * KiB, 50 * KiB)
    assert excess(_settings(1100 * KiB), [plan]) == (0, 50 * KiB)  # within: 0
    compiled = make_plan(
        held_bytes=100 * KiB, kept_input_bytes=50 * KiB, peak_bytes=900 * KiB,
        compiled_peak_bytes=800 * KiB,
    )  # fmt: skip
    assert excess(_settings(950 * KiB), [compiled])[0] == 0  # 950 KiB on the code's peak
    assert excess(_settings(None), [plan]) == (0, 0)
    unknown = make_plan(held_bytes=None, kept_input_bytes=50 * KiB, peak_bytes=900 * KiB)
    assert excess(_settings(10 * KiB), [unknown]) == (0, 50 * KiB)


def test_refusals_speak_of_the_step():
    settings = _settings(1000 * KiB)
    inner = BudgetTooSmallError("peak memory budget 700.00 KiB is below ...", None, 800 * KiB)
    told = refusal(settings, 300 * KiB, 1, inner)
    assert told.lowest_peak_bytes == 1100 * KiB  # the graph's lowest, with what is outside
    text = str(told)
    assert (
        "graph 2 of the step gets 700.00 KiB" in text
        and "lowest peak with this graph: 1.07 MiB" in text
    )
    assert "below ..." in text  # the graph's own refusal is kept
    over = over_budget(settings, 20 * KiB, 2)
    assert over.lowest_peak_bytes == 1020 * KiB and "graph 3" in str(over)
