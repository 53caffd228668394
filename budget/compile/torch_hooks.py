"""budget's estimators and an exact knapsack inside torch's own memory-budget partitioner.

For users who keep torch's partitioner (``torch.compile`` with
``torch._functorch.config.activation_memory_budget``), torch 2.13 has two hooks:

    import torch._functorch.config as fconfig
    from budget.compile.torch_hooks import KnapsackSolver, RuntimeEstimator

    fconfig.activation_memory_budget_runtime_estimator = RuntimeEstimator("roofline")
    fconfig.activation_memory_budget_solver = KnapsackSolver("flops")

- :class:`RuntimeEstimator` prices each node with a budget estimator (seconds; ``flops``,
  ``roofline``, ``profile``, with a device: ``"roofline:h100"``) instead of torch's raw
  FLOP count, which prices pointwise work and CPU attention at zero;
- :class:`KnapsackSolver` solves torch's knapsack exactly (:mod:`budget.solvers.knapsack`)
  instead of its DP over memory quantised to 1/10000 of the range, pricing the nodes with
  a budget estimator (torch does not hand its runtimes to a custom solver).

Both have a ``uuid()`` that names budget's version and their settings, so torch's compile
caches stay valid. torch's model is unchanged: recompute costs are taken as independent;
budget's own backend solves the closure-exact problem.
"""

from __future__ import annotations

from typing import Any

import torch.fx as fx

from .._version import __version__
from ..estimators import get_estimator
from ..runtime import _torch_private as T
from ..solvers.knapsack import solve_knapsack

# Runtimes become integers for the exact knapsack: 1e9 units for the largest value keeps
# ties apart and sums of thousands of nodes far from 64-bit overflow.
VALUE_SCALE = 10**9


class RuntimeEstimator(T.CustomRuntimeEstimator):  # type: ignore[misc]
    """``activation_memory_budget_runtime_estimator``: seconds from a budget estimator."""

    def __init__(self, estimator: str = "flops") -> None:
        self.estimator = get_estimator(estimator)

    def __call__(self, node: fx.Node) -> float:
        return float(self.estimator.estimate(node).cost)

    def uuid(self) -> Any:
        return f"budget-{__version__}-runtime-{getattr(self.estimator, 'spec', '')}"


class KnapsackSolver(T.CustomKnapsackSolver):  # type: ignore[misc]
    """``activation_memory_budget_solver``: torch's knapsack over its banned nodes, exact,
    with recompute costs from a budget estimator."""

    def __init__(self, estimator: str = "flops", time_limit: float = 60.0) -> None:
        self.estimator = get_estimator(estimator)
        self.time_limit = float(time_limit)

    def __call__(
        self,
        memory: list[float],
        joint_graph: fx.Graph,
        max_memory: float,
        node_info: Any,
        all_recomputable_banned_nodes: list[fx.Node],
    ) -> tuple[list[int], list[int]]:
        nodes = all_recomputable_banned_nodes
        runtimes = [max(0.0, float(self.estimator.estimate(n).cost)) for n in nodes]
        top = max(runtimes, default=0.0) or 1.0
        values = [round(r / top * VALUE_SCALE) for r in runtimes]
        # torch's memories are normalised sizes; integers in 1e-9 of the range are exact
        # to the byte for any range under a GB and far finer than torch's 1e-4 otherwise.
        weights = [round(m * 10**9) for m in memory]
        keep = set(solve_knapsack(weights, values, round(max_memory * 10**9), self.time_limit))
        saved = [i for i in range(len(nodes)) if i in keep]
        return saved, [i for i in range(len(nodes)) if i not in keep]

    def uuid(self) -> Any:
        spec = getattr(self.estimator, "spec", "")
        return f"budget-{__version__}-knapsack-{spec}-{self.time_limit:g}"
