"""The real-model table: transformers, timm and torchvision models from small configs
(tests/helpers/real_models.py), planned and trained by budget's backend, measured.

For each model, compiler and budget: the number of graphs (graph breaks), the plans'
target and saved bytes, the measured saved bytes (saved_tensors_hooks: distinct new
storages, parameters, buffers and inputs excluded), Inductor's layout copies counted in
the plans, the activations later graphs keep after a break (outside the plans), what
eager code between graphs saves for itself (a preview's ``plan.eager_saved_bytes``), and
the largest gradient difference from torch's own pipeline for that compiler
(aot_eager_decomp_partition, resp. inductor with torch's partitioner).

    python bench/real_models.py --markdown                      # eager + inductor at 0.5
    python bench/real_models.py --compilers eager --budgets 1,0.5,0.2,0
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.real_models import FACTORIES, every, make  # noqa: E402

import budget  # noqa: E402
from budget.runtime.measure import saved_bytes  # noqa: E402

TORCH_BACKEND = {"eager": "aot_eager_decomp_partition", "inductor": "inductor"}
KiB = 1024


def _grads(model, step, args):
    model.zero_grad(set_to_none=True)
    step(*args).backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def row(name: str, compiler: str, b: float) -> dict:
    m = make(name)
    torch._dynamo.reset()
    ref = _grads(m.model, torch.compile(m.step, backend=TORCH_BACKEND[compiler]), m.args)
    torch._dynamo.reset()
    be = budget.backend(b, compiler=compiler)
    step = torch.compile(m.step, backend=be)
    exclude = list(m.model.parameters()) + list(m.model.buffers())
    measured = saved_bytes(step, *m.args, exclude=exclude)
    measured.output.backward()
    got = _grads(m.model, step, m.args)
    diff = max(float((g - r).abs().max()) for g, r in zip(got, ref, strict=True))
    plans = be.plans
    torch._dynamo.reset()
    previewed = budget.plans(m.step, *m.args, memory_budget=b, compiler=compiler)
    return {
        "model": name,
        "kind": m.kind,
        "compiler": compiler,
        "b": b,
        "graphs": len(plans),
        "target": sum(p.target_bytes for p in plans),
        "planned": sum(p.saved_bytes for p in plans),
        "measured": measured.saved_bytes,
        "copies": sum(p.copied_input_bytes for p in plans),
        "kept": sum(p.kept_input_bytes for p in plans),
        "eager": sum(p.eager_saved_bytes for p in previewed),
        "grad_diff": diff,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--models",
        default=",".join(FACTORIES),
        help="comma-separated (more: tests/helpers/more_models.py)",
    )
    ap.add_argument("--compilers", default="eager,inductor")
    ap.add_argument("--budgets", default="0.5")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    names = a.models.split(",")
    unknown = sorted(set(names) - set(every()))
    if unknown:
        ap.error(f"unknown models {unknown}; available: {', '.join(every())}")
    print(
        "| model | kind | compiler | b | graphs | target KiB | planned KiB | measured KiB "
        "| of which layout copies KiB | kept after breaks KiB | eager code saves KiB "
        "(preview) | max grad diff vs torch |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for compiler in a.compilers.split(","):
        for b in (float(x) for x in a.budgets.split(",")):
            for name in names:
                start = time.perf_counter()
                r = row(name, compiler, b)
                print(
                    f"| {r['model']} | {r['kind']} | {compiler} | {b:g} | {r['graphs']} | "
                    f"{r['target'] / KiB:.1f} | {r['planned'] / KiB:.1f} | "
                    f"{r['measured'] / KiB:.1f} | {r['copies'] / KiB:.1f} | "
                    f"{r['kept'] / KiB:.1f} | {r['eager'] / KiB:.1f} | {r['grad_diff']:.1e} |",
                    flush=True,
                )
                print(f"  ({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
