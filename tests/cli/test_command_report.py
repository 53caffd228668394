"""budget.cli.report: what ``budget solve`` and ``budget sweep`` print, on hand-made plans."""

from __future__ import annotations

import csv
import dataclasses
import io
import json

import pytest
from helpers.plans import MiB, make_plan

from budget.cli.report import dominating_peaks, solve_report, sweep_csv, sweep_json, sweep_table
from budget.core.plan import Plan, TorchPlan
from budget.planning.tie_break import lowest_peak


def test_solve_report_with_several_graphs_totals_the_step():
    a, b = make_plan(), make_plan(graph_hash="fedcba9876543210")
    text = solve_report([a, b], "builtin:gpt layers=1", timings={"load": 0.01, "total": 2.5})
    assert text.startswith("budget solve builtin:gpt layers=1")
    assert "(1 of 2)" in text and "(2 of 2)" in text
    assert "step (2 graphs): saved 10.00 MiB, recompute 6.200 ms" in text
    assert text.splitlines()[-1].startswith("wall time load 10 ms, total 2.50 s")


def test_an_inductor_preview_says_its_peak_is_the_graphs_and_how_to_get_the_codes():
    hint = "--compile"
    previewed = make_plan(peak_bytes=9 * MiB)  # compiler inductor, no compiled peak
    assert hint in solve_report([previewed], "builtin:gpt")
    compiled = make_plan(peak_bytes=9 * MiB, compiled_peak_bytes=8 * MiB)
    assert hint not in solve_report([compiled], "builtin:gpt")
    assert hint not in solve_report([make_plan(peak_bytes=9 * MiB, compiler="eager")], "x")
    assert hint not in solve_report([previewed], "builtin:gpt", compiled=True)  # unknown


def _sweep() -> list[Plan]:
    return [
        make_plan(budget=b, saved_bytes=s, target_bytes=t, recompute_cost=c, status=st)
        for b, s, t, c, st in [
            (0.0, 1 * MiB, 1 * MiB, 9e-3, "optimal"),
            (0.5, 5 * MiB, 6 * MiB, 3.1e-3, "optimal"),
            (1.0, 11 * MiB, 11 * MiB, 0.0, "reference"),
        ]
    ]


def test_sweep_table_rows():
    text = sweep_table([_sweep()], "builtin:mlp")
    lines = text.splitlines()
    assert lines[0] == "budget sweep builtin:mlp"
    rows = [ln.split() for ln in lines if ln.strip()[:1].isdigit()]
    assert [r[0] for r in rows] == ["0", "0.5", "1"]
    assert rows[1][-1] == "optimal" and rows[2][-1] == "reference"
    assert "9.000 ms" in text and "FLOPs" in text  # time costs: FLOPs shown beside them
    assert max(len(ln) for ln in lines) <= 80


def test_sweep_csv_and_json_are_exact():
    plans = _sweep()
    rows = list(csv.DictReader(io.StringIO(sweep_csv([plans]))))
    assert [int(r["saved_bytes"]) for r in rows] == [p.saved_bytes for p in plans]
    assert [float(r["recompute_cost"]) for r in rows] == [p.recompute_cost for p in plans]
    assert {r["cost_unit"] for r in rows} == {"s"}
    data = json.loads(sweep_json([plans], "builtin:mlp"))
    assert data["target"] == "builtin:mlp"
    again = [Plan.from_dict(p) for p in data["graphs"][0]]
    assert again == plans


def test_sweep_flags_plans_whose_peak_a_cheaper_plan_beats():
    """b=0 recomputes most and peaks highest: flagged, pointing at the plan with the
    lowest peak among those that recompute no more (b=0.5 here, not b=1)."""
    plans = [
        make_plan(budget=0.0, recompute_cost=9e-3, peak_bytes=20 * MiB),
        make_plan(budget=0.5, recompute_cost=3e-3, peak_bytes=8 * MiB),
        make_plan(budget=1.0, recompute_cost=0.0, peak_bytes=12 * MiB),
    ]
    assert dominating_peaks(plans) == {0: 1}
    text = sweep_table([plans], "builtin:gpt")
    assert "! budget 0: 20.00 MiB peak; budget 0.5: 8.00 MiB, no more recompute" in text
    assert "20.00 MiB!" in text and "8.00 MiB!" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    rows = list(csv.DictReader(io.StringIO(sweep_csv([plans]))))
    assert [int(r["peak_bytes"]) for r in rows] == [20 * MiB, 8 * MiB, 12 * MiB]


def test_a_compiled_sweep_flags_by_the_codes_peak():
    """With the code's peaks (``budget sweep --compile``) the table has a ``compiled``
    column, and a plan is flagged where a plan of no more recompute peaks lower in its
    code, whatever the graphs predicted: here b=0.5's code is the lowest though its graphs
    predict it above b=1's."""
    plans = [
        make_plan(
            budget=0.0, recompute_cost=9e-3, peak_bytes=20 * MiB, compiled_peak_bytes=11 * MiB
        ),
        make_plan(
            budget=0.5, recompute_cost=3e-3, peak_bytes=14 * MiB, compiled_peak_bytes=9 * MiB
        ),
        make_plan(
            budget=1.0, recompute_cost=0.0, peak_bytes=12 * MiB, compiled_peak_bytes=10 * MiB
        ),
    ]
    assert dominating_peaks(plans) == {0: 1}
    text = sweep_table([plans], "builtin:gpt")
    head = next(ln for ln in text.splitlines() if "budget " in ln and "status" in ln)
    assert head.split()[3:5] == ["peak", "compiled"]
    assert "20.00 MiB " in text and "11.00 MiB!" in text  # the code's peak is flagged
    assert "! budget 0: 11.00 MiB peak; budget 0.5: 9.00 MiB, no more recompute" in text
    rows = list(csv.DictReader(io.StringIO(sweep_csv([plans]))))
    assert [int(r["compiled_peak_bytes"]) for r in rows] == [11 * MiB, 9 * MiB, 10 * MiB]


def test_a_compiled_sweep_never_compares_a_prediction_with_code():
    """A compiled sweep's row whose code's peak is unknown (the meta run could not run it)
    is compared with no other: its graphs' prediction sits above any code's peak, so
    b=0.5 would be flagged against b=1's code though it may peak lower in its own code.
    The plot draws the code's peaks only."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from budget.cli.plots import draw_sweep

    plans = [
        make_plan(budget=0.5, recompute_cost=3e-3, peak_bytes=14 * MiB),
        make_plan(
            budget=1.0, recompute_cost=0.0, peak_bytes=16 * MiB, compiled_peak_bytes=10 * MiB
        ),
    ]
    assert dominating_peaks(plans) == {}
    text = sweep_table([plans], "builtin:gpt")
    assert "!" not in text
    ax = Figure().subplots()
    draw_sweep(ax, plans, x="peak")
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [10.0]
    assert ax.get_xlabel() == "peak of the step's compiled code (MiB)"


def test_torchs_plans_are_set_beside_budgets_in_the_report_table_csv_and_plot(tmp_path):
    """``vs_torch``: the plan's report says what torch's plan at its fraction saves,
    recomputes (as a multiple of budget's) and peaks at (the difference); a sweep adds a
    table of torch's plans, CSV columns, and crosses on the plot. A set budget refuses is
    named, with no peak."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from budget.cli.plots import draw_sweep, draw_torch_plans, save_sweep_plot

    def theirs(fraction, cost, peak, refused=()):  # type: ignore[no-untyped-def]
        return TorchPlan(fraction, 4 * MiB, cost, 5e9, peak, list(refused))

    plans = [
        make_plan(budget=0.0, recompute_cost=8e-3, peak_bytes=20 * MiB),
        # 0.5 ms of it recomputed again: the ratio is to all of budget's recompute
        make_plan(budget=0.5, recompute_cost=2e-3, again_cost=5e-4, peak_bytes=16 * MiB),
    ]
    plans[0] = dataclasses.replace(plans[0], torch_plan=theirs(0.0, 8e-3, None, ["rand: random"]))
    plans[1] = dataclasses.replace(plans[1], torch_plan=theirs(0.5, 5e-3, 17 * MiB))
    text = str(plans[1])
    assert "  vs torch   activation_memory_budget=0.5: saves 4.00 MiB, recomputes 5.000 ms" in text
    assert "(2.00x budget's)" in text and "predicted peak 17.00 MiB (+1.00 MiB)" in text
    assert "budget refuses it: rand: random" in str(plans[0])
    table = sweep_table([plans], "builtin:gpt")
    rows = table.split("torch's partitioner at the same budgets")[1].splitlines()[2:]
    assert [r.split() for r in rows] == [
        ["0", "4.00", "MiB", "refused", "8.000", "ms", "1.00x"],
        ["0.5", "4.00", "MiB", "17.00", "MiB", "5.000", "ms", "2.00x"],
    ]
    assert max(len(line) for line in table.splitlines()) <= 80
    cells = list(csv.DictReader(io.StringIO(sweep_csv([plans]))))
    assert [c["torch_peak_bytes"] for c in cells] == ["", str(17 * MiB)]
    assert [float(c["torch_recompute_cost"]) for c in cells] == [8e-3, 5e-3]
    plain = list(csv.DictReader(io.StringIO(sweep_csv([[make_plan()]]))))
    assert plain[0]["torch_saved_bytes"] == ""
    save_sweep_plot([plans], tmp_path / "vs.png")
    assert (tmp_path / "vs.png").read_bytes()[:4] == b"\x89PNG"
    ax = Figure().subplots()
    draw_sweep(ax, plans, x="peak")
    draw_torch_plans(ax, plans, (1e-3, "ms"), "peak", None)
    (crosses,) = [ln for ln in ax.get_lines() if ln.get_label() == "torch's partitioner"]
    assert list(crosses.get_xdata()) == [17.0]  # the refused plan has no peak to draw


def test_a_tie_broken_row_says_tie_break_not_a_solver_gap():
    """A plan the peak tie-break took for a little more recompute than the budget's
    cheapest is marked ``tie-break`` (with a legend), not ``feasible 100%``: its gap is
    the tie-break's choice. A solver's feasible plan keeps its gap."""
    cheapest = make_plan(budget=0.75, recompute_cost=0.0, peak_bytes=12 * MiB)
    other = make_plan(budget=0.75, recompute_cost=1e-5, peak_bytes=9 * MiB)  # 0.7's plan
    took = lowest_peak(cheapest, [("the plan at budget 0.7", other)], tolerance=1e-4)
    assert took.peak_bytes == 9 * MiB and took.status == "feasible"
    kept = lowest_peak(cheapest, [("the plan at budget 0.7", other)], tolerance=1e-6)
    solver = make_plan(budget=0.5, status="feasible", gap=0.25, peak_bytes=10 * MiB)
    text = sweep_table([[solver, took, kept]], "builtin:gpt")
    rows = [ln.split() for ln in text.splitlines() if ln.strip()[:1].isdigit()]
    assert [r[-1] for r in rows] == ["25.00%", "tie-break", "optimal"]
    legend = [ln for ln in text.splitlines() if "tie-break:" in ln]
    assert legend == ["  tie-break: up to 0.5% of the forward's recompute more, for a lower peak"]
    assert "tie-break:" not in sweep_table([[solver, kept]], "builtin:gpt")


def test_every_plan_the_tie_break_takes_is_called_its_own_not_a_solver_gap():
    """Whichever candidate the tie-break takes at a little more recompute (a smaller
    fraction's plan, torch's saved set, the cheapest plan recomputing latest: a name that
    begins as the kept cheapest plan's note does), its sweep row says ``tie-break`` and its
    report's solver line the share of recompute over the optimum, not a solver's gap; a
    kept cheapest plan reads as the solver left it."""
    cheapest = make_plan(budget=0.5, recompute_cost=1e-5, peak_bytes=12 * MiB)
    names = [
        "the plan at budget 0.45",
        "torch's saved set at budget 0.5",
        "the cheapest plan recomputing latest",
        "the cheapest plan recomputing earliest",
    ]
    for name in names:
        other = make_plan(budget=0.5, recompute_cost=1.2e-5, peak_bytes=9 * MiB)
        took = lowest_peak(cheapest, [(name, other)], tolerance=1e-5)
        assert took.tie_broken and took.tie_break.startswith(name), took.tie_break
        text = sweep_table([[took]], "t")
        rows = [ln.split() for ln in text.splitlines() if ln.strip()[:1].isdigit()]
        assert rows[0][-1] == "tie-break", (name, rows)
        solver = [ln for ln in solve_report([took], "t").splitlines() if "solver " in ln]
        assert "tie-break: 16.67% over the optimum" in solver[0], solver
        assert "gap" not in solver[0]
    higher = make_plan(budget=0.5, recompute_cost=1e-5, peak_bytes=13 * MiB)
    kept = lowest_peak(cheapest, [(names[2], higher)], tolerance=1e-5)
    assert kept.tie_break and not kept.tie_broken
    solver = [ln for ln in solve_report([kept], "t").splitlines() if "solver " in ln]
    assert ": optimal;" in solver[0], solver


def test_the_tie_break_legend_is_shown_only_beside_a_row_that_says_tie_break():
    """A plan the tie-break took at the cheapest's own recompute stays ``optimal``: no row
    says ``tie-break``, so no legend explains one."""
    cheapest = make_plan(budget=0.5, recompute_cost=1e-5, peak_bytes=12 * MiB)
    as_cheap = make_plan(budget=0.5, recompute_cost=1e-5, peak_bytes=9 * MiB)
    took = lowest_peak(cheapest, [("the cheapest plan recomputing latest", as_cheap)], 1e-5)
    assert took.tie_broken and took.status == "optimal"
    text = sweep_table([[took]], "t")
    rows = [ln.split() for ln in text.splitlines() if ln.strip()[:1].isdigit()]
    assert rows[0][-1] == "optimal"
    assert "tie-break:" not in text
