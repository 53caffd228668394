"""Where a convnet's saved bytes go over its plan under Inductor: layout optimisation.

For the bench convnet under Inductor (budget's backend), with torch._inductor's
``layout_optimization`` on (the default) and off: the measured peak and saved activation
bytes (saved_tensors_hooks, parameters and buffers excluded) beside the plan's prediction,
then the median step time of each (CPU, 10 steps after 3 warm-up). Groundwork for issue 12.

    python bench/layout_copies.py
"""

from __future__ import annotations

import sys
import time

import torch
import torch._inductor.config as inductor_config

import budget
from budget.models import get_builtin
from budget.runtime.measure import measure_peak, saved_bytes

MiB = 2**20


def main() -> int:
    ex = get_builtin("resnet", batch=8, size=32, width=64, blocks=2)
    exclude = list(ex.model.parameters()) + list(ex.model.buffers())
    for layout_opt in (True, False):
        for b in (1.0, 0.5):
            torch._dynamo.reset()
            ex.model.zero_grad(set_to_none=True)
            with inductor_config.patch(layout_optimization=layout_opt):
                be = budget.backend(b)
                step = torch.compile(ex.step, backend=be)
                peak = measure_peak(step, *ex.args)
                saved = saved_bytes(step, *ex.args, exclude=exclude).saved_bytes
                times = []
                for _ in range(10):
                    t = time.perf_counter()
                    step(*ex.args).backward()
                    times.append(time.perf_counter() - t)
            p = be.plans[0]
            print(
                f"layout_optimization={layout_opt} b={b}: saved {saved / MiB:.2f} MiB "
                f"(plan {p.saved_bytes / MiB:.2f}), peak {peak / MiB:.2f} MiB (predicted "
                f"{(p.peak_bytes or 0) / MiB:.2f}), step {sorted(times)[5] * 1e3:.1f} ms",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
