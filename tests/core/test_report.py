"""budget.core.report: a plan as text (``str(plan)``), on hand-made plans.

No tracing here: plans are built by hand so every number in the text is known.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers.plans import MiB, make_plan

from budget.core.report import plan_line, plan_report
from budget.core.text import format_cost, shorten


@pytest.mark.parametrize(
    "cost,unit,text",
    [
        (3.1e-3, "s", "3.100 ms"),
        (2.5e-6, "s", "2.500 us"),
        (1.5, "s", "1.500 s"),
        (1.208e9, "flop", "1.208 GFLOP"),
        (5120.0, "flop", "5.120 kFLOP"),
        (37.0, "op", "37 op"),
        (0.0, "s", "0"),
    ],
)
def test_costs_are_shown_in_the_plans_own_unit(cost, unit, text):
    assert format_cost(cost, unit) == text


def test_shorten_keeps_both_ends():
    name = "model.encoder.layers.11.self_attention.query_key_value"
    short = shorten(name, 30)
    assert len(short) == 30 and "..." in short
    assert short.startswith("model.") and short.endswith("query_key_value")
    assert shorten("model.head", 30) == "model.head"


@pytest.mark.parametrize(
    "unit,cost,needle",
    [("s", 3.1e-3, "3.100 ms"), ("flop", 3.1e9, "3.100 GFLOP"), ("op", 7, "7 op")],
)
def test_plan_report_fits_80_columns_and_names_the_unit(unit, cost, needle):
    long = "model." + ".".join(f"very_long_module_name_{i}" for i in range(6))
    plan = make_plan(unit, recompute_cost=cost)
    plan.decisions[1].module = long
    plan.decisions[1].name = "a_node_with_a_really_long_generated_name_42"
    text = plan_report(plan, top=5)
    assert max(len(line) for line in text.splitlines()) <= 80
    for part in ("0123456789abcdef", "target 6.00 MiB", "1.00 MiB (budget 0)", "11.00 MiB"):
        assert part in text
    assert "saved      5.00 MiB" in text and needle in text
    assert "auto: optimal" in text and "estimator flops" in text and "compiler inductor" in text


def test_time_costs_show_flops_beside_them():
    line = next(ln for ln in plan_report(make_plan("s")).splitlines() if "recompute " in ln)
    assert "3.100 ms" in line and "3.000 GFLOP" in line
    line = next(ln for ln in plan_report(make_plan("flop")).splitlines() if "recompute " in ln)
    assert line.count("FLOP") == 2  # the cost is FLOPs: not repeated


def test_str_of_a_plan_is_its_report():
    """print(plan) shows the whole report: header, module table, largest decisions."""
    lines = str(make_plan()).splitlines()
    assert lines[0] == "graph 0123456789abcdef (1 of 1), compiler inductor, torch 2.13.0"
    assert "  saved      5.00 MiB (45.5% of the budget-1 end)" in lines
    assert any(ln.split()[:3] == ["total", "5.00", "MiB"] for ln in lines)
    assert any(ln.startswith("largest saves (3 of 3, by bytes)") for ln in lines)


def test_sizes_and_feasible_status_are_described():
    plan = make_plan(budget=f"{6 * MiB}B", status="feasible", gap=0.0123)
    text = plan_report(plan)
    assert "budget     6.00 MiB -> target 6.00 MiB" in text
    assert "feasible, gap 1.23%" in text


def test_a_plan_with_its_peak_round_trips_and_shows_it():
    from budget.core.plan import LivePoint, Plan

    plan = make_plan(
        peak_bytes=9 * MiB,
        peak_target_bytes=10 * MiB,
        timeline=[LivePoint("mm", "forward", 4 * MiB), LivePoint("gelu", "recompute", 9 * MiB)],
    )
    assert Plan.from_json(plan.to_json()) == plan
    text = str(plan)
    assert (
        "  peak       9.00 MiB predicted (forward + backward), planned for at most 10.00 MiB"
        in text
    )
    assert "compiled" not in text
    compiled = make_plan(peak_bytes=9 * MiB, compiled_peak_bytes=8 * MiB)
    assert Plan.from_json(compiled.to_json()) == compiled
    assert "  compiled   8.00 MiB peak of the code Inductor generated" in str(compiled)


def test_a_compiled_peak_above_the_b1_plans_code_says_so_with_both_figures():
    from budget.core.plan import Plan

    above = make_plan(compiled_peak_bytes=9 * MiB, reference_compiled_peak_bytes=4 * MiB)
    assert Plan.from_json(above.to_json()) == above
    text = str(above)
    assert "ABOVE the b=1 plan's code (4.00 MiB, 2.25x): the lowest found within" in text
    under = replace(above, compiled_peak_bytes=4 * MiB)
    assert "at most the b=1 plan's code (4.00 MiB)" in str(under)
    assert "ABOVE" not in str(under)
    assert "b=1 plan's code" not in str(replace(above, reference_compiled_peak_bytes=None))


def test_a_version_8_plan_reads_without_the_b1_plans_compiled_peak():
    from budget.core.plan import Plan

    data = make_plan(compiled_peak_bytes=9 * MiB).to_dict()
    del data["reference_compiled_peak_bytes"]
    assert Plan.from_dict({**data, "version": 8}).reference_compiled_peak_bytes is None


def test_a_version_4_plan_reads_without_a_compiled_peak():
    from budget.core.plan import Plan

    data = make_plan(peak_bytes=9 * MiB).to_dict()
    del data["compiled_peak_bytes"]
    assert Plan.from_dict({**data, "version": 4}).compiled_peak_bytes is None


def test_a_plan_shows_its_peak_against_the_b1_plans():
    from budget.core.plan import Plan

    plan = make_plan(peak_bytes=9 * MiB, reference_peak_bytes=12 * MiB)
    assert Plan.from_json(plan.to_json()) == plan
    lines = str(plan).splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("  peak "))
    assert lines[at + 1].split()[:5] == ["0.75x", "the", "b=1", "plan's", "12.00"]
    data = plan.to_dict()
    del data["reference_peak_bytes"]
    old = Plan.from_dict({**data, "version": 5})
    assert old.reference_peak_bytes is None and "b=1 plan's" not in str(old)


def test_a_version_1_plan_still_reads_without_a_peak():
    from budget.core.plan import PLAN_FORMAT_VERSION, Plan

    data = make_plan().to_dict()
    for key in ("peak_bytes", "timeline", "peak_target_bytes"):
        del data[key]
    old = Plan.from_dict({**data, "version": 1})
    assert old.peak_bytes is None and old.timeline == [] and old.version == PLAN_FORMAT_VERSION
    assert "peak " not in str(old)


def test_extra_recomputations_get_a_line_with_their_cost():

    plain = make_plan()
    assert "again" not in str(plain)
    plan = replace(
        plain, recomputed_again=["a", "b", "a"], again_cost=2e-3, again_flops=3e9, cost_unit="s"
    )
    line = next(ln for ln in str(plan).splitlines() if ln.strip().startswith("again"))
    assert "3 more recomputations of 2 values" in line
    assert "2.000 ms" in line and "3.000 GFLOP" in line


def test_a_rescheduled_inductor_plan_warns_that_its_peak_may_be_missed():
    """Inductor does not always run a rescheduled backward in its order (docs/USAGE.md,
    limitations): such a plan says so; the same plan for the eager compiler does not, nor
    one whose values recomputed again are all views."""

    plan = replace(make_plan(), recomputed_again=["a"], peak_bytes=1 << 20)
    text = str(replace(plan, compiler="inductor"))
    assert text.count("caution") == 1
    assert "compiler='eager'" in text.split("caution", 1)[1]
    assert "--compile" in text.split("caution", 1)[1]  # where the peak is checked
    # once compiled, the plan carries the peak of its code: nothing left to caution about
    assert "caution" not in str(replace(plan, compiler="inductor", compiled_peak_bytes=1 << 20))
    assert "caution" not in str(replace(plan, compiler="eager"))
    assert "caution" not in str(replace(plan, compiler="inductor", recomputed_again=[]))
    # a view recomputed again shares its base's storage: nothing to misplace
    assert "caution" not in str(replace(plan, compiler="inductor", recomputed_again=["view"]))
    assert "caution" in str(replace(plan, compiler="inductor", recomputed_again=["view", "exp"]))


def test_the_peak_tie_break_is_shown_within_80_columns():
    note = (
        "torch's saved set at budget 0.3: the lowest predicted peak of 2 plans within 0.5% "
        "of the forward's recompute (92.37 MiB; the cheapest plan: 110.49 MiB)"
    )
    text = plan_report(make_plan(peak_bytes=92 * MiB, tie_break=note))
    lines = [
        ln for ln in text.splitlines() if ln.startswith("  tie-break") or ln.startswith(" " * 13)
    ]
    assert lines[0].startswith("  tie-break  torch's saved set at budget 0.3")
    assert "110.49 MiB" in " ".join(text.split())
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "tie-break" not in plan_report(make_plan(peak_bytes=92 * MiB))


def test_plan_line_says_budget_bytes_recompute_peak_and_status_in_one_line():
    plan = make_plan(peak_bytes=9 * MiB, timings={"solve": 0.25, "estimate": 0.05})
    assert plan_line(plan) == (
        "graph 01234567 (inductor): budget 0.5 of the range; saves 5.00 MiB of 11.00 MiB "
        "(target 6.00 MiB), recomputes 3.100 ms, predicted peak 9.00 MiB; optimal"
    )
    told = replace(
        plan,
        compiled_peak_bytes=8 * MiB,
        peak_target_bytes=10 * MiB,
        offloaded_bytes=MiB,
        status="feasible",
        gap=0.5,
        graph_break="print",
    )
    line = plan_line(told)
    assert "\n" not in line and ", peak target 10.00 MiB;" in line
    assert ", offloads 1.00 MiB," in line and ", code peak 8.00 MiB;" in line
    assert "predicted peak" not in line and "; feasible, gap 50.00%;" in line
    assert line.endswith("ends at a graph break (print)")


def test_data_dependent_sizes_say_how_each_is_priced_within_80_columns():
    """Sizes that depend on tensor values: those torch bounds at their bound, the others at
    a guess, each kind on lines of its own; none of it where every size is known."""
    long = [f"a_rather_long_value_name_{i}" for i in range(9)]
    text = plan_report(make_plan(bounded_sizes=["mm", *long], guessed_sizes=["gelu"]))
    assert "bounded    10 values' sizes depend on tensor values" in text
    assert "its upper bound, never under the step's" in text
    assert "guessed    1 value's size depends" in text and "torch._check(n <= K)" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    plain = plan_report(make_plan())
    assert "bounded " not in plain and "guessed " not in plain


def test_an_optimal_plan_that_offloads_says_its_cost_is_proven_to_the_offload_gap():
    from budget.core.report import format_status

    plain = make_plan()
    moving = make_plan()
    next(d for d in moving.decisions if d.decision == "save").decision = "offload"
    assert format_status(plain) == "optimal"
    assert format_status(moving) == "optimal to 0.1% of the step"
    assert "optimal to 0.1% of the step" in plan_line(moving)
