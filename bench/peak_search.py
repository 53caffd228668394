"""The exact peak search (peak_search="exact") beside the grid search (the default) at peak
targets: the recompute each plan pays, its predicted peak, whether the exact search proved
its plan the cheapest of those that recompute each value once, how many plans it
partitioned and why it stopped, and the wall time of each search (previews, no code
generation). The floor is the bound no plan's predicted peak is below.

Models: the built-in GPT (4 layers, d=256, T=256, batch 4) under Inductor's graphs, and
the residual convnet of issue 11 (batch 8, 32x32, width 64, 2 blocks) with the eager
compiler. Targets: fractions of the b=1 plan's predicted peak.

    python bench/peak_search.py            # about 6 minutes on 2 cores
"""

from __future__ import annotations

import time

import torch

import budget
from budget.compile import peak_plan
from budget.models import get_builtin

MiB = 2**20
FRACTIONS = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4)
MODELS = {
    "gpt (inductor)": (get_builtin("gpt"), "inductor"),
    "convnet (eager)": (
        get_builtin("resnet", batch=8, size=32, width=64, blocks=2),
        "eager",
    ),
}


class Searches:
    """What each exact search did (the last one's), read from search_peak's result."""

    def __init__(self) -> None:
        self.last = None
        self._search = peak_plan.search_peak

    def __enter__(self) -> Searches:
        def spy(*args, **kwargs):
            self.last = self._search(*args, **kwargs)
            return self.last

        peak_plan.search_peak = spy
        return self

    def __exit__(self, *exc: object) -> None:
        peak_plan.search_peak = self._search


def run(example, compiler: str, peak: int, mode: str):
    torch._dynamo.reset()
    start = time.perf_counter()
    try:
        with budget.config.patch(peak_search=mode):
            plan = budget.plan(
                example.step, *example.args, peak_memory_budget=f"{peak}B", compiler=compiler
            )
    except budget.BudgetTooSmallError as e:
        return None, time.perf_counter() - start, str(e)
    return plan, time.perf_counter() - start, ""


def main() -> None:
    for name, (example, compiler) in MODELS.items():
        torch._dynamo.reset()
        b1 = budget.plan(example.step, *example.args, compiler=compiler)
        print(f"\n### {name}: b=1 predicted peak {b1.peak_bytes / MiB:.2f} MiB\n")
        print(
            "| target | grid: recompute, peak, s | exact: recompute, peak, status, "
            "plans, stopped, s | exact/grid recompute |"
        )
        print("|---|---|---|---|")
        for fraction in FRACTIONS:
            peak = int(b1.peak_bytes * fraction)
            grid, grid_s, grid_err = run(example, compiler, peak, "grid")
            with Searches() as searches:
                exact, exact_s, exact_err = run(example, compiler, peak, "exact")
            found = searches.last
            floor = "" if found is None else f"; floor {found.floor_bytes / MiB:.2f} MiB"
            g = (
                f"{grid.total_recompute_cost:.3g}, {grid.peak_bytes / MiB:.2f}, {grid_s:.1f}"
                if grid
                else f"refused, {grid_s:.1f}"
            )
            if exact:
                e = (
                    f"{exact.total_recompute_cost:.3g}, {exact.peak_bytes / MiB:.2f}, "
                    f"{exact.status}, {len(found.tried)}, {found.stopped}{floor}, {exact_s:.1f}"
                )
            else:
                stop = found.stopped if found else ""
                e = f"refused ({stop}{floor}), {exact_s:.1f}"
            ratio = (
                f"{exact.total_recompute_cost / grid.total_recompute_cost:.3f}"
                if grid and exact and grid.total_recompute_cost
                else "-"
            )
            print(f"| {fraction:.1f}x ({peak / MiB:.2f} MiB) | {g} | {e} | {ratio} |", flush=True)
            del grid_err, exact_err


if __name__ == "__main__":
    main()
