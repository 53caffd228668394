"""Prove budget's CUDA paths on one GPU, beside torch's own partitioner, in one command.

    python bench/gpu_check.py --out /tmp/gpu              # on a GPU: about 8 minutes
    python bench/gpu_check.py --device cpu --tiny         # the same code at toy sizes (CI)

On this project's lent GPU machines (torch 2.11, no package index), carry the wheels
``bench/gpu_wheels.sh`` downloads and put ``bench/torch211`` first on ``PYTHONPATH``
(the script's header says how).

Blocks, in this order (each skipped, and said so, when the time limit is near; the paths
that passed on a GPU before come after the ones that have not):

- ``gpt``: a GPT at fractions 1, 0.5, 0.2, 0, in bf16 autocast (fp32: ``gpt-fp32``), with
  torch's partitioner (``activation_memory_budget=b``) and with ``budget.backend(b)``:
  saved bytes measured (saved-tensor hooks) against predicted and the target, the step's
  peak (allocated above the start; requested bytes too) against the predicted peak (the
  compiled code's where known), the median step time as a ratio to torch's at the same
  fraction, and the gradients against the unplanned eager step's;
- ``eager``: ``budget.apply`` on the same GPT (fp32), given the bytes torch's
  ``apply_activation_checkpointing`` on every block keeps: bytes kept, peak, step time;
  then ``budget.apply(offload=True)`` at b=0: device bytes, peak, gradients, step time;
- ``offload``: ``offload=True`` at fractions 0.2 and 0 on the bf16 GPT, and at the peak
  the gpt block's lowest fraction above 0 measured: device bytes and peak against
  predicted, gradients; step time against budget's recompute-only plans of no lower
  measured peak and against ``save_on_cpu`` on every saved tensor (CUDA);
- ``pytest``: ``pytest -m cuda`` (CUDA only);
- ``peak``: peak budgets at 0.8 and 0.6 of the b=1 step's measured peak (0.8 alone with
  ``--tiny``): met as measured, or refused naming the lowest reachable peak;
- ``reuse``: the bf16 GPT at b=1 and 0.2 with Inductor's buffer reuse off
  (``budget.config.buffer_reuse=False``): step time and peak beside the ``gpt`` rows
  (reuse "neutral", the default);
- ``estimators``: ``estimator="profile"`` against ``"flops"`` at b=0.5, and the device
  table's bf16 matmul rate and memory bandwidth against a probe of this device;
- ``convnet``: a ResNet-50 (torchvision; the built-in ResNet when ``--tiny``),
  channels-last, at b=0.5 and 1 (torch's partitioner at 0.5; its b=1 plan is budget's):
  saved bytes, Inductor's layout copies, peak (what the code's prediction leaves out is
  the convolutions' workspace);
- ``gpt-fp32``: the ``gpt`` block in fp32, at fractions 1, 0.5 and 0.2.

The commit in the report is ``git rev-parse HEAD``, or ``$BUDGET_COMMIT`` where the
checkout cannot say (a copy of the working tree on a lent machine).

Writes ``gpu_check.json`` and ``gpu_check.md`` to ``--out`` after every row, prints the
checks last, and exits 1 when a check fails (timing targets fail the exit only on a GPU).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch._functorch.config

sys.path.insert(0, str(Path(__file__).resolve().parent))


from gpu_blocks import (  # noqa: E402
    block_convnet,
    block_estimators,
    block_gpt,
    block_peak,
    block_pytest,
    block_reuse,
)
from gpu_context import Check, torch_211  # noqa: E402
from gpu_eager import block_eager, block_offload  # noqa: E402
from gpu_measure import warm_gpu  # noqa: E402

BLOCKS = {
    "gpt": lambda c: block_gpt(c, ["bf16"]),
    "eager": block_eager,
    "offload": block_offload,
    "pytest": block_pytest,
    "peak": block_peak,
    "reuse": block_reuse,
    "estimators": block_estimators,
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
    warm_gpu(c.device)
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
