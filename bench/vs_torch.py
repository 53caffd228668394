"""What ``vs_torch`` shows on the real models: budget's plan beside torch's own, per budget.

For each model (tests/helpers/real_models.py) and fraction, one preview with
``vs_torch=True``: on the compiled path (``compiler="eager"``, whose predictions are the
measured figures) budget's plan and torch's partitioner's at the same
``activation_memory_budget``; for ``budget.apply`` at each fraction, budget's eager plan and
torch's checkpointing of every module it may checkpoint. Cells: torch's recompute over
budget's (estimated time; ``inf`` where budget recomputes nothing) / torch's predicted peak
over budget's / torch's saved bytes over budget's / torch's recompute over budget's plan's
at the bytes torch's plan keeps (``TorchPlan.budget_recompute_cost``: the comparison at
equal memory); ``refused`` where budget refuses
torch's set (a random op recomputed with a fresh sample). That torch's figures are what torch does
is tested, not assumed (tests/test_real_models.py, against torch's own runs).

    python bench/vs_torch.py --markdown /tmp/vs_torch.md
    python bench/vs_torch.py --models llama,t5 --fractions 0.5
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers.real_models import make  # noqa: E402
from real_model_dominance import add_grid_options, grid_head, grid_of  # noqa: E402

import budget  # noqa: E402
from budget.core.plan import Plan  # noqa: E402


def _ratio(theirs: float | None, ours: float | None) -> float:
    if theirs is None or ours is None:
        return math.nan
    return theirs / ours if ours else (math.inf if theirs else 1.0)


def cell(plans: list[Plan]) -> str:
    """One model's cell at one fraction: its graphs' figures summed."""
    theirs = [p.torch_plan for p in plans]
    if any(t is None for t in theirs):
        return "-"
    if any(t.refused for t in theirs):  # type: ignore[union-attr]
        return "refused"
    cost = _ratio(
        sum(t.recompute_cost for t in theirs),  # type: ignore[union-attr]
        sum(p.total_recompute_cost for p in plans),
    )
    peak = _ratio(max(t.peak_bytes or 0 for t in theirs), max(p.peak_bytes or 0 for p in plans))  # type: ignore[union-attr]
    saved = _ratio(sum(t.saved_bytes for t in theirs), sum(p.saved_bytes for p in plans))  # type: ignore[union-attr]
    text = f"{cost:.2f} / {peak:.3f} / {saved:.3f}"
    at_bytes = [t.budget_recompute_cost for t in theirs]  # type: ignore[union-attr]
    if all(c is not None for c in at_bytes):  # at equal memory
        mine = sum(at_bytes)  # type: ignore[arg-type]
        text += f" / {_ratio(sum(t.recompute_cost for t in theirs), mine):.2f}"  # type: ignore[union-attr]
    return text


def row(name: str, fractions: list[float], path: str) -> str:
    cells = []
    for b in fractions:
        m = make(name)
        torch._dynamo.reset()
        if path == "compiled":
            found = budget.plans(m.step, *m.args, memory_budget=b, compiler="eager", vs_torch=True)
        else:
            if hasattr(m.model, "config"):
                m.model.config.use_cache = False
            found = [
                budget.eager.plan(m.model, *m.args, step=m.step, memory_budget=b, vs_torch=True)
            ]
        cells.append(cell(found))
    return f"| {name} | {path} | " + " | ".join(cells) + " |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_grid_options(parser)
    args = parser.parse_args()
    models, fractions = grid_of(parser, args)
    caption = (
        f"`python bench/vs_torch.py {' '.join(sys.argv[1:])}`: each cell torch's recompute / "
        "predicted peak / saved bytes over budget's at that budget, then torch's recompute "
        "over budget's plan's at the bytes torch keeps (compiled: torch's partitioner, "
        "compiler eager; apply: torch's checkpointing of every module)."
    )
    lines = grid_head(caption, ["model", "path"], "|---|---|", fractions)
    print("\n".join(lines), flush=True)
    for name in models:
        for path in ("compiled", "apply"):
            lines.append(row(name, fractions, path))
            print(lines[-1], flush=True)
    if args.markdown:
        args.markdown.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
