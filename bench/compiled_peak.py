"""What checking plans on Inductor's generated code costs, and what a peak budget gets.

1. The meta run (budget.compile.compiled_peak, Inductor's wrapper code on meta tensors)
   beside the first training step it is part of (compile + one forward/backward), on
   built-in GPTs of 4 and 12 layers (d=128) at b=0.5; and the compiled peak beside the
   measured one (budget.runtime.measure.measure_peak).
2. T5 (tests/helpers/real_models.py) under peak budgets: the step's measured peak, the
   kept plan's compiled and predicted peaks, the target it was planned for, how many
   compiles the check took, and the wall time of the first step; or the refusal.

3. Previews of the same: ``budget.plan`` (the graphs' prediction) and
   ``budget.plan(..., compile=True)`` (Inductor's code generated on fake tensors, no
   kernel built, the peak checked on it as training checks it) beside the first training
   step, each timed cold: whether the compiled preview's plan is training's (saved bytes,
   code peak), and its time as a ratio to the first step's.

Every first step is timed cold (a fresh Inductor cache, on disk and in memory: no compile
uses kernels another built) beside torch's own first step of the same step, as a
ratio: at the same fraction for the GPTs, torch's default (b=1) for T5's peak budgets,
which torch cannot plan for.

    python bench/compiled_peak.py > /tmp/compiled_peak.md
    python bench/compiled_peak.py --parts previews
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch._inductor.utils import fresh_cache

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.real_models import make  # noqa: E402

import budget  # noqa: E402
from budget.compile import compiled_peak  # noqa: E402
from budget.compile.backend import root_error  # noqa: E402
from budget.models import get_builtin  # noqa: E402
from budget.runtime.measure import measure_peak  # noqa: E402

KiB, MiB = 2**10, 2**20


class Spent:
    """Wall time in CodeCapture.peak (the meta run) and how many times it ran."""

    def __init__(self) -> None:
        self.seconds, self.calls = 0.0, 0
        self._peak = compiled_peak.CodeCapture.peak

    def __enter__(self) -> Spent:
        def timed(capture, *args, **kwargs):
            start = time.perf_counter()
            try:
                return self._peak(capture, *args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1

        compiled_peak.CodeCapture.peak = timed  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        compiled_peak.CodeCapture.peak = self._peak  # type: ignore[method-assign]


def first_step(step, args) -> float:
    """Seconds of the first training step (compile, forward, backward), compiled cold."""
    with fresh_cache():
        start = time.perf_counter()
        step(*args).backward()
        return time.perf_counter() - start


def torchs_first_step(fn, args, b: float = 1.0) -> float:
    """Seconds of torch's own first step of ``fn`` (its partitioner at fraction ``b``)."""
    torch._dynamo.reset()
    with torch._functorch.config.patch(activation_memory_budget=b):
        return first_step(torch.compile(fn), args)


def overhead() -> None:
    print("| model | first step s | torch's s | ratio | meta run s | measured MiB | compiled MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for layers in (4, 12):
        ex = get_builtin("gpt", layers=layers, d=128)
        theirs = torchs_first_step(ex.step, ex.args, 0.5)
        torch._dynamo.reset()
        be = budget.backend(0.5)
        step = torch.compile(ex.step, backend=be)
        with Spent() as spent:
            took = first_step(step, ex.args)
        measured = measure_peak(step, *ex.args)
        plan = be.plans[0]
        print(
            f"| gpt {layers}L d=128 | {took:.1f} | {theirs:.1f} | {took / theirs:.2f} "
            f"| {spent.seconds:.2f} | {measured / MiB:.2f} "
            f"| {(plan.compiled_peak_bytes or 0) / MiB:.2f} |",
            flush=True,
        )


def t5_budgets() -> None:
    print()
    print(
        "| T5 peak budget | measured KiB | compiled KiB | predicted KiB | planned for KiB "
        "| compiles | recompute | first step s | / torch's (b=1) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    m = make("t5")
    theirs = torchs_first_step(m.step, m.args)
    for target in (1050 * KiB, 1000 * KiB, 950 * KiB):
        m = make("t5")
        torch._dynamo.reset()
        be = budget.backend(peak_memory_budget=f"{target}B")
        step = torch.compile(m.step, backend=be)
        with Spent() as spent:
            try:
                took = first_step(step, m.args)
            except Exception as e:  # noqa: BLE001 - the refusal is the row
                inner = root_error(e)
                print(f"| {target / KiB:.0f} | {type(inner).__name__}: {inner} ||||||||")
                continue
        measured = measure_peak(step, *m.args)
        p = be.plans[0]
        print(
            f"| {target / KiB:.0f} | {measured / KiB:.1f} | {(p.compiled_peak_bytes or 0) / KiB:.1f} "
            f"| {(p.peak_bytes or 0) / KiB:.1f} | {(p.peak_target_bytes or 0) / KiB:.1f} "
            f"| {spent.calls} | {p.total_recompute_cost:.3g} | {took:.1f} | {took / theirs:.2f} |",
            flush=True,
        )


def cold(fn, *args, **kwargs) -> tuple[float, Any]:
    """``fn(*args, **kwargs)`` with a fresh Inductor cache and dynamo reset: its seconds
    and result."""
    torch._dynamo.reset()
    with fresh_cache():
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        return time.perf_counter() - start, out


def trained(ex, **options) -> Any:
    """The plans of ``ex``'s first step compiled with ``budget.backend(**options)``."""
    be = budget.backend(**options)
    torch.compile(ex.step, backend=be)(*ex.args).backward()
    return be.plans


def previews() -> None:
    print()
    print(
        "| step | budget | preview s | compiled preview s | first step s | compiled preview "
        "/ first step | saved, code peak as training's | predicted MiB | code MiB |"
    )
    print("|---|---|---:|---:|---:|---:|---|---:|---:|")
    gpt = get_builtin("gpt", layers=4, d=128)
    t5 = make("t5")
    for name, ex, options in (
        ("gpt 4L d=128", gpt, {"memory_budget": 0.5}),
        ("gpt 4L d=128", gpt, {"peak_memory_budget": "20MiB"}),
        ("t5", t5, {"peak_memory_budget": f"{1000 * KiB}B"}),
    ):
        value = next(iter(options.values()))
        try:
            plain, _ = cold(budget.plan, ex.step, *ex.args, **options)
            took, plan = cold(budget.plan, ex.step, *ex.args, compile=True, **options)
            first, (kept,) = cold(trained, ex, **options)
        except Exception as e:  # noqa: BLE001 - the refusal is the row
            inner = root_error(e)
            print(f"| {name} | {value} | {type(inner).__name__}: {inner} |||||||")
            continue
        same = (plan.saved_bytes, plan.compiled_peak_bytes) == (
            kept.saved_bytes,
            kept.compiled_peak_bytes,
        )
        print(
            f"| {name} | {value} | {plain:.1f} | {took:.1f} | {first:.1f} "
            f"| {took / first:.2f} | {same} | {(plan.peak_bytes or 0) / MiB:.2f} "
            f"| {(plan.compiled_peak_bytes or 0) / MiB:.2f} |",
            flush=True,
        )


PARTS = {"overhead": overhead, "t5": t5_budgets, "previews": previews}


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--parts", default=",".join(PARTS), help="comma-separated: " + ", ".join(PARTS)
    )
    parts = parser.parse_args().parts.split(",")
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {unknown}: choose from {', '.join(PARTS)}")
    print(
        f"budget {budget.__version__}, torch {torch.__version__}, {torch.get_num_threads()} threads\n"
    )
    # Inductor's one-time set-up (imports, the compiler's checks) before any timed compile
    warm = torch.compile(lambda x: (x.sin() @ x).cos().sum())
    first_step(warm, (torch.randn(8, 8, requires_grad=True),))
    for part in parts:
        PARTS[part]()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
