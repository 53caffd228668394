"""Warm start: the first call of a compiled training step in a fresh process, cold and warm.

    python bench/warmstart.py                # 12-layer GPT, d=128, batch 2, T=64, budget 0.5
    python bench/warmstart.py --repeat 3     # three rounds, sides alternating: medians
    python bench/warmstart.py --tiny         # a 1-layer GPT: a smoke test of the script
    python bench/warmstart.py --peak 1000    # T5 under a 1000 KiB peak budget (a search)

For budget's backend and for torch's own partitioner (``torch.compile`` with its default
backend, ``torch._functorch.config.activation_memory_budget`` set to the budget), in the
same run, each side in its own temporary cache directories (``TORCHINDUCTOR_CACHE_DIR``
and ``BUDGET_CACHE_DIR``): a cold process (empty directories), then a warm one (what the
cold one left). Each process times its first call, ``step(*args).backward()`` (dynamo,
AOTAutograd, planning, Inductor, one step), and reports torch's cache counters and
budget's plan-cache counters, so a warm run that missed shows as one. Prints a markdown
table: seconds per side and the ratios budget / torch, and the seconds budget's plans
say planning took (their ``timings``). With ``--repeat N`` each side runs N rounds, the
sides alternating, and the table gives each side's median (a compile of tens of seconds
moves by several on a shared host).

``--peak KIB`` runs T5 (tests/helpers/real_models.py) instead, under that peak budget on
budget's side and at torch's default (b=1) on torch's (``--budget`` and ``--tiny`` do not
apply): under Inductor the peak search compiles several plans and comes back to some, so
a warm start that kept only the plans it compiled would search again for those.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GPT = {"layers": 12, "d": 128, "batch": 2, "seq": 64}
TINY = {"layers": 1, "d": 32, "batch": 2, "seq": 16, "vocab": 64, "heads": 2}


def child(side: str, budget_fraction: float, sizes: dict[str, int], peak_kib: int | None) -> None:
    """One process: compile the step, time its first call, print a JSON line."""
    import torch
    from torch._dynamo.utils import counters

    from budget.models import get_builtin

    if peak_kib is None:
        ex = get_builtin("gpt", **sizes)
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from helpers.real_models import make

        ex, budget_fraction = make("t5"), 1.0
    if side == "budget":
        import budget
        from budget.compile import plan_cache

        if peak_kib is None:
            be = budget.backend(budget_fraction)
        else:
            be = budget.backend(peak_memory_budget=f"{peak_kib}KiB")
        start = time.perf_counter()
        torch.compile(ex.step, backend=be)(*ex.args).backward()
        seconds = time.perf_counter() - start
        extra = {"plan_cache": dict(plan_cache.stats), "plans": len(be.plans)}
        extra["planning"] = sum(sum(p.timings.values()) for p in be.plans)
    else:
        with torch._functorch.config.patch(activation_memory_budget=budget_fraction):
            start = time.perf_counter()
            torch.compile(ex.step)(*ex.args).backward()
            seconds = time.perf_counter() - start
        extra = {}
    out = {
        "seconds": seconds,
        "aot_autograd": {k: v for k, v in counters["aot_autograd"].items() if "cache" in k},
        "fx_graph": {k: v for k, v in counters["inductor"].items() if "fxgraph_cache" in k},
        **extra,
    }
    print("RESULT " + json.dumps(out), flush=True)


def run(
    side: str, budget_fraction: float, sizes: dict[str, int], cache: str, peak: int | None
) -> dict:
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache, "inductor"),
        "BUDGET_CACHE_DIR": os.path.join(cache, "budget"),
    }
    cmd = [sys.executable, __file__, "--child", side, "--budget", str(budget_fraction)]
    cmd += ["--sizes", json.dumps(sizes)] + ([] if peak is None else ["--peak", str(peak)])
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise RuntimeError(f"{side} child failed:\n{done.stdout}\n{done.stderr}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=0.5)
    ap.add_argument("--tiny", action="store_true", help="a 1-layer GPT (smoke test)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds per side (medians)")
    ap.add_argument("--peak", type=int, help="T5 under this peak budget in KiB instead")
    ap.add_argument("--child", choices=["budget", "torch"], help=argparse.SUPPRESS)
    ap.add_argument("--sizes", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.peak is not None and (args.tiny or args.budget != 0.5):
        ap.error("--peak runs T5 under a peak budget: --tiny and --budget do not apply")
    if args.child:
        child(args.child, args.budget, json.loads(args.sizes), args.peak)
        return 0
    import torch

    sizes = TINY if args.tiny else GPT
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cpus")
    if args.peak is None:
        print(f"built-in gpt {sizes}, budget {args.budget:g}\n")
    else:
        print(f"T5 (tests/helpers/real_models.py), peak budget {args.peak} KiB, torch b=1\n")
    results: dict[tuple[str, str], list[dict]] = {}
    for _ in range(max(1, args.repeat)):
        for side in ("budget", "torch"):
            with tempfile.TemporaryDirectory(prefix=f"warmstart-{side}-") as cache:
                for start in ("cold", "warm"):
                    r = run(side, args.budget, sizes, cache, args.peak)
                    results.setdefault((side, start), []).append(r)
                    print(f"{side} {start}: {json.dumps(r)}", file=sys.stderr, flush=True)
    rounds = f" (median of {args.repeat})" if args.repeat > 1 else ""
    print(f"| start | budget s{rounds} | torch s | budget / torch | budget's planning s |")
    print("|---|---:|---:|---:|---:|")
    for start in ("cold", "warm"):
        b = statistics.median(r["seconds"] for r in results["budget", start])
        t = statistics.median(r["seconds"] for r in results["torch", start])
        # a warm start's plans come from the plan cache, with their cold timings
        plan = statistics.median(r["planning"] for r in results["budget", start])
        planning = f"{plan:.2f}" if start == "cold" else "-"
        print(f"| {start} | {b:.2f} | {t:.2f} | {b / t:.2f}x | {planning} |")
    warm = results["budget", "warm"][-1]
    hit = warm["aot_autograd"].get("autograd_cache_hit", 0)
    print(
        f"\nbudget warm: AOTAutograd cache hits {hit}, FX graph cache hits "
        f"{warm['fx_graph'].get('fxgraph_cache_hit', 0)}, plan cache {warm['plan_cache']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
