"""Memory/recompute Pareto frontier: torch's own partitioner vs budget, measured.

For each model and each memory budget b, compile the training step twice in one run:

- torch:  ``torch.compile(step, backend="aot_eager_decomp_partition")`` under
          ``torch._functorch.config.patch(activation_memory_budget=b)``;
- budget: ``torch.compile(step, backend=budget.backend(b, compiler="eager"))``;

and measure what each really does (``budget.runtime.measure.measure_step``): the activation bytes
saved by the forward and the FLOPs of the backward (recomputation shows up there). Then,
for every memory torch reached, budget is given that memory as an absolute size. Checks:
budget never exceeds its target, and every torch point is matched or beaten by a budget
point on both axes. Runs on CPU; it takes minutes.

    python bench/pareto.py --model gpt
    python bench/pareto.py --model all --markdown
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch._functorch.config

import budget
from budget.compile.backend import root_error
from budget.models import Example, get_builtin
from budget.runtime.measure import measure_step

MiB = 2**20
DEFAULT_BUDGETS = [round(1.0 - i / 10, 1) for i in range(11)]


@dataclass
class Point:
    """One compiled step, measured (and, for budget, what its plans predicted)."""

    saved: int | None = None  # measured saved activation bytes
    flops: int | None = None  # measured backward FLOPs
    predicted: int | None = None  # budget: sum of plans' saved_bytes
    target: int | None = None  # budget: sum of plans' target_bytes
    solve_s: float | None = None  # budget: sum of plans' solve time
    status: str = ""
    seconds: float = 0.0  # compile + measure wall time
    error: str = ""
    plans: list[Any] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.error


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# Fill the FLOP counter's gaps (CPU attention, norms: torch gives them 0); --raw-flop-counter clears it.
FILL_GAPS = True


def measure(ex: Example, backend: Any, ctx: Any = None) -> Point:
    torch._dynamo.reset()
    ex.model.zero_grad(set_to_none=True)
    exclude = list(ex.model.parameters()) + list(ex.model.buffers())
    start = time.perf_counter()
    try:
        with ctx or contextlib.nullcontext():
            compiled = torch.compile(ex.step, backend=backend)
            m = measure_step(compiled, *ex.args, exclude=exclude, fill_gaps=FILL_GAPS)
    except Exception as e:
        inner = root_error(e)
        first = (str(inner).strip().splitlines() or [""])[0]
        return Point(error=f"{type(inner).__name__}: {first}", seconds=time.perf_counter() - start)
    finally:
        ex.model.zero_grad(set_to_none=True)
    return Point(saved=m.saved_bytes, flops=m.backward_flops, seconds=time.perf_counter() - start)


def run_torch(ex: Example, b: float) -> Point:
    ctx = torch._functorch.config.patch(activation_memory_budget=b)
    p = measure(ex, "aot_eager_decomp_partition", ctx)
    p.status = "torch"
    return p


def run_budget(ex: Example, b: float | str, args: argparse.Namespace) -> Point:
    be = budget.backend(
        b,
        compiler="eager",
        solver=args.solver,
        estimator=args.estimator,
        time_limit=args.time_limit,
    )
    p = measure(ex, be)
    p.plans = list(be.plans)
    if p.plans:
        p.predicted = sum(q.saved_bytes for q in p.plans)
        p.target = sum(q.target_bytes for q in p.plans)
        p.solve_s = sum(q.timings.get("solve", 0.0) for q in p.plans)
        p.status = "/".join(sorted({q.status for q in p.plans}))
    return p


# ----------------------------------------------------------------------------- output


def mib(n: int | None) -> str:
    return "-" if n is None else f"{n / MiB:.2f}"


def gf(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e9:.3f}"


def secs(s: float | None) -> str:
    return "-" if s is None else f"{s:.1f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" for _ in headers) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    fmt: Callable[[Sequence[str]], str] = lambda r: "  ".join(  # noqa: E731
        c.rjust(w) for c, w in zip(r, widths, strict=True)
    )
    return "\n".join([fmt(headers), fmt(["-" * w for w in widths]), *map(fmt, rows)])


def cell(p: Point, value: str) -> str:
    return value if p.ok else "error"


# ----------------------------------------------------------------------------- sweep


def sweep(name: str, label: str, ex: Example, args: argparse.Namespace) -> list[tuple[str, bool]]:
    checks: list[tuple[str, bool]] = []
    sweep_rows, errors = [], []
    torch_pts: list[tuple[float, Point]] = []
    budget_pts: list[Point] = []
    for b in args.budgets:
        t = run_torch(ex, b)
        log(f"[{name}] b={b:.2f} torch  {mib(t.saved)} MiB {gf(t.flops)} GF ({t.seconds:.1f}s)")
        u = run_budget(ex, b, args)
        log(f"[{name}] b={b:.2f} budget {mib(u.saved)} MiB {gf(u.flops)} GF ({u.seconds:.1f}s)")
        torch_pts.append((b, t))
        budget_pts.append(u)
        for who, p in (("torch", t), ("budget", u)):
            if not p.ok:
                errors.append(f"b={b:g} {who}: {p.error}")
        sweep_rows.append(
            [
                f"{b:.1f}",
                cell(t, mib(t.saved)),
                cell(t, gf(t.flops)),
                cell(u, mib(u.saved)),
                cell(u, gf(u.flops)),
                mib(u.predicted),
                mib(u.target),
                secs(u.solve_s),
                u.status or "-",
            ]
        )
        if u.ok:
            checks.append(
                (
                    f"{name} b={b:.1f}: budget measured {mib(u.saved)} <= target {mib(u.target)} MiB",
                    u.target is not None and u.saved is not None and u.saved <= u.target,
                )
            )

    matched_rows = []
    for b, t in torch_pts if not args.no_match else []:
        if not t.ok or t.saved is None:
            continue
        u = run_budget(ex, f"{t.saved}B", args)
        log(
            f"[{name}] torch b={b:.2f} memory {mib(t.saved)} MiB -> budget {mib(u.saved)} MiB "
            f"{gf(u.flops)} GF ({u.seconds:.1f}s)"
        )
        if u.ok:
            budget_pts.append(u)
            checks.append(
                (
                    f"{name} at torch b={b:.1f}'s memory: budget measured {mib(u.saved)} <= target "
                    f"{mib(u.target)} MiB",
                    u.saved is not None and u.target is not None and u.saved <= u.target,
                )
            )
        else:
            errors.append(f"memory of torch b={b:g} ({t.saved}B): {u.error}")
        matched_rows.append(
            [
                f"{b:.1f}",
                mib(t.saved),
                gf(t.flops),
                cell(u, mib(u.saved)),
                cell(u, gf(u.flops)),
                mib(u.predicted),
                secs(u.solve_s),
                u.status or "-",
                "-" if not u.ok or not t.flops else f"{(u.flops or 0) / t.flops:.3f}",
            ]
        )

    good = [p for p in budget_pts if p.ok]
    for b, t in torch_pts:
        if not t.ok:
            continue
        dominating = [p for p in good if p.saved <= t.saved and p.flops <= t.flops]
        best = min(dominating, key=lambda p: (p.flops, p.saved), default=None)
        detail = (
            f"budget {mib(best.saved)} MiB {gf(best.flops)} GF"
            if best
            else "no budget point with <= memory and <= FLOPs"
        )
        checks.append(
            (
                f"{name} torch b={b:.1f} ({mib(t.saved)} MiB, {gf(t.flops)} GF) dominated: {detail}",
                best is not None,
            )
        )
    exact = [p for p in good if p.predicted is not None]
    n_exact = sum(p.predicted == p.saved for p in exact)
    checks.append(
        (
            f"{name} predicted saved bytes == measured at {n_exact}/{len(exact)} points (exactness)",
            n_exact == len(exact),
        )
    )

    md = args.markdown
    print(f"\n## {label}: budget sweep, measured\n")
    print(
        table(
            [
                "budget",
                "torch MiB",
                "torch bwd GF",
                "budget MiB",
                "budget bwd GF",
                "predicted MiB",
                "target MiB",
                "solve s",
                "status",
            ],
            sweep_rows,
            md,
        )
    )
    if matched_rows:
        print(f"\n## {label}: budget given the memory torch reached, as a size\n")
        print(
            table(
                [
                    "torch b",
                    "torch MiB",
                    "torch bwd GF",
                    "budget MiB",
                    "budget bwd GF",
                    "predicted MiB",
                    "solve s",
                    "status",
                    "GF ratio",
                ],
                matched_rows,
                md,
            )
        )
    if errors:
        print(f"\n{name} errors:")
        for e in errors:
            print(f"  {e}")
    return checks


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("gpt", "resnet", "all"), default="all")
    ap.add_argument(
        "--budgets",
        default=",".join(f"{b:.1f}" for b in DEFAULT_BUDGETS),
        help="comma-separated fractions (default: 1.0,0.9,...,0.0)",
    )
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4, help="GPT batch size")
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--resnet-batch", type=int, default=8)
    ap.add_argument("--resnet-size", type=int, default=64)
    ap.add_argument("--solver", default=None)
    ap.add_argument("--estimator", default=None)
    ap.add_argument("--time-limit", type=float, default=None, help="ILP limit per solve (s)")
    ap.add_argument("--no-match", action="store_true", help="skip the runs at torch's memory")
    ap.add_argument("--markdown", action="store_true", help="print markdown tables")
    ap.add_argument(
        "--raw-flop-counter",
        action="store_true",
        help="do not price CPU attention in the measured FLOPs (torch counts it as 0)",
    )
    args = ap.parse_args(argv)
    try:
        args.budgets = [float(x) for x in args.budgets.split(",") if x.strip()]
        for b in args.budgets:
            budget.parse_budget(b)
    except ValueError as e:
        ap.error(f"--budgets: {e}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    global FILL_GAPS
    args = parse_args(argv)
    FILL_GAPS = not args.raw_flop_counter
    models: list[tuple[str, str, Callable[[], Example]]] = []
    if args.model in ("gpt", "all"):
        opts = dict(
            layers=args.layers,
            d=args.d,
            heads=args.heads,
            seq=args.seq,
            batch=args.batch,
            vocab=args.vocab,
        )
        label = "gpt (" + ", ".join(f"{k}={v}" for k, v in opts.items()) + ")"
        models.append(("gpt", label, lambda: get_builtin("gpt", **opts)))
    if args.model in ("resnet", "all"):
        opts_r = dict(batch=args.resnet_batch, size=args.resnet_size)
        label = f"resnet (batch={args.resnet_batch}, {args.resnet_size}x{args.resnet_size})"
        models.append(("resnet", label, lambda: get_builtin("resnet", **opts_r)))

    print(
        f"torch {torch.__version__}, budget {budget.__version__}, solver "
        f"{args.solver or budget.config.solver}, estimator "
        f"{args.estimator or budget.config.estimator}, {torch.get_num_threads()} threads"
    )
    print(
        "MiB: saved activation memory measured with saved_tensors_hooks; bwd GF: FLOPs of "
        "backward() by FlopCounterMode"
        + ("" if args.raw_flop_counter else " (CPU attention priced like CUDA SDPA)")
        + "; predicted/target: budget's plans; solve s: budget's solve time"
    )
    start = time.perf_counter()
    checks: list[tuple[str, bool]] = []
    for name, label, make in models:
        checks += sweep(name, label, make(), args)
    print("\n## checks\n")
    for text, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")
    failed = sum(not ok for _, ok in checks)
    print(f"\n{len(checks) - failed} passed, {failed} failed, {time.perf_counter() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
