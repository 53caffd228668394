"""bench/peak_search.py's spy on the exact peak search, on a toy MLP: the bench reads what
the search did from it, so it must still see the search run (it rotted once when the
search moved between modules)."""

from __future__ import annotations

import sys
from pathlib import Path

import budget
from budget.models import get_builtin

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_the_bench_sees_what_the_exact_peak_search_did():
    sys.path.insert(0, str(BENCH))
    try:
        import peak_search
    finally:
        sys.path.remove(str(BENCH))
    ex = get_builtin("mlp", batch=8, d_in=16, d=32, layers=2)
    (b1,) = budget.plans(ex.step, *ex.args, memory_budget=1.0, compiler="eager")
    with peak_search.Searches() as searches:
        plan, _, error = peak_search.run(ex, "eager", int(b1.peak_bytes * 0.9), "exact")
    assert searches.last is not None, error
    assert searches.last.tried and searches.last.stopped
    assert plan is None or plan.peak_bytes <= int(b1.peak_bytes * 0.9)
