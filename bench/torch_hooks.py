"""torch's own partitioner with budget's knapsack solver and estimator, against its dp.

At torch's fractions, the same step compiled with ``aot_eager_decomp_partition`` three
ways: torch's defaults (dp knapsack, FLOP-count runtimes), budget's exact knapsack with
budget's ``flops`` estimator, and with ``roofline``; measured saved activation bytes
(saved_tensors_hooks) and backward FLOPs (FlopCounterMode, gaps filled), same run.

    python bench/torch_hooks.py
"""

from __future__ import annotations

import sys

import torch
import torch._functorch.config as fconfig

from budget.compile.torch_hooks import KnapsackSolver, RuntimeEstimator
from budget.models import get_builtin
from budget.runtime.measure import measure_step

FRACTIONS = [0.8, 0.6, 0.4, 0.2, 0.1]
MODELS = {
    "gpt": lambda: get_builtin("gpt"),
    "convnet": lambda: get_builtin("resnet", batch=8, size=32, width=64, blocks=2),
}
WAYS = {
    "torch dp": {},
    "budget knapsack (flops)": {
        "activation_memory_budget_solver": KnapsackSolver("flops"),
        "activation_memory_budget_runtime_estimator": RuntimeEstimator("flops"),
    },
    "budget knapsack (roofline)": {
        "activation_memory_budget_solver": KnapsackSolver("roofline"),
        "activation_memory_budget_runtime_estimator": RuntimeEstimator("roofline"),
    },
}


def main() -> int:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads\n")
    for name, make in MODELS.items():
        ex = make()
        exclude = list(ex.model.parameters()) + list(ex.model.buffers())
        print(f"**{name}**: saved MiB / backward GFLOP, measured\n")
        print("| b | " + " | ".join(WAYS) + " |")
        print("|---:|" + "---:|" * len(WAYS))
        for b in FRACTIONS:
            cells = []
            for patch in WAYS.values():
                torch._dynamo.reset()
                ex.model.zero_grad(set_to_none=True)
                with fconfig.patch(activation_memory_budget=b, **patch):
                    step = torch.compile(ex.step, backend="aot_eager_decomp_partition")
                    m = measure_step(step, *ex.args, exclude=exclude)
                cells.append(f"{m.saved_bytes / 2**20:.2f} / {m.backward_flops / 1e9:.3f}")
            print(f"| {b:g} | " + " | ".join(cells) + " |", flush=True)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
