"""bench/results.py: RESULTS.md is written from the benches' own output, under a header
naming the commit, date, device and torch of each run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def results(tmp_path, monkeypatch):
    sys.path.insert(0, str(BENCH))
    try:
        import results
    finally:
        sys.path.remove(str(BENCH))
    monkeypatch.setattr(results, "KEPT", tmp_path / "kept")
    monkeypatch.setattr(results, "OUT", tmp_path / "RESULTS.md")
    return results


def test_a_cpu_benchs_tables_are_kept_under_a_header(results, tmp_path):
    out = tmp_path / "pareto.md"
    out.write_text("| model | b | saved |\n|---|---|---|\n| gpt | 0.5 | 12.0 |\n")
    assert results.main(["--add-markdown", "pareto", str(out), "--commit", "abc1234"]) == 0
    text = (tmp_path / "RESULTS.md").read_text()
    assert "## `bench/pareto.py`" in text and "| gpt | 0.5 | 12.0 |" in text
    header = text.split("## `bench/pareto.py`")[1].splitlines()[2]
    assert header.startswith("commit abc1234, ") and "torch " in header and "threads" in header
    # the vector unit torch uses on this CPU (oneDNN's kernels, and so their peaks, differ)
    import torch

    assert f", {torch.backends.cpu.get_cpu_capability()} (" in header


def test_what_is_not_a_bench_or_a_table_is_refused(results, tmp_path):
    out = tmp_path / "x.md"
    out.write_text("no table here\n")
    with pytest.raises(SystemExit, match="no markdown table"):
        results.main(["--add-markdown", "pareto", str(out)])
    with pytest.raises(SystemExit, match="no bench/nosuch.py"):
        results.main(["--add-markdown", "nosuch", str(out)])
