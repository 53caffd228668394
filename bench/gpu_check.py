"""Prove budget's CUDA paths on one GPU, beside torch's own partitioner, in one command.

    python bench/gpu_check.py --out /tmp/gpu              # on a GPU: about 8 minutes
    python bench/gpu_check.py --device cpu --tiny         # the same code at toy sizes (CI)

On this project's lent GPU machines (torch 2.11, no package index), carry the wheels
``bench/gpu_wheels.sh`` downloads and put ``bench/torch211`` first on ``PYTHONPATH``
(the script's header says how).

Blocks, in this order (each skipped, and said so, when the time limit is near):

- ``gpt``: a GPT at fractions 1, 0.5, 0.2, 0, in bf16 autocast then fp32, compiled with
  torch's partitioner (``activation_memory_budget=b``) and with ``budget.backend(b)``:
  saved bytes measured (saved-tensor hooks) against predicted and the target, the step's
  peak (allocated above the start; requested bytes too) against the predicted peak (the
  compiled code's where known), the median step time as a ratio to torch's at the same
  fraction, and the gradients against the unplanned eager step's;
- ``peak``: peak budgets at 0.8 and 0.6 of the b=1 step's measured peak: met as measured,
  or refused naming the lowest reachable peak;
- ``eager``: ``budget.apply`` on the same GPT (fp32), given the bytes torch's
  ``apply_activation_checkpointing`` on every block keeps: bytes kept, peak, step time;
  then ``budget.apply(offload=True)`` at b=0: device bytes, peak, gradients, step time;
- ``offload``: ``offload=True`` at fractions 0.2 and 0 on the bf16 GPT: device bytes and
  peak against predicted, gradients; step time against budget's recompute-only plans of
  no lower measured peak and against ``save_on_cpu`` on every saved tensor (CUDA);
- ``estimators``: ``estimator="profile"`` against ``"flops"`` at b=0.5, and the device
  table's bf16 matmul rate and memory bandwidth against a probe of this device;
- ``convnet``: a ResNet-50 (torchvision; the built-in ResNet when ``--tiny``),
  channels-last, at b=1 and 0.5: saved bytes, Inductor's layout copies, peak (what the
  code's prediction leaves out is the convolutions' workspace);
- ``pytest``: ``pytest -m cuda`` (CUDA only).

The commit in the report is ``git rev-parse HEAD``, or ``$BUDGET_COMMIT`` where the
checkout cannot say (a copy of the working tree on a lent machine).

Writes ``gpu_check.json`` and ``gpu_check.md`` to ``--out`` after every row, prints the
checks last, and exits 1 when a check fails (timing targets fail the exit only on a GPU).
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch._functorch.config

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_measure import MiB, Report, Row, fresh, grads_of, measure, predictions  # noqa: E402

import budget  # noqa: E402
from budget.models import Example, get_builtin  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FRACTIONS = [1.0, 0.5, 0.2, 0.0]
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
        self.reps = 3 if args.tiny else 10
        self.clock = Clock(args.time_limit)
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

    def pair(
        self, block: str, dtype: str, b: float, ex: Example, step: Any, args: tuple, ref: Any
    ) -> tuple[Row, Row]:
        """The step at fraction ``b`` under torch's partitioner, then under budget's."""
        t = self.run(block, f"{dtype} torch b={b:g}", ex, step, args, ref, self.torch_backend(), b)
        be = budget.backend(b, compiler=self.compiler)
        return t, self.run(block, f"{dtype} budget b={b:g}", ex, step, args, ref, be)


def torch_211() -> str:
    """On torch before 2.13 (the lent GPUs carry 2.11; budget pins 2.13, and
    bench/torch211 supplies the names it lacks), Inductor's ``control_deps``, which pins
    a rescheduled backward's extra recomputations in place, has no autograd kernel and
    fails at run time: the pins are left out there (the plan, its values and its compiled
    peak are unchanged; Inductor may run those recomputations earlier). Returns what was
    done, for the report."""
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    if (major, minor) >= (2, 13):
        return ""
    import budget.compile.split as split

    split.pin_order = lambda bw, again: 0
    return f"torch {torch.__version__}: extra recomputations not pinned (control_deps)"


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


# ----------------------------------------------------------------------------- blocks


def block_gpt(c: Check, dtypes: list[str]) -> None:
    for dtype in dtypes:
        ex, step, args = c.gpt(dtype)
        ref = grads_of(ex.model, step, args)
        ratios = []
        for b in TINY_FRACTIONS if c.tiny else FRACTIONS:
            if not c.clock.fits(2):
                c.report.skip(f"gpt {dtype} b={b:g} and after (time)")
                break
            t, o = c.pair("gpt", dtype, b, ex, step, args, ref)
            c.gpt_rows[(dtype, "torch", b)], c.gpt_rows[(dtype, "budget", b)] = t, o
            check_plan_row(c, o, f"gpt {dtype} b={b:g}", TOLERANCE[dtype], t)
            if t.ms and o.ms:
                ratios.append(o.ms / t.ms)
        if ratios:
            g = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            detail = ", ".join(f"{r:.3f}" for r in ratios)
            c.report.check(
                f"gpt {dtype}: step time / torch's <= 0.95 (geomean)",
                g <= 0.95,
                f"{g:.3f} ({detail})",
                timing=True,
            )
        del ex, step, args, ref


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
            f"{err:+.2%} (requested {_m(got)} vs {_m(pred)} MiB; graphs' "
            f"{_m(o.predicted_peak)}; allocated {_m(o.peak)})",
        )
    t_err = torch_row.grad_err if torch_row is not None else None
    bound = max(tol, 2 * t_err) if t_err is not None and math.isfinite(t_err) else tol
    r.check(
        f"{name}: gradients = unplanned",
        o.grad_err is not None and o.grad_err <= bound,
        f"{_e(o.grad_err)} (torch's {_e(t_err)})",
    )


def _m(n: int | None) -> str:
    return "-" if n is None else f"{n / MiB:.2f}"


def _e(x: float | None) -> str:
    return "-" if x is None else f"{x:.1e}"


def block_peak(c: Check) -> None:
    ref = c.gpt_rows.get(("bf16", "budget", 1.0))
    if ref is None or not ref.peak:
        c.report.skip("peak: no measured b=1 bf16 step")
        return
    ex, step, args = c.gpt("bf16")
    grads = grads_of(ex.model, step, args)
    for k in (0.8, 0.6):
        if not c.clock.fits(3):
            c.report.skip(f"peak {k:g}x and after (time)")
            return
        target = int(ref.peak * k)
        be = budget.backend(compiler=c.compiler, peak_memory_budget=f"{target}B")
        o = c.run("peak", f"bf16 peak {k:g}x b=1 ({_m(target)} MiB)", ex, step, args, grads, be)
        fits = [
            b
            for (d, who, b), t in c.gpt_rows.items()
            if d == "bf16" and who == "torch" and t.peak is not None and t.peak <= target
        ]
        note = f"torch fractions that fit: {fits or 'none'}"
        if o.error:
            named = "BudgetTooSmallError" in o.error and SIZE.search(o.error) is not None
            c.report.check(
                f"peak {k:g}x: refused naming the lowest peak",
                named and not fits,
                f"{o.error[:200]}; {note}",
            )
            continue
        c.report.check(
            f"peak {k:g}x: measured <= budget",
            (o.peak or 0) <= target,
            f"{_m(o.peak)} <= {_m(target)} MiB (requested {_m(o.requested)}); {note}",
        )
        c.report.check(
            f"peak {k:g}x: gradients = unplanned",
            o.grad_err is not None and o.grad_err <= TOLERANCE["bf16"],
            f"{_e(o.grad_err)}",
        )


def block_eager(c: Check) -> None:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        apply_activation_checkpointing,
    )

    from budget.eager.regions import select_candidates

    if not c.clock.fits(2):
        c.report.skip("eager (time)")
        return
    ex, step, args = c.gpt(EAGER_DTYPE)
    ref = grads_of(ex.model, step, args)
    base = eager_row(c, "none (unplanned)", ex, step, args, ref)
    ex, step, args = c.gpt(EAGER_DTYPE)
    blocks = {id(m) for m in select_candidates(ex.model).values()}
    apply_activation_checkpointing(ex.model, check_fn=lambda m: id(m) in blocks)
    ac = eager_row(c, "torch AC, every block", ex, step, args, ref)
    ex, step, args = c.gpt(EAGER_DTYPE)
    kept = f"{max(ac.saved or 0, 0)}B"
    plan = budget.apply(ex.model, *args, step=step, memory_budget=kept)
    ours = eager_row(c, f"budget.apply at AC's {_m(ac.saved)} MiB", ex, step, args, ref)
    ours.predicted_saved, ours.predicted_peak = plan.saved_bytes, plan.peak_bytes
    ours.recompute_gflop = plan.recompute_flops / 1e9
    c.report.write()
    r = c.report
    r.check(
        "eager: kept = predicted",
        ours.saved == plan.saved_bytes,
        f"{ours.saved} vs {plan.saved_bytes} B",
    )
    r.check(
        "eager: budget.apply keeps <= AC's bytes",
        (ours.saved or 0) <= (ac.saved or 0),
        f"{_m(ours.saved)} vs {_m(ac.saved)} MiB (unplanned {_m(base.saved)})",
    )
    got = ours.requested if ours.requested is not None else ours.peak
    if plan.peak_bytes and got:
        err = (got - plan.peak_bytes) / plan.peak_bytes
        r.check(
            "eager: peak within 3% of predicted",
            abs(err) <= PEAK_TOLERANCE,
            f"{err:+.2%} (requested {_m(got)} vs {_m(plan.peak_bytes)} MiB)",
        )
    r.check(
        "eager: gradients = unplanned",
        ours.grad_err is not None and ours.grad_err <= TOLERANCE[EAGER_DTYPE],
        f"{_e(ours.grad_err)}",
    )
    if ours.ms and ac.ms:
        r.check("eager: step time <= AC's", ours.ms <= ac.ms, f"{ours.ms / ac.ms:.3f}", timing=True)
    if c.clock.fits(1):
        eager_offload(c, ac, ref)


def eager_offload(c: Check, ac: Row, ref: Any) -> None:
    """``budget.apply(offload=True)`` at b=0 on the same GPT: device bytes kept and peak
    against predicted, gradients, step time against AC on every block (on a CPU the plan
    is made for an H100 and its host copies are this device's memory too)."""
    cpu = c.device.type == "cpu"
    ex, step, args = c.gpt(EAGER_DTYPE)
    plan = budget.apply(
        ex.model,
        *args,
        step=step,
        memory_budget=0.0,
        offload=True,
        estimator="flops:h100" if cpu else "flops",
    )
    row = eager_row(c, "budget.apply+offload b=0", ex, step, args, ref)
    row.predicted_saved, row.predicted_peak = plan.saved_bytes, plan.peak_bytes
    row.extra["offloaded_bytes"] = plan.offloaded_bytes
    c.report.write()
    want = plan.saved_bytes + (plan.offloaded_bytes if cpu else 0)
    r = c.report
    r.check(
        "eager offload: kept = predicted",
        row.saved == want,
        f"{row.saved} vs {want} B; {len(plan.offloaded)} values, "
        f"{_m(plan.offloaded_bytes)} MiB offloaded",
    )
    r.check(
        "eager offload: gradients = unplanned",
        row.grad_err is not None and row.grad_err <= TOLERANCE[EAGER_DTYPE],
        f"{_e(row.grad_err)}",
    )
    got = row.requested if row.requested is not None else row.peak
    if not cpu and plan.peak_bytes and got:
        err = (got - plan.peak_bytes) / plan.peak_bytes
        r.check(
            "eager offload: peak within 3% of predicted",
            abs(err) <= PEAK_TOLERANCE,
            f"{err:+.2%} (requested {_m(got)} vs {_m(plan.peak_bytes)} MiB)",
        )
    if not cpu and row.ms and ac.ms and row.peak is not None and ac.peak is not None:
        r.check(
            "eager offload: step time <= AC's, or a lower peak",
            row.ms <= ac.ms or row.peak < ac.peak,
            f"{row.ms:.1f} vs {ac.ms:.1f} ms; peaks {_m(row.peak)} vs {_m(ac.peak)} MiB",
            timing=True,
        )


def eager_row(c: Check, label: str, ex: Example, step: Any, args: tuple, ref: Any) -> Row:
    row = measure(
        Row("eager", label), ex.model, step, args, ref, device=c.device, reps=c.reps, eager=True
    )
    c.clock.learn(row)
    return c.report.add(row)


OFFLOAD_FRACTIONS = [0.2, 0.0]


def block_offload(c: Check) -> None:
    """budget with ``offload=True`` on the bf16 GPT at low fractions: device bytes and
    peak against predicted, gradients; then, at no higher measured peak, its step time
    against budget's recompute-only plans (the gpt block's rows) and against offloading
    every saved tensor (``save_on_cpu``, as torchtune does; eager, CUDA only). On a CPU
    the plan is made for an H100 (``flops:h100``) and its copies stay in host memory."""
    estimator = "flops:h100" if c.device.type == "cpu" else "flops"
    ex, step, args = c.gpt("bf16")
    ref = grads_of(ex.model, step, args)
    rows = []
    for b in OFFLOAD_FRACTIONS[-1:] if c.tiny else OFFLOAD_FRACTIONS:
        if not c.clock.fits(2):
            c.report.skip(f"offload b={b:g} and after (time)")
            break
        be = budget.backend(b, compiler=c.compiler, offload=True, estimator=estimator)
        label = f"bf16 budget+offload b={b:g}"
        cuda = c.device.type == "cuda"
        o = c.run("offload", label, ex, step, args, ref, be, saved_on_device=cuda)
        host = sum(p.offloaded_bytes for p in be.plans)
        o.extra["offloaded_bytes"] = host
        if not cuda:  # the host copies are this device's memory too
            o.predicted_saved = (o.predicted_saved or 0) + host
            o.target = (o.target or 0) + host
        check_plan_row(c, o, f"offload b={b:g}", TOLERANCE["bf16"], None)
        count = sum(len(p.offloaded) for p in be.plans)
        toy = " (toy sizes: copying costs more than recomputing)" if c.tiny and not count else ""
        c.report.check(
            f"offload b={b:g}: offloads",
            count > 0 or c.tiny,
            f"{count} values, {_m(host)} MiB{toy}",
        )
        rows.append(o)
    every = None
    if c.device.type == "cuda" and c.clock.fits(1):

        def on_cpu(*a: Any) -> torch.Tensor:
            with torch.autograd.graph.save_on_cpu(pin_memory=True):
                return step(*a)

        every = eager_row(c, "save_on_cpu, every saved tensor", ex, on_cpu, args, ref)
    c.report.write()
    for o in rows:
        if o.error or not o.ms or o.peak is None:
            continue
        recompute = [
            r
            for (d, who, _), r in c.gpt_rows.items()
            if d == "bf16" and who == "budget" and r.ms and r.peak is not None
            if r.peak <= o.peak * (1 + PEAK_TOLERANCE)
        ]
        if recompute:
            best = min(recompute, key=lambda r: r.ms or math.inf)
            c.report.check(
                f"{o.label}: step time <= the fastest recompute-only plan at its peak",
                o.ms <= (best.ms or 0),
                f"{o.ms:.1f} vs {best.ms:.1f} ms ({best.label}, peak {_m(best.peak)} MiB)",
                timing=True,
            )
        if every is not None and every.ms and every.peak is not None:
            c.report.check(
                f"{o.label}: step time <= offloading every saved tensor",
                o.ms <= every.ms or o.peak < every.peak,
                f"{o.ms:.1f} vs {every.ms:.1f} ms; peaks {_m(o.peak)} vs {_m(every.peak)} MiB",
                timing=True,
            )


def block_estimators(c: Check) -> None:
    from budget.estimators.devices import DEVICES, match_gpu_name

    flops = c.gpt_rows.get(("bf16", "budget", 0.5))
    if flops is not None and c.clock.fits(2):
        ex, step, args = c.gpt("bf16")
        ref = grads_of(ex.model, step, args)
        be = budget.backend(0.5, estimator="profile", compiler=c.compiler)
        o = c.run("estimators", "bf16 budget b=0.5 profile", ex, step, args, ref, be)
        check_plan_row(c, o, "profile b=0.5", TOLERANCE["bf16"], None)
        if o.ms and flops.ms:
            c.report.check(
                "profile vs flops at b=0.5: step time ratio",
                o.ms <= flops.ms * 1.02,
                f"{o.ms / flops.ms:.3f} (recompute GF {o.recompute_gflop} vs "
                f"{flops.recompute_gflop})",
                timing=True,
            )
    else:
        c.report.skip("estimators: profile plan (no flops row or time)")
    if c.device.type != "cuda":
        return
    key = match_gpu_name(torch.cuda.get_device_name(c.device))
    rate, bw = probe(c.device)
    c.report.meta["probe"] = {"bf16_matmul_tflops": rate / 1e12, "copy_tb_s": bw / 1e12}
    if key is None:
        c.report.check("device table knows this GPU", False, torch.cuda.get_device_name(c.device))
        return
    dev = DEVICES[key]
    for what, got, table in (
        ("bf16 matmul", rate, dev.matmul["bfloat16"]),
        ("bandwidth", bw, dev.bandwidth),
    ):
        ratio = got / table
        c.report.check(
            f"device table {key}: {what} within 0.5-1.05x of the probe",
            0.5 <= ratio <= 1.05,
            f"probe {got / 1e12:.1f}T vs table {table / 1e12:.1f}T ({ratio:.2f}x)",
        )


def probe(device: torch.device) -> tuple[float, float]:
    """bf16 matmul FLOP/s (8192^3) and copy bytes/s (read + write of 2 GiB), medians."""
    n = 8192
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=gen)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=gen)
    src = torch.randn(2**28, device=device, generator=gen)
    dst = torch.empty_like(src)

    def timed(fn: Callable[[], Any]) -> float:
        fn()
        ts = []
        for _ in range(10):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e) / 1e3)
        return sorted(ts)[len(ts) // 2]

    rate = 2 * n**3 / timed(lambda: a @ b)
    bw = 2 * src.numel() * 4 / timed(lambda: dst.copy_(src))
    torch.cuda.empty_cache()
    return rate, bw


def convnet(c: Check) -> Example:
    if c.tiny:
        return get_builtin("resnet", batch=4, size=32, width=16, blocks=1)
    import torch.nn.functional as F
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50()
    x = torch.randn(32, 3, 224, 224).to(memory_format=torch.channels_last)
    y = torch.randint(1000, (32,))
    model = model.to(memory_format=torch.channels_last)

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model(x), y)

    return Example("resnet50", model, (x, y), step)


def block_convnet(c: Check) -> None:
    if not c.clock.fits(4):
        c.report.skip("convnet (time)")
        return
    ex, step, args = c.placed(convnet(c), "bf16")
    args = (args[0].contiguous(memory_format=torch.channels_last), *args[1:])
    ref = grads_of(ex.model, step, args)
    for b in (1.0, 0.5):
        if not c.clock.fits(2):
            c.report.skip(f"convnet b={b:g} (time)")
            return
        t, o = c.pair("convnet", "bf16", b, ex, step, args, ref)
        if o.prediction and o.peak:
            o.extra["unpredicted_bytes"] = o.peak - o.prediction  # convolution workspace
        check_plan_row(c, o, f"convnet b={b:g}", TOLERANCE["bf16"], t)


def block_pytest(c: Check) -> None:
    if c.device.type != "cuda":
        return
    if c.clock.left() < 30:
        c.report.skip("pytest -m cuda (time)")
        return
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider"]
    cmd += ["--continue-on-collection-errors", "tests"]
    try:
        p = subprocess.run(
            cmd, cwd=ROOT, capture_output=True, text=True, timeout=max(c.clock.left() - 5, 10)
        )
        tail = (p.stdout + p.stderr).strip().splitlines()[-1:] or [""]
        (c.report.out / "pytest_cuda.txt").write_text(p.stdout + p.stderr)
        c.report.check("pytest -m cuda", p.returncode == 0, tail[0][:200])
    except subprocess.TimeoutExpired:
        c.report.check("pytest -m cuda", False, "timed out")


BLOCKS = {
    "gpt": lambda c: block_gpt(c, ["bf16"]),
    "peak": block_peak,
    "eager": block_eager,
    "offload": block_offload,
    "estimators": block_estimators,
    "pytest": block_pytest,
    "convnet": block_convnet,
    "gpt-fp32": lambda c: block_gpt(c, ["fp32"]),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--tiny", action="store_true", help="toy sizes (the CI mode)")
    parser.add_argument("--out", default=None, help="folder for the report (default: a temp dir)")
    parser.add_argument("--compiler", choices=["inductor", "eager"], default="inductor")
    parser.add_argument("--blocks", default=",".join(BLOCKS), help=f"of {', '.join(BLOCKS)}")
    parser.add_argument(
        "--time-limit",
        type=float,
        default=450.0,
        help="seconds; a block that would not fit is skipped (default 450)",
    )
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but CUDA is not available here (use --device cpu --tiny)")
    unknown = set(args.blocks.split(",")) - set(BLOCKS)
    if unknown:
        parser.error(f"unknown blocks {sorted(unknown)}; available: {', '.join(BLOCKS)}")
    args.out = args.out or tempfile.mkdtemp(prefix="gpu_check_")
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(os.cpu_count() or 1))
    c = Check(args)
    c.report.meta["compat"] = torch_211()
    start = time.monotonic()
    for name in args.blocks.split(","):
        print(f"{name} ({c.clock.left():.0f} s left)", file=sys.stderr, flush=True)
        try:
            BLOCKS[name](c)
        except Exception as e:  # noqa: BLE001 - one block's failure is a failed check
            c.report.check(f"{name}: runs", False, f"{type(e).__name__}: {str(e)[:300]}")
        c.report.meta["seconds"] = time.monotonic() - start
        c.report.write()
    print(f"\nreport: {c.report.out}")
    failed = [k for k in c.report.checks if not k.ok and (not k.timing or c.device.type == "cuda")]
    for k in c.report.checks:
        verdict = "pass" if k.ok else ("miss" if k.timing else "FAIL")
        print(f"{verdict:4}  {k.name}: {k.detail}")
    print(
        f"\n{len(c.report.checks) - len(failed)}/{len(c.report.checks)} checks pass; "
        f"{c.report.meta['seconds']:.0f} s"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
