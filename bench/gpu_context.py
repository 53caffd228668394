"""What every block of bench/gpu_check.py shares: sizes, tolerances, the clock, the
run's context (:class:`Check`), the report's header and the checks of one plan's row."""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch._functorch.config

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_measure import MiB, Report, Row, fresh, measure, predictions  # noqa: E402

import budget  # noqa: E402
from budget.models import Example, get_builtin  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TIME_NOISE = 1.02  # step times of the same work differ by this much from run to run
FRACTIONS = [1.0, 0.5, 0.2, 0.0]
FP32_FRACTIONS = [1.0, 0.5, 0.2]  # b=0's code paths are the bf16 block's: 8 minutes in all
TINY_FRACTIONS = [1.0, 0.5, 0.0]  # CI: the same code paths, a row pair less
GPT = {
    "gpu": dict(vocab=8192, d=1024, heads=16, layers=4, seq=1024, batch=8),
    "tiny": dict(vocab=128, d=64, heads=2, layers=2, seq=32, batch=2),
}
TOLERANCE = {"bf16": 2e-2, "fp32": 1e-4}  # gradients' relative error, planned vs unplanned
# budget.apply in fp32: under autocast torch 2.11's checkpoint recomputes another op
# sequence than its forward ran (PlanMismatchError), and the lent GPUs carry 2.11
EAGER_DTYPE = "fp32"
PEAK_TOLERANCE = 0.03  # measured peak within 3% of the predicted one
SIZE = re.compile(r"\d+(\.\d+)? (B|KiB|MiB|GiB)\b")  # a size an error names


class Clock:
    """The run's deadline: a block asks before each compile whether one more fits."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds
        self.unit = 20.0  # seconds one configuration takes; learnt as rows come

    def left(self) -> float:
        return self.end - time.monotonic()

    def fits(self, units: float = 1.0) -> bool:
        return self.left() > self.unit * units

    def learn(self, row: Row) -> None:
        self.unit = max(self.unit * 0.5 + row.seconds * 0.5, 1.0)


class Check:
    """Everything the blocks share: the device, the sizes, the report, the clock."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.device = torch.device(args.device)
        self.tiny = args.tiny
        self.compiler = args.compiler
        self.reps = 3 if args.tiny else 20
        self.clock = Clock(args.time_limit)
        self.pairs = 0  # torch/budget pairs run (the order alternates)
        self.report = Report(Path(args.out), meta(args, self.device))
        self.gpt_rows: dict[tuple[str, str, float], Row] = {}

    # -- models --------------------------------------------------------------------------

    def gpt(self, dtype: str) -> tuple[Example, Callable[..., Any], tuple]:
        ex = get_builtin("gpt", **GPT["tiny" if self.tiny else "gpu"])
        return self.placed(ex, dtype)

    def placed(self, ex: Example, dtype: str) -> tuple[Example, Callable[..., Any], tuple]:
        ex.model.to(self.device)
        args = tuple(a.to(self.device) for a in ex.args)
        step = ex.step
        if dtype == "bf16":

            def step(*a: Any, _inner: Callable[..., Any] = ex.step) -> torch.Tensor:
                with torch.autocast(self.device.type, dtype=torch.bfloat16):
                    return _inner(*a)

        return ex, step, args

    def torch_backend(self) -> str:
        return "inductor" if self.compiler == "inductor" else "aot_eager_decomp_partition"

    # -- running one configuration ---------------------------------------------------------

    def run(
        self,
        block: str,
        label: str,
        ex: Example,
        step: Callable[..., Any],
        args: tuple,
        ref: list[torch.Tensor] | None,
        backend: Any,
        fraction: float | None = None,
        saved_on_device: bool = False,
    ) -> Row:
        """Compile ``step`` with ``backend`` (torch's partitioner at ``fraction`` when
        given), measure it and add the row."""
        row = Row(block, label)
        with fresh(self.device):
            patch = torch._functorch.config.patch(
                activation_memory_budget=1.0 if fraction is None else fraction
            )
            with patch:  # torch's partitioner reads it while compiling (the first step)
                compiled = torch.compile(step, backend=backend)
                measure(
                    row,
                    ex.model,
                    compiled,
                    args,
                    ref,
                    device=self.device,
                    reps=self.reps,
                    saved_on_device=saved_on_device,
                )
            predictions(row, list(getattr(backend, "plans", [])))
        self.clock.learn(row)
        self.report.add(row)
        print(f"  {block} {label}: {row.seconds:.1f}s {row.error}", file=sys.stderr, flush=True)
        return row

    def budget(self, b: float) -> Any:
        """budget's backend at fraction ``b`` for this check's compiler."""
        return budget.backend(b, compiler=self.compiler)

    def pair(
        self, block: str, dtype: str, b: float, ex: Example, step: Any, args: tuple, ref: Any
    ) -> tuple[Row, Row]:
        """The step at fraction ``b`` under torch's partitioner and under budget's, torch's
        first in every other pair: the second configuration a process compiles can time
        apart from the first, so neither side always runs first."""
        self.pairs += 1

        def torch_row() -> Row:
            backend = self.torch_backend()
            return self.run(block, f"{dtype} torch b={b:g}", ex, step, args, ref, backend, b)

        def budget_row() -> Row:
            return self.run(block, f"{dtype} budget b={b:g}", ex, step, args, ref, self.budget(b))

        if self.pairs % 2:
            t = torch_row()
            return t, budget_row()
        o = budget_row()
        return torch_row(), o


def torch_211() -> str:
    """On torch before 2.13 (the lent GPUs carry 2.11; budget pins 2.13, and
    bench/torch211 supplies the names it lacks), two of torch's passes are left out, and
    the report says so:

    - Inductor's ``control_deps``, which pins a rescheduled backward's extra
      recomputations in place, has no autograd kernel there and failed at run time when
      the pins were in the graph handed to Inductor; they are now added in its post-grad
      pass (budget/compile/pins.py), not yet run on 2.11: the pins are left out (the
      plan, its values and its compiled peak are unchanged; Inductor may run those
      recomputations earlier);
    - 2.11's side-stream offload (stream ops, sunk waits, prefetched reloads; 2.13
      replaced it with ``ao.offload``/``ao.wait_tensor``) gave wrong gradients on the
      offloading GPT: offload copies run on the compute stream there, and budget is told
      so (``budget.compile.offload.SIDE_STREAM``): it prices each copy in full.
    """
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    if (major, minor) >= (2, 13):
        return ""
    import torch._functorch._activation_offloading.activation_offloading as ao

    import budget.compile.offload as offload
    import budget.compile.split as split

    split.pin_order = lambda bw, again: 0
    offload.SIDE_STREAM = False
    side_stream = ("put_offload_nodes_on_separate_stream", "activation_offload_sink_wait")
    for name in (*side_stream, "activation_reload_prefetch"):
        setattr(ao, name, lambda *a: None)
    return (
        f"torch {torch.__version__}: extra recomputations not pinned (control_deps); "
        "offload copies on the compute stream, priced so (2.11's side-stream pass left out)"
    )


def meta(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    commit = (
        os.environ.get("BUDGET_COMMIT")
        or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    commit = f"{commit}-dirty" if commit and dirty else commit
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    return {
        "device": str(device),
        "device_name": name or platform.machine(),
        "torch": torch.__version__,
        "budget": budget.__version__,
        "commit": commit or "unknown",
        "date": datetime.date.today().isoformat(),
        "mode": "tiny" if args.tiny else "full",
        "compiler": args.compiler,
        "gpt": GPT["tiny" if args.tiny else "gpu"],
        "seconds": 0.0,
    }


def check_plan_row(c: Check, o: Row, name: str, tol: float, torch_row: Row | None) -> None:
    r = c.report
    if o.error:
        r.check(f"{name}: runs", False, o.error)
        return
    r.check(
        f"{name}: saved = predicted",
        o.saved == o.predicted_saved,
        f"{o.saved} vs {o.predicted_saved} B",
    )
    if o.target is not None:
        r.check(f"{name}: saved <= target", (o.saved or 0) <= o.target, f"target {o.target} B")
    pred, got = o.prediction, o.requested if o.requested is not None else o.peak
    if pred and got is not None:  # the models predict bytes requested, not blocks
        err = (got - pred) / pred
        r.check(
            f"{name}: peak within 3% of predicted",
            abs(err) <= PEAK_TOLERANCE,
            f"{err:+.2%} (requested {mib(got)} vs {mib(pred)} MiB; graphs' "
            f"{mib(o.predicted_peak)}; allocated {mib(o.peak)})",
        )
    t_err = torch_row.grad_err if torch_row is not None else None
    bound = max(tol, 2 * t_err) if t_err is not None and math.isfinite(t_err) else tol
    r.check(
        f"{name}: gradients = unplanned",
        o.grad_err is not None and o.grad_err <= bound,
        f"{sci(o.grad_err)} (torch's {sci(t_err)})",
    )


def mib(n: int | None) -> str:
    return "-" if n is None else f"{n / MiB:.2f}"


def sci(x: float | None) -> str:
    return "-" if x is None else f"{x:.1e}"
