"""Smoke and error paths of ``budget solve`` (the quickstart's main job)."""

from __future__ import annotations

import json

import pytest

import budget
from budget.cli import main


def test_solve_default_model_prints_a_plan(capsys):
    assert main(["solve", "--layers", "1", "--seq", "32", "--d", "64", "--budget", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "budget plan for graph" in out and "saved" in out and "recompute" in out


def test_json_output_round_trips(tmp_path, capsys):
    path = tmp_path / "plan.json"
    assert (
        main(["solve", "builtin:mlp", "--budget", "0.3", "--format", "json", "--json", str(path)])
        == 0
    )
    plan = budget.Plan.from_json(path.read_text())
    assert plan.saved_bytes <= plan.target_bytes
    printed = json.loads(capsys.readouterr().out)
    assert printed["graph_hash"] == plan.graph_hash


def test_user_file_target(tmp_path, capsys):
    src = tmp_path / "mine.py"
    src.write_text(
        "import torch\n"
        "def make():\n"
        "    w = torch.randn(64, 64, requires_grad=True)\n"
        "    return (lambda x: torch.mm(x, w).cos().sum()), (torch.randn(64, 64),)\n"
    )
    assert main(["solve", f"{src}:make", "--budget", "0"]) == 0
    assert "budget plan" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["solve", "builtin:nope"], "nope"),
        (["solve", "builtin:mlp", "--budget", "1.5"], "fraction in [0, 1]"),
        (["solve", "builtin:mlp", "--solver", "nope"], "unknown solver"),
        (["solve", "builtin:mlp", "--budget", "lots"], "memory budget"),
        (["solve", "no_such_file.py:make"], "no_such_file.py"),
    ],
)
def test_errors_exit_2_with_one_line(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and err.startswith("budget: error:")


def test_factory_that_raises(tmp_path, capsys):
    src = tmp_path / "bad.py"
    src.write_text("def make():\n    raise RuntimeError('boom')\n")
    assert main(["solve", f"{src}:make"]) == 2
    assert "boom" in capsys.readouterr().err
