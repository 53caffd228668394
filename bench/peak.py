"""Peak memory of a training step: torch's partitioner vs budget, measured, same run.

For each model and compiler, at torch's fractions b: the step compiled with torch's own
memory-budget partitioner (Inductor: ``torch.compile(step)``; eager:
``backend="aot_eager_decomp_partition"``) under ``activation_memory_budget=b``, and with
``budget.backend(b)``; then budget at peak targets between the lowest and the highest peak
its plans predict, at 0.5x and 0.7x the b=1 plan's measured peak (issue 11's targets
for the lowest reachable peak: 0.5x on the GPT, 0.7x on the convnet), and at each torch
fraction's measured peak (marked ``= torch b``: a target torch's step meets to the byte,
so budget must meet it with no more recompute). Each step's peak is measured by
``budget.runtime.measure.measure_peak``
(CPU: torch.profiler's memory events over one warmed-up step, above what was resident;
CUDA: max_memory_allocated). Reported: measured peak, budget's predicted peak and its
error, backward FLOPs (FlopCounterMode, gaps filled as in bench/pareto.py), and checks:

- at every peak target accepted, measured peak <= target;
- at every fraction, budget's measured peak <= the b=1 plan's, and budget's plan is not
  dominated by torch's at the same fraction (a higher measured peak for no fewer backward
  FLOPs);
- at a peak target, budget's recompute <= that of the cheapest torch fraction that fits.

    python bench/peak.py                      # GPT and both convnets, Inductor and eager
    python bench/peak.py --model gpt --compiler eager
    python bench/peak.py --model resnet18 --compiler inductor --fractions 0.5,0.3,0.2 --no-targets
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch._functorch.config

import budget
from budget.compile.backend import root_error
from budget.models import Example, get_builtin
from budget.runtime.measure import backward_flops, measure_peak

MiB = 2**20
FRACTIONS = [1.0, 0.8, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0]
MODELS: dict[str, Callable[[], Example]] = {
    # the built-in GPT: 4 layers, d=256, T=256, batch 4
    "gpt": lambda: get_builtin("gpt"),
    # the residual convnet: 64 channels, 32x32 images, batch 8 (3 stages of 2 blocks)
    "convnet": lambda: get_builtin("resnet", batch=8, size=32, width=64, blocks=2),
    # torchvision's ResNet-18 (7x7 stem, max pool), 4 x 64x64 images: a graph whose exact
    # optimum and torch's min-cut tie on recompute at some fractions and peak apart
    "resnet18": lambda: torchvision_resnet18(batch=4, size=64),
    # timm's MobileNetV3-small (depthwise convolutions, squeeze-excite blocks, hard-swish),
    # the real-model suite's: a family whose low fractions can peak above b=1's
    "mobilenetv3": lambda: real_model("timm:mobilenetv3_small_050"),
}

# issue 11: the lowest reachable peak, as a fraction of the b=1 plan's measured peak
LOWEST_GOAL = {"gpt": 0.5, "convnet": 0.7}


def real_model(name: str) -> Example:
    """A model of the real-model suite (tests/helpers/real_models.py), as an Example."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from helpers.real_models import make

    m = make(name)
    return Example(name, m.model, m.args, m.step)


def torchvision_resnet18(batch: int, size: int) -> Example:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from helpers.real_models import import_torchvision

    tv = import_torchvision()
    torch.manual_seed(0)
    model = tv.models.resnet18(num_classes=10)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 3, size, size, generator=gen)
    y = torch.randint(10, (batch,), generator=gen)

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(model(x), y)

    return Example("resnet18", model, (x, y), step, {"batch": batch, "size": size})


@dataclass
class Row:
    label: str
    measured: int | None = None
    predicted: int | None = None
    compiled: int | None = None  # Inductor: the peak of the code it generated (run on meta)
    flops: int | None = None
    recompute: float | None = None  # budget's estimated recompute cost (plan units)
    error: str = ""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run(ex: Example, backend: Any, ctx: Any = None) -> Row:
    torch._dynamo.reset()
    ex.model.zero_grad(set_to_none=True)
    row = Row("")
    try:
        with ctx or contextlib.nullcontext():
            step = torch.compile(ex.step, backend=backend)
            row.measured = measure_peak(step, *ex.args)
            row.flops = backward_flops(step(*ex.args))
    except Exception as e:
        inner = root_error(e)
        line = (str(inner).splitlines() or [""])[0]  # its head and its end (the lowest peak)
        short = line if len(line) <= 160 else f"{line[:90]} ... {line[-70:]}"
        row.error = f"{type(inner).__name__}: {short}"
    finally:
        ex.model.zero_grad(set_to_none=True)
    plans = getattr(backend, "plans", None)
    if plans:
        row.predicted = sum(p.peak_bytes or 0 for p in plans)
        if all(p.compiled_peak_bytes is not None for p in plans):
            row.compiled = sum(p.compiled_peak_bytes or 0 for p in plans)
        row.recompute = sum(p.total_recompute_cost for p in plans)
    return row


def torch_backend(compiler: str) -> str | None:
    return None if compiler == "inductor" else "aot_eager_decomp_partition"


def mib(n: int | None) -> str:
    return "-" if n is None else f"{n / MiB:.2f}"


def error(predicted: int | None, measured: int | None) -> str:
    return "-" if predicted is None or not measured else f"{(predicted - measured) / measured:+.1%}"


def bench(
    name: str, compiler: str, fractions: list[float], targets: bool = True
) -> tuple[list[str], list[tuple[str, bool]]]:
    ex = MODELS[name]()
    lines = [
        f"**{name}**, compiler {compiler}: peak MiB measured (budget's prediction from the "
        "graphs, its error; under Inductor, the peak of the code Inductor generated, its "
        "error), backward GFLOP",
        "",
        "| b | torch peak | torch GF | budget peak | predicted | error | compiled | error |"
        " budget GF |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    checks: list[tuple[str, bool]] = []
    torch_rows: dict[float, Row] = {}
    ours: dict[float, Row] = {}
    for b in fractions:
        t0 = time.perf_counter()
        ctx = torch._functorch.config.patch(activation_memory_budget=b)
        be = torch_backend(compiler)
        torch_rows[b] = run(ex, be or "inductor", ctx)
        ours[b] = run(ex, budget.backend(b, compiler=compiler))
        t, o = torch_rows[b], ours[b]
        lines.append(
            f"| {b:g} | {mib(t.measured)} | {(t.flops or 0) / 1e9:.3f} | {mib(o.measured)} | "
            f"{mib(o.predicted)} | {error(o.predicted, o.measured)} | {mib(o.compiled)} | "
            f"{error(o.compiled, o.measured)} | {(o.flops or 0) / 1e9:.3f} |"
        )
        log(f"{name} {compiler} b={b}: {time.perf_counter() - t0:.1f}s {t.error} {o.error}")
    ref = ours[1.0].measured or 0
    for b, o in ours.items():
        checks.append(
            (f"{name}/{compiler} b={b:g}: measured peak <= b=1's", (o.measured or 0) <= ref)
        )
        t = torch_rows[b]
        if t.measured is not None and t.flops is not None:  # torch's step ran
            dominated = (o.measured or 0) > t.measured and (o.flops or 0) >= t.flops
            checks.append(
                (
                    f"{name}/{compiler} b={b:g}: not dominated by torch's (a higher peak "
                    "for no less recompute)",
                    not dominated,
                )
            )
    if not targets:
        return lines, checks
    predicted = [o.predicted for o in ours.values() if o.predicted]
    lo, hi = min(predicted), max(predicted)
    lines += [
        "",
        "| peak target | budget peak | predicted | compiled | budget GF |"
        " cheapest torch b that fits | its GF |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    targets = {lo + (hi - lo) * k // 4 + (1 if k == 0 else 0) for k in (0, 1, 2, 3)}
    targets |= {int(ref * 0.5), int(ref * 0.7)}
    torch_peaks = {t.measured: b for b, t in torch_rows.items() if t.measured}
    targets |= set(torch_peaks)
    for target in sorted(targets):
        o = run(ex, budget.backend(compiler=compiler, peak_memory_budget=f"{target}B"))
        fits = [b for b, t in torch_rows.items() if t.measured is not None and t.measured <= target]
        best = min(fits, key=lambda b: torch_rows[b].flops or 0) if fits else None
        tf = torch_rows[best].flops if best is not None else None
        mark = f" = torch b={torch_peaks[target]:g}" if target in torch_peaks else ""
        lines.append(
            f"| {mib(target)}{mark} | {mib(o.measured)} | {mib(o.predicted)} | {mib(o.compiled)} | "
            f"{(o.flops or 0) / 1e9:.3f} | {'-' if best is None else f'{best:g}'} | "
            f"{'-' if tf is None else f'{tf / 1e9:.3f}'} |"
        )
        goal = LOWEST_GOAL.get(name)
        if goal is not None and target == int(ref * goal):
            checks.append(
                (
                    f"{name}/{compiler}: a peak of {goal:g}x b=1's is reachable",
                    not o.error and (o.measured or 0) <= target,
                )
            )
        if o.error:
            lines[-1] += f" {o.error}"
            if best is not None:  # refused, where a torch fraction's step fits
                checks.append(
                    (f"{name}/{compiler} peak {mib(target)}: met (torch's b={best:g} fits)", False)
                )
            continue
        checks.append(
            (f"{name}/{compiler} peak {mib(target)}: measured <= target", o.measured <= target)
        )
        if tf is not None:
            checks.append(
                (f"{name}/{compiler} peak {mib(target)}: GF <= torch's", (o.flops or 0) <= tf)
            )
    return lines, checks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=[*MODELS, "all"], default="all")
    parser.add_argument("--compiler", choices=["inductor", "eager", "all"], default="all")
    parser.add_argument(
        "--fractions",
        default=",".join(f"{f:g}" for f in FRACTIONS),
        help="comma-separated fractions (1 is always run: the reference)",
    )
    parser.add_argument("--no-targets", action="store_true", help="fractions only: no peak targets")
    args = parser.parse_args()
    fractions = sorted({1.0, *(float(f) for f in args.fractions.split(","))}, reverse=True)
    models = list(MODELS) if args.model == "all" else [args.model]
    compilers = ["inductor", "eager"] if args.compiler == "all" else [args.compiler]
    print(
        f"`python bench/peak.py {' '.join(sys.argv[1:])}`: budget {budget.__version__}, torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads\n"
    )
    failed = 0
    for name in models:
        for compiler in compilers:
            lines, checks = bench(name, compiler, fractions, targets=not args.no_targets)
            print("\n".join(lines) + "\n")
            for what, ok in checks:
                failed += not ok
                print(f"{'PASS' if ok else 'FAIL'} {what}")
            print()
    print(f"{failed} checks failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
