"""Inductor's buffer reuse: the allocator calls it saves and the peak it costs, per plan.

A buffer Inductor keeps allocated from its death to its reuse can hold memory the plan
frees; a buffer not reused costs one allocator call (and one free), which a launch-bound
GPU step pays on its host thread. ``budget.config.buffer_reuse`` is "neutral" by default:
only the reuses that leave the step's peak where it is without reuse are kept
(budget.compile.reuse). This bench counts both sides on the CPU, where the generated code
makes the same calls: for each model and fraction, one step compiled with torch's own
partitioner (Inductor's reuse on, its default) and with budget's backend with reuse off,
"neutral" and on (Inductor's own rule): the allocations one step makes (torch.profiler's
memory events, the generated code's buffers and what its kernels allocate inside) and its
measured peak. The GPU check's ``reuse`` block times the same choice on a device.

    TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 python bench/buffer_reuse.py > /tmp/reuse.md
    python bench/buffer_reuse.py --models gpt2 --fractions 1,0.2
"""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch._functorch.config as functorch_config
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers.real_models import make  # noqa: E402

import budget  # noqa: E402
from budget.models import get_builtin  # noqa: E402
from budget.runtime import _torch_private as T  # noqa: E402
from budget.runtime.measure import measure_peak  # noqa: E402

KiB = 1024
MODELS = ("gpt-bf16", "gpt2", "llama")


def _model(name: str) -> tuple[Callable[..., torch.Tensor], tuple]:
    """The step and its inputs: the built-in GPT under bf16 autocast (the GPU check's
    dtype, at toy sizes) or a real model of tests/helpers/real_models.py."""
    if name == "gpt-bf16":
        ex = get_builtin("gpt", vocab=512, d=64, heads=4, layers=4, seq=32, batch=2)

        def step(*a: Any) -> torch.Tensor:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return ex.step(*a)

        return step, ex.args
    m = make(name)
    return m.step, m.args


def allocations(step: Callable[..., torch.Tensor], args: tuple) -> int:
    """The allocator calls one warmed-up training step makes."""
    step(*args).backward()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step(*args).backward()
    return sum(1 for _, n in T.memory_events(prof) if n > 0)


def _measured(name: str, backend: Any, b: float) -> tuple[int, int]:
    """Allocations and measured peak of one step of ``name`` compiled with ``backend``."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    step, args = _model(name)
    with functorch_config.patch(activation_memory_budget=b):  # torch's partitioner reads it
        compiled = torch.compile(step, backend=backend)
        compiled(*args).backward()  # compiles
    return allocations(compiled, args), measure_peak(compiled, *args)


MODES: dict[str, Any] = {"off": False, "neutral": "neutral", "on": True}


def row(name: str, b: float) -> str:
    cells = [_measured(name, "inductor", b)]
    for reuse in MODES.values():
        with budget.config.patch(buffer_reuse=reuse):
            cells.append(_measured(name, budget.backend(b), b))
    (t_n, t_peak), (off_n, off_peak), (neu_n, neu_peak), (on_n, on_peak) = cells
    return (
        f"| {name} | {b:g} | {t_n} | {t_peak / KiB:.1f} | {off_n} | {off_peak / KiB:.1f} | "
        f"{neu_n} | {neu_peak / KiB:.1f} | {on_n} | {on_peak / KiB:.1f} | "
        f"{neu_n / off_n:.2f} | {neu_peak / off_peak:.3f} | {on_peak / off_peak:.3f} |"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help=", ".join(MODELS))
    parser.add_argument("--fractions", default="1,0.5,0.2")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    print(
        f"`python bench/buffer_reuse.py`: budget {budget.__version__}, torch "
        f"{torch.__version__}, {platform.machine()}, CPU. Allocations: allocator calls in "
        "one step; peaks measured (KiB). Budget's plan with Inductor's buffer reuse off, "
        '"neutral" (the default: kept where the peak stays put) and on (Inductor\'s rule); '
        "torch's partitioner at the same fraction (reuse on).\n"
    )
    print(
        "| model | fraction | torch allocations | torch peak | off allocations | off peak | "
        "neutral allocations | neutral peak | on allocations | on peak | "
        "allocations neutral / off | peak neutral / off | peak on / off |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in args.models.split(","):
        for b in (float(x) for x in args.fractions.split(",")):
            print(row(name.strip(), b), flush=True)


if __name__ == "__main__":
    main()
