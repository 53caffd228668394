"""The GPU check's blocks on the compiled path: the GPT beside torch's partitioner, peak
budgets, the estimators, the convnet, and ``pytest -m cuda``."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch._functorch.config

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_context import (  # noqa: E402
    FP32_FRACTIONS,
    FRACTIONS,
    ROOT,
    SIZE,
    TIME_NOISE,
    TINY_FRACTIONS,
    TOLERANCE,
    Check,
    check_plan_row,
    mib,
    sci,
)
from gpu_measure import fresh, grads_of  # noqa: E402

import budget  # noqa: E402
from budget.models import Example, get_builtin  # noqa: E402


def block_gpt(c: Check, dtypes: list[str]) -> None:
    for dtype in dtypes:
        ex, step, args = c.gpt(dtype)
        ref = grads_of(ex.model, step, args)
        ratios = []
        full = FP32_FRACTIONS if dtype == "fp32" else FRACTIONS
        for b in TINY_FRACTIONS if c.tiny else full:
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


def block_peak(c: Check) -> None:
    ref = c.gpt_rows.get(("bf16", "budget", 1.0))
    if ref is None or not ref.peak:
        c.report.skip("peak: no measured b=1 bf16 step")
        return
    ex, step, args = c.gpt("bf16")
    grads = grads_of(ex.model, step, args)
    # tiny (CI): 0.8 alone, which fits; 0.6 is refused there after a search of every plan
    for k in (0.8,) if c.tiny else (0.8, 0.6):
        if not c.clock.fits(3):
            c.report.skip(f"peak {k:g}x and after (time)")
            return
        target = int(ref.peak * k)
        be = budget.backend(compiler=c.compiler, peak_memory_budget=f"{target}B")
        o = c.run("peak", f"bf16 peak {k:g}x b=1 ({mib(target)} MiB)", ex, step, args, grads, be)
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
            f"{mib(o.peak)} <= {mib(target)} MiB (requested {mib(o.requested)}); {note}",
        )
        c.report.check(
            f"peak {k:g}x: gradients = unplanned",
            o.grad_err is not None and o.grad_err <= TOLERANCE["bf16"],
            f"{sci(o.grad_err)}",
        )
        if k == 0.8 and c.compiler == "inductor" and c.clock.fits(2):
            compiled_preview(c, step, args, be.plans, target)


def compiled_preview(c: Check, step: Any, args: tuple, kept: list[Any], target: int) -> None:
    """``budget.plans(..., compile=True)`` of the step under the same peak budget: on fake
    tensors, Inductor's code generated (Triton's on CUDA) and no kernel built; its plans
    are those training kept (saved bytes, code peak)."""
    start = time.perf_counter()
    with fresh(c.device):
        previewed = budget.plans(
            step, *args, compiler=c.compiler, peak_memory_budget=f"{target}B", compile=True
        )
    took = time.perf_counter() - start
    told = [(p.saved_bytes, p.compiled_peak_bytes) for p in previewed]
    # the first compile's (a recompile during the timed steps would add plans)
    trained = [(p.saved_bytes, p.compiled_peak_bytes) for p in kept[: len(previewed)]]
    c.report.check(
        "peak 0.8x: compile=True previews training's plans",
        told == trained,
        f"preview {told}, training {trained}; {took:.0f} s",
    )


def block_reuse(c: Check) -> None:
    """budget's bf16 GPT at b=1 and 0.2 again with Inductor's buffer reuse off
    (``budget.config.buffer_reuse=False``): step time and peak beside the gpt block's rows
    of the same run ("neutral" reuse, the default, and torch's, which reuses by its rule)."""
    for b in TINY_FRACTIONS[:1] if c.tiny else (1.0, 0.2):
        neutral = c.gpt_rows.get(("bf16", "budget", b))
        theirs = c.gpt_rows.get(("bf16", "torch", b))
        if neutral is None or theirs is None or not c.clock.fits(2):
            c.report.skip(f"reuse b={b:g} and after (no gpt bf16 rows or time)")
            return
        ex, step, args = c.gpt("bf16")
        ref = grads_of(ex.model, step, args)
        with budget.config.patch(buffer_reuse=False):
            be = budget.backend(b, compiler=c.compiler)
        o = c.run("reuse", f"bf16 budget b={b:g} reuse off", ex, step, args, ref, be)
        check_plan_row(c, o, f"reuse off b={b:g}", TOLERANCE["bf16"], theirs)
        if o.peak and neutral.peak:
            c.report.check(
                f"reuse b={b:g}: neutral reuse's peak <= reuse off's",
                neutral.peak <= o.peak,
                f"{mib(neutral.peak)} vs {mib(o.peak)} MiB off, {mib(theirs.peak)} torch's",
            )
        if o.ms and neutral.ms and theirs.ms:
            c.report.check(
                f"reuse b={b:g}: neutral reuse's step time <= reuse off's",
                neutral.ms <= o.ms * TIME_NOISE,
                f"{neutral.ms:.2f} vs {o.ms:.2f} ms off, {theirs.ms:.2f} torch's",
                timing=True,
            )
        del ex, step, args, ref


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
                o.ms <= flops.ms * TIME_NOISE,
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
    t = None
    for b in (0.5, 1.0):
        if not c.clock.fits(2):
            c.report.skip(f"convnet b={b:g} (time)")
            return
        if b == 1.0:  # torch's b=1 plan is budget's (its b=1 saved set): one compile less
            o = c.run("convnet", "bf16 budget b=1", ex, step, args, ref, c.budget(b))
        else:
            t, o = c.pair("convnet", "bf16", b, ex, step, args, ref)
        if o.prediction and o.peak:
            o.extra["unpredicted_bytes"] = o.peak - o.prediction  # convolution workspace
        # gradients against torch's at 0.5: how far any compiled bf16 step of it strays
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
