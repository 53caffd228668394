"""A step peak budget across graph breaks: the joint division against the proportional one.

For each test model with graph breaks (tests/helpers/graph_breaks.py) and each share of
its b=1 step's measured peak, ``budget.plans(..., peak_memory_budget=...)`` with the
eager compiler, twice: as it is (the joint division, budget.planning.step_split, with the
proportional one as its fallback) and with the joint division turned off (the proportional
one alone). For each: the plans' recompute (plan cost units, summed over the graphs), the
backward FLOPs of the step trained on those plans (``FlopCounterMode``), the predicted step
peak and the measured one (``measure_peak``), both as shares of the budget; "refused"
where the preview raises. Nothing here is timed.

    python bench/step_split.py --markdown /tmp/step_split.md
    python bench/results.py --add-markdown step_split /tmp/step_split.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.graph_breaks import BreakInTheMiddle, ThreeGraphs  # noqa: E402

import budget  # noqa: E402
from budget.compile import preview  # noqa: E402
from budget.runtime.measure import backward_flops, measure_peak  # noqa: E402

MODELS = {
    "two graphs": lambda: (BreakInTheMiddle(), torch.randn(512, 128)),
    "three graphs": lambda: (ThreeGraphs(), torch.randn(512, 128)),
}


def cell(model: torch.nn.Module, x: torch.Tensor, target: int, joint: bool) -> str:
    """``recompute / backward GFLOP / predicted / measured`` for one division."""
    original = preview._joint_division
    if not joint:
        preview._joint_division = lambda *_: None
    try:
        torch._dynamo.reset()
        plans = budget.plans(model, x, peak_memory_budget=f"{target}B", compiler="eager")
    except budget.BudgetTooSmallError:
        return "refused"
    finally:
        preview._joint_division = original
    found = budget.step_peak(plans)
    assert found is not None
    torch._dynamo.reset()
    step = torch.compile(model, backend=budget.backend(plan=plans, compiler="eager"))
    measured = measure_peak(step, x)
    flops = backward_flops(step(x))
    model.zero_grad(set_to_none=True)
    cost = sum(p.total_recompute_cost for p in plans)
    return f"{cost:.3g} / {flops / 1e9:.3f} / {found[0] / target:.3f} / {measured / target:.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shares", default="0.8,0.6,0.5", help="of the b=1 step's peak")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    args = parser.parse_args()
    shares = [float(f) for f in args.shares.split(",")]
    if not all(0 < f <= 1 for f in shares):
        parser.error(f"--shares: each in (0, 1]; got {args.shares}")
    lines = [
        f"`python bench/step_split.py {' '.join(sys.argv[1:])}`: eager compiler. Each cell: "
        "recompute (plan cost units) / backward GFLOP / predicted step peak / measured step "
        "peak, the peaks as shares of the budget.",
        "",
        "| model | budget (of b=1's peak) | joint | proportional |",
        "|---|---:|---:|---:|",
    ]
    print("\n".join(lines), flush=True)
    for name, make in MODELS.items():
        torch.manual_seed(0)
        model, x = make()
        torch._dynamo.reset()
        full = measure_peak(torch.compile(model, backend=budget.backend(1.0, compiler="eager")), x)
        model.zero_grad(set_to_none=True)
        for share in shares:
            target = int(share * full)
            row = [cell(model, x, target, joint) for joint in (True, False)]
            lines.append(f"| {name} | {share:g} | " + " | ".join(row) + " |")
            print(lines[-1], flush=True)
    if args.markdown:
        args.markdown.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
