"""Peak memory of the real models: budget's predicted peak beside the measured one.

For each model (tests/helpers/real_models.py: transformers, timm and torchvision models
from small configs) and compiler: one training step compiled with ``budget.backend(b)``,
its peak measured by ``budget.runtime.measure.measure_peak`` (CPU: torch.profiler's
memory events over one warmed-up step), beside the plan's ``peak_bytes`` (predicted from
the graphs) and, under Inductor, its ``compiled_peak_bytes`` (the peak of the code
Inductor generated, run on meta tensors: what a peak budget is checked on). Ratios:
predicted / measured (below 1: under, and a peak budget planned on it can be missed).
With graph breaks, the step's peak (``budget.step_peak``): the preview's (eager code's
saves counted) and, under Inductor, training's on the compiled peaks (eager code's saves
not seen in training). ``apply``: the step checkpointed by ``budget.apply(model, ...,
memory_budget=b)`` and run eagerly, its plan's ``peak_bytes`` (the step run on fake tensors
with the plan installed) beside the measured peak.

    TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 python bench/real_model_peaks.py
    python bench/real_model_peaks.py --compilers eager,apply --models t5,llama
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.real_models import FACTORIES, every, make  # noqa: E402

import budget  # noqa: E402
from budget.compile.backend import root_error  # noqa: E402
from budget.runtime.measure import measure_peak  # noqa: E402

KiB = 1024


def applied_row(name: str, b: float) -> str:
    """``budget.apply``'s predicted peak beside the measured one (eager, no graphs)."""
    m = make(name)
    if hasattr(getattr(m.model, "config", None), "use_cache"):
        m.model.config.use_cache = False  # as transformers trains under checkpointing
    try:
        plan = budget.apply(m.model, *m.args, step=m.step, memory_budget=b)
        measured = measure_peak(m.step, *m.args)
    except Exception as e:
        return f"| {name} | apply | - | - | - | - | - | - | {type(e).__name__} |"
    predicted = plan.peak_bytes or 0
    under = f"under by {measured - predicted} B" if predicted < measured else ""
    return (
        f"| {name} | apply | - | {measured / KiB:.1f} | {predicted / KiB:.1f} "
        f"| {predicted / measured:.3f} | - | - | {under} |"
    )


def row(name: str, compiler: str, b: float) -> str:
    if compiler == "apply":
        return applied_row(name, b)
    m = make(name)
    torch._dynamo.reset()
    be = budget.backend(b, compiler=compiler)
    step = torch.compile(m.step, backend=be)
    try:
        measured = measure_peak(step, *m.args)
    except Exception as e:
        inner = root_error(e)
        return f"| {name} | {compiler} | - | - | - | - | - | - | {type(inner).__name__} |"
    graphs = len(be.plans)
    # the step's peak: each graph's over what the step holds outside it (a preview counts
    # eager code's saves and the order graphs run in; training, earlier graphs' figures)
    torch._dynamo.reset()
    previewed = budget.step_peak(budget.plans(m.step, *m.args, memory_budget=b, compiler=compiler))
    predicted = previewed[0] if previewed else 0
    ratio = predicted / measured
    trained = budget.step_peak(be.plans) if compiler == "inductor" else None
    compiled = trained[0] if trained and be.plans[trained[1]].compiled_peak_bytes else None
    shown, compiled_ratio = "-", "-"
    checked = predicted  # the figure a peak budget is checked on
    if compiled is not None:
        shown, compiled_ratio = f"{compiled / KiB:.1f}", f"{compiled / measured:.3f}"
        checked = compiled
    under = f"under by {measured - checked} B" if checked < measured else ""
    return (
        f"| {name} | {compiler} | {graphs} | {measured / KiB:.1f} | {predicted / KiB:.1f} "
        f"| {ratio:.3f} | {shown} | {compiled_ratio} | {under} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--compilers",
        default="eager,inductor,apply",
        help="comma-separated: the compiled path's compilers, and apply (budget.apply)",
    )
    parser.add_argument(
        "--models",
        default=",".join(FACTORIES),
        help="comma-separated (more: tests/helpers/more_models.py)",
    )
    parser.add_argument("--budget", type=float, default=0.5, help="memory budget fraction")
    args = parser.parse_args()
    models = args.models.split(",")
    unknown = sorted(set(models) - set(every()))
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(every())}")
    print(
        f"`python bench/real_model_peaks.py {' '.join(sys.argv[1:])}`: budget "
        f"{budget.__version__}, torch {torch.__version__}, b={args.budget}"
    )
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
