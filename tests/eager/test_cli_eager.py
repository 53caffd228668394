"""``budget solve --eager``: the eager plan on the command line."""

from __future__ import annotations

import csv
import io
import json
import re
import sys

import pytest

import budget
from budget.cli.main import main
from budget.eager import EagerPlan
from budget.models import gpt

SIZES = ["--layers", "2", "--d", "64", "--seq", "32", "--batch", "2", "--vocab", "128"]


def test_solve_eager_prints_modules_and_per_op_choices(capsys, tmp_path):
    out_file = tmp_path / "plan.json"
    assert main(["solve", "--eager", "--budget", "0.5", "--json", str(out_file), *SIZES]) == 0
    text = capsys.readouterr().out
    saved = EagerPlan.from_json(out_file.read_text())
    ex = gpt(layers=2, d=64, seq=32, batch=2, vocab=128)
    expect = budget.eager.plan(ex.model, *ex.args, step=ex.step, memory_budget=0.5)
    assert saved.saved == expect.saved and saved.checkpointed == expect.checkpointed
    assert "eager checkpointing: 2 of 2 candidate modules checkpointed" in text
    for r in expect.regions:
        assert f"{r.saved_ops}/{len(r.ops)}" in text
        assert f"recompute the other {r.recomputed_ops} of {len(r.ops)} op calls" in text
    first = [f"{i}:" for i, p in enumerate(expect.regions[0].policy) if p == "save"][0]
    assert f"blocks.0: save {first}" in text
    assert f"plan file: {out_file}" in text
    assert max(len(line) for line in text.splitlines() if str(out_file) not in line) <= 80


def test_solve_eager_json_and_modules(capsys):
    assert (
        main(
            [
                "solve",
                "--eager",
                "--budget",
                "0",
                "--modules",
                "blocks.1",
                "--format",
                "json",
                *SIZES,
            ]
        )
        == 0
    )
    plan = json.loads(capsys.readouterr().out)
    assert [r["module"] for r in plan["regions"]] == ["blocks.1"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--eager", "--modules", "nope"], "has no module 'nope'"),
        (["--modules", "blocks.0"], "--modules applies to --eager plans only"),
        (["--eager", "--plan", "p.json"], "--plan cannot be used with --eager"),
        (["--eager", "--peak", "0.5"], "--peak"),
        (["--eager", "--peak", "1KiB"], "lowest predicted peak"),
        (["--eager", "--budget", "2"], "budget"),
    ],
)
def test_solve_eager_errors_exit_2(capsys, argv, message):
    assert main(["solve", *argv, *SIZES]) == 2
    assert message in capsys.readouterr().err


def test_solve_eager_peak_budget_and_timeline(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    ex = gpt(layers=2, d=64, seq=32, batch=2, vocab=128)
    plans = [
        budget.eager.plan(ex.model, *ex.args, step=ex.step, memory_budget=b) for b in (1.0, 0.0)
    ]
    target = (plans[0].peak_bytes + plans[1].peak_bytes) // 2
    png = tmp_path / "t.png"
    argv = ["solve", "--eager", "--peak", f"{target}B", "--timeline", str(png), "--format"]
    assert main([*argv, "json", *SIZES]) == 0
    plan = EagerPlan.from_json(capsys.readouterr().out)
    assert plan.peak_bytes <= target and plan.peak_target_bytes == target
    assert plan.recompute_cost < plans[1].recompute_cost  # not simply everything recomputed
    starts = [plan.region(m).backward_at for m in ("blocks.0", "blocks.1")]
    assert None not in starts and starts[1] < starts[0] < len(plan.timeline)  # last block first
    assert plan.timeline[starts[1]].phase != "forward"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([*argv, "table", *SIZES]) == 0
    assert "predicted (forward + backward), planned for at most" in capsys.readouterr().out


def test_eager_progress_counts_each_plan_whose_peak_a_fake_run_predicts(monkeypatch):
    ex = gpt(layers=2, d=64, seq=32, batch=2, vocab=128)
    ends = [budget.eager.plan(ex.model, *ex.args, step=ex.step, memory_budget=b) for b in (1, 0)]
    calls = []
    target = (ends[0].peak_bytes + ends[1].peak_bytes) // 2
    options = dict(step=ex.step, peak_memory_budget=f"{target}B")
    plan = budget.eager.plan(ex.model, *ex.args, **options, progress=lambda *a: calls.append(a))
    assert plan.peak_bytes <= target
    # 0 of 1 once traced, then each plan predicted (no total: the search decides how many),
    # then 1 of 1
    ticks = calls[1:-1]
    assert calls[0] == (0, 0, 1) and calls[-1] == (0, 1, 1) and len(ticks) >= 2
    assert ticks == [(0, k, None) for k in range(1, len(ticks) + 1)]

    class Tty(io.StringIO):
        def isatty(self):
            return True

    fake = Tty()
    monkeypatch.setattr(sys, "stderr", fake)
    assert main(["solve", "--eager", "--peak", f"{target}B", "--format", "json", *SIZES]) == 0
    assert re.search(r"eager plan: [1-9]\d* plans predicted", fake.getvalue())
    fake.seek(0)
    fake.truncate()
    assert main(["solve", "--eager", "--quiet", "--format", "json", *SIZES]) == 0
    assert fake.getvalue() == ""


def test_eager_sweep_rows_are_the_plans_of_each_budget(capsys):
    """budget.eager.sweep (and ``budget sweep --eager``): one trace, each row the plan
    budget.eager.plan makes at that budget alone, peak included."""
    ex = gpt(layers=2, d=64, seq=32, batch=2, vocab=128)
    budgets = [0, 0.5, 0.75, "200KiB", 1]  # at 0.75 the peak tie-break takes 0.7's plan
    calls = []
    rows = budget.eager.sweep(
        ex.model, *ex.args, step=ex.step, budgets=budgets, progress=lambda *a: calls.append(a)
    )
    assert calls == [(0, k, 5) for k in range(6)]
    alone = [budget.eager.plan(ex.model, *ex.args, step=ex.step, memory_budget=b) for b in budgets]
    for got, want in zip(rows, alone, strict=True):
        assert (got.budget, got.saved, got.checkpointed) == (
            want.budget,
            want.saved,
            want.checkpointed,
        )
        assert (got.saved_bytes, got.peak_bytes) == (want.saved_bytes, want.peak_bytes)
        assert got.total_recompute_cost == want.total_recompute_cost
        assert got.tie_break == want.tie_break
    assert rows[2].tie_break.startswith("the plan at budget 0.7")
    assert rows[0].saved_bytes < rows[1].saved_bytes < rows[-1].saved_bytes  # a real range
    argv = ["sweep", "--eager", "--budgets", "0,0.5,0.75,200KiB,1", "--format", "csv", *SIZES]
    assert main(argv) == 0
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [int(r["saved_bytes"]) for r in table] == [p.saved_bytes for p in alone]
    assert [int(r["peak_bytes"]) for r in table] == [p.peak_bytes for p in alone]
    assert main(["sweep", "--modules", "blocks.0", *SIZES]) == 2
    assert "--modules applies to --eager plans only" in capsys.readouterr().err
    with pytest.raises(ValueError, match="at least one budget"):
        budget.eager.sweep(ex.model, *ex.args, step=ex.step, budgets=[])
