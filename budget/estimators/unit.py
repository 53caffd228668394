"""The ``unit`` estimator: every op that computes something costs 1, views cost 0.

For tests and debugging: plans then minimise the number of recomputed ops. FLOPs and bytes
moved are still filled in for display.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.fx

from ..runtime._torch_private import OpOverload
from .base import NodeCost
from .flops import node_flops
from .memory import bytes_moved


class UnitEstimator:
    name: ClassVar[str] = "unit"
    unit: ClassVar[str] = "op"

    def __init__(self) -> None:
        self.spec = self.name

    @classmethod
    def available(cls) -> bool:
        return True

    def estimate(self, node: torch.fx.Node) -> NodeCost:
        target = node.target
        computes = isinstance(target, OpOverload) and not target.is_view
        cost = 1.0 if node.op == "call_function" and computes else 0.0
        return NodeCost(cost=cost, flops=node_flops(node), bytes_moved=float(bytes_moved(node)))
