"""What a preview costs: the estimate stage per estimator, and eager against Inductor tracing.

    python bench/preview_cost.py        # built-in GPT (4 layers, d=256), budget 0.5

Prints the ``estimate`` stage of a plan for ``flops`` and ``profile`` (twice: the second
``profile`` call hits the per-op timing cache), then the wall time of ``budget.plan`` with
``compiler="eager"`` and ``compiler="inductor"`` (twice each, after ``torch._dynamo.reset()``).
Single timings on a shared machine: read them as ratios. ``BUDGET_CACHE_DIR=""`` keeps the
host-CPU figures from the disk cache out of it.
"""

from __future__ import annotations

import time

import torch

import budget
from budget.models import get_builtin


def main() -> None:
    ex = get_builtin("gpt")
    for est in ("flops", "profile", "profile"):
        plan = budget.plan(ex.step, *ex.args, memory_budget=0.5, estimator=est, compiler="eager")
        print(f"estimate stage, {est:<8} {plan.timings['estimate']:.3f} s")
    for compiler in ("eager", "inductor", "eager", "inductor"):
        torch._dynamo.reset()
        start = time.perf_counter()
        budget.plan(ex.step, *ex.args, memory_budget=0.5, compiler=compiler)
        print(f"preview, {compiler:<8} {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
