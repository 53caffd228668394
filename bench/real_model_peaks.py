"""Peak memory of the real models: budget's predicted peak beside the measured one.

For each model (tests/helpers/real_models.py: transformers, timm and torchvision models
from small configs) and compiler: one training step compiled with ``budget.backend(b)``,
its peak measured by ``budget.runtime.measure.measure_peak`` (CPU: torch.profiler's
memory events over one warmed-up step), beside the plan's ``peak_bytes`` (predicted from
the graphs) and, under Inductor, its ``compiled_peak_bytes`` (the peak of the code
Inductor generated, run on meta tensors: what a peak budget is checked on). Ratios:
predicted / measured (below 1: under, and a peak budget planned on it can be missed).
Models with a graph break have one plan per graph and no single prediction of the step.

    TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 python bench/real_model_peaks.py
    python bench/real_model_peaks.py --compilers eager --models t5,llama
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.real_models import FACTORIES, make  # noqa: E402

import budget  # noqa: E402
from budget.compile.backend import root_error  # noqa: E402
from budget.runtime.measure import measure_peak  # noqa: E402

KiB = 1024


def row(name: str, compiler: str, b: float) -> str:
    m = make(name)
    torch._dynamo.reset()
    be = budget.backend(b, compiler=compiler)
    step = torch.compile(m.step, backend=be)
    try:
        measured = measure_peak(step, *m.args)
    except Exception as e:
        inner = root_error(e)
        return f"| {name} | {compiler} | - | - | - | - | - | - | {type(inner).__name__} |"
    predicted = [p.peak_bytes or 0 for p in be.plans]
    if len(predicted) != 1:
        shown = " + ".join(f"{p / KiB:.1f}" for p in predicted)
        return (
            f"| {name} | {compiler} | {len(predicted)} | {measured / KiB:.1f} | {shown} "
            "| - | - | - | |"
        )
    ratio = predicted[0] / measured
    compiled = be.plans[0].compiled_peak_bytes
    shown, compiled_ratio = "-", "-"
    under = ratio < 1
    if compiled is not None:
        shown, compiled_ratio = f"{compiled / KiB:.1f}", f"{compiled / measured:.3f}"
        under = compiled < measured
    return (
        f"| {name} | {compiler} | 1 | {measured / KiB:.1f} | {predicted[0] / KiB:.1f} "
        f"| {ratio:.3f} | {shown} | {compiled_ratio} | {'under' if under else ''} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compilers", default="eager,inductor", help="comma-separated")
    parser.add_argument("--models", default=",".join(FACTORIES), help="comma-separated")
    parser.add_argument("--budget", type=float, default=0.5, help="memory budget fraction")
    args = parser.parse_args()
    models = args.models.split(",")
    unknown = sorted(set(models) - set(FACTORIES))
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(FACTORIES)}")
    print(f"budget {budget.__version__}, torch {torch.__version__}, b={args.budget}")
    print(
        "| model | compiler | graphs | measured KiB | predicted KiB | ratio | compiled KiB "
        "| ratio | |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for compiler in args.compilers.split(","):
        for name in models:
            print(row(name, compiler, args.budget), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
