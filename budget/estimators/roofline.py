"""The ``roofline`` estimator: a node takes as long as its slower resource.

``seconds = max(FLOPs / peak FLOP rate, bytes moved / memory bandwidth)``, with FLOPs from
:func:`~budget.estimators.flops.node_flops` (matmul-class peak for the node's dtype, see
``devices``) and bytes from :func:`~budget.estimators.memory.bytes_moved` (inputs read plus
outputs written; views move nothing). So recomputing a pointwise chain is not free: each
link costs the bytes it reads and writes, and an embedding costs the rows it gathers.
"""

from __future__ import annotations

from typing import ClassVar

import torch.fx

from ..runtime.values import compute_dtype
from .base import DeviceEstimator, NodeCost
from .flops import node_flops, op_kind
from .memory import bytes_moved


class RooflineEstimator(DeviceEstimator):
    name: ClassVar[str] = "roofline"
    unit: ClassVar[str] = "s"

    def estimate(self, node: torch.fx.Node) -> NodeCost:
        f = node_flops(node)
        moved = float(bytes_moved(node))
        if f == 0.0 and moved == 0.0:
            return NodeCost(cost=0.0)
        device = self.device_for(node)
        compute = f / device.peak(compute_dtype(node), op_kind(node)) if f else 0.0
        return NodeCost(cost=max(compute, moved / device.bandwidth), flops=f, bytes_moved=moved)
