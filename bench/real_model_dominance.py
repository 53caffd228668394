"""budget's plans beside torch's on the real models: measured peak and backward FLOPs.

For each model (tests/helpers/real_models.py: transformers, timm and torchvision models
from small configs) and fraction, one training step compiled with ``budget.backend(b)``
and one with torch's own partitioner at ``activation_memory_budget=b``, with the same
compiler: ``--compiler eager`` (the default) runs both op by op (budget's
``compiler="eager"``; torch's ``aot_eager_decomp_partition``, the reference the real-model
tests use), ``--compiler inductor`` compiles both with Inductor (budget's default;
``torch.compile``'s). Each step's peak is measured (``measure_peak``: torch.profiler's
memory events over one warmed-up step) as a share of budget's b=1 step, and its backward
FLOPs counted (``FlopCounterMode``). A plan is dominated where torch's peaks lower with no
more backward FLOPs; ``ABOVE`` marks a plan peaking over budget's b=1 plan. The figures are
measurements, not the planner's predictions.

    python bench/real_model_dominance.py --markdown /tmp/dominance.md
    python bench/real_model_dominance.py --models llama,t5 --fractions 0.5,0.2
    python bench/real_model_dominance.py --compiler inductor --markdown /tmp/inductor.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.real_models import FACTORIES, make  # noqa: E402

import budget  # noqa: E402
from budget.runtime._torch_private import functorch_config  # noqa: E402
from budget.runtime.measure import backward_flops, measure_peak  # noqa: E402

# torch's partitioner under each of budget's compilers
TORCH_BACKENDS = {"eager": "aot_eager_decomp_partition", "inductor": "inductor"}


def measured(name: str, b: float, ours: bool, compiler: str) -> tuple[int, int]:
    """(peak bytes, backward FLOPs) of one step of ``name`` planned at ``b``."""
    m = make(name)
    torch._dynamo.reset()
    if ours:
        step = torch.compile(m.step, backend=budget.backend(b, compiler=compiler))
        return measure_peak(step, *m.args), backward_flops(step(*m.args))
    with functorch_config.patch(activation_memory_budget=b):
        step = torch.compile(m.step, backend=TORCH_BACKENDS[compiler])
        return measure_peak(step, *m.args), backward_flops(step(*m.args))


def row(name: str, fractions: list[float], compiler: str) -> tuple[str, int]:
    """The model's table row and how many of its plans are dominated or above b=1."""
    top, _ = measured(name, 1.0, True, compiler)
    cells, bad = [], 0
    for b in fractions:
        peak, flops = measured(name, b, True, compiler)
        their_peak, their_flops = measured(name, b, False, compiler)
        flags = []
        if peak > top:
            flags.append("ABOVE")
        if their_peak < peak and their_flops <= flops:
            flags.append("DOMINATED")
        bad += bool(flags)
        cells.append(
            f"{peak / top:.4f} / {their_peak / top:.4f} / {flops / max(their_flops, 1):.3f}"
            + (f" {' '.join(flags)}" if flags else "")
        )
    return f"| {name} | {top / 1024:.1f} | " + " | ".join(cells) + " |", bad


def add_grid_options(parser: argparse.ArgumentParser) -> None:
    """The real-model grid's options (also bench/vs_torch.py's): models, fractions, markdown."""
    parser.add_argument("--models", default=",".join(FACTORIES), help="comma-separated")
    parser.add_argument("--fractions", default="0.5,0.2,0", help="comma-separated, below 1")
    parser.add_argument("--markdown", type=Path, help="also write the table here")


def grid_head(caption: str, lead: list[str], aligns: str, fractions: list[float]) -> list[str]:
    """The lines above a grid bench's rows: its caption, then a markdown table's head,
    the ``lead`` columns (aligned as ``aligns``, e.g. ``"|---|---:|"``) and one per fraction."""
    return [
        caption,
        "",
        "| " + " | ".join(lead) + " | " + " | ".join(f"b={f:g}" for f in fractions) + " |",
        aligns + "---:|" * len(fractions),
    ]


def grid_of(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[list, list]:
    """The models and fractions asked for, checked (an unknown one is a usage error)."""
    models = args.models.split(",")
    unknown = sorted(set(models) - set(FACTORIES))
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(FACTORIES)}")
    fractions = [float(f) for f in args.fractions.split(",")]
    if not all(0 <= f < 1 for f in fractions):
        parser.error(f"--fractions: each in [0, 1); got {args.fractions}")
    return models, fractions


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_grid_options(parser)
    parser.add_argument("--compiler", choices=sorted(TORCH_BACKENDS), default="eager")
    args = parser.parse_args()
    models, fractions = grid_of(parser, args)
    caption = (
        f"`python bench/real_model_dominance.py {' '.join(sys.argv[1:])}`: compiler {args.compiler}. "
        "Each cell: budget's peak / torch's peak (shares of budget's b=1 peak) / budget's "
        "backward FLOPs over torch's."
    )
    lines = grid_head(caption, ["model", "b=1 peak KiB"], "|---|---:|", fractions)
    print("\n".join(lines), flush=True)
    bad = 0
    for name in models:
        line, n = row(name, fractions, args.compiler)
        bad += n
        lines.append(line)
        print(line, flush=True)
    lines += ["", f"{bad} plans dominated by torch's or above budget's b=1 plan"]
    print(lines[-1])
    if args.markdown:
        args.markdown.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
