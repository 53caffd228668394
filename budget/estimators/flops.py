"""FLOP-count estimator: the cost of recomputing a node is its FLOPs.

Uses ``torch.utils.flop_counter``'s formulas on the node's fake ``meta["val"]`` shapes, so
nothing is executed. The counter has gaps for ops that do real work; we fill them
(``_scaled_dot_product_flash_attention_for_cpu`` counts 0 in torch, here it is priced like
the CUDA SDPA kernels). Pointwise ops, views and reductions count 0 FLOPs, as in torch's
counter: prefer the roofline estimator when memory traffic matters.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.fx
from torch.utils._pytree import tree_map
from torch.utils.flop_counter import (
    flop_registry,
    sdpa_backward_flop_count,
    sdpa_flop_count,
    shape_wrapper,
)

from .base import NodeCost

aten = torch.ops.aten

# Attention kernels torch's counter prices at 0, as shape formulas (the form FlopCounterMode's
# ``custom_mapping`` takes), priced like the CUDA SDPA kernels. budget.measure uses the same
# table, so estimates and measurements agree.
FLOP_GAPS = {
    aten._scaled_dot_product_flash_attention_for_cpu: (
        lambda q, k, v, *_, **__: sdpa_flop_count(q, k, v)
    ),
    aten._scaled_dot_product_fused_attention_overrideable: (
        lambda q, k, v, *_, **__: sdpa_flop_count(q, k, v)
    ),
    aten._scaled_dot_product_flash_attention_for_cpu_backward: (
        lambda g, q, k, v, *_, **__: sdpa_backward_flop_count(g, q, k, v)
    ),
}


def _val(x: Any) -> Any:
    return x.meta.get("val") if isinstance(x, torch.fx.Node) else x


def node_flops(node: torch.fx.Node) -> float:
    """FLOPs of one fx call_function node, from shapes only."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return 0.0
    packet = node.target.overloadpacket
    args, kwargs = tree_map(_val, (node.args, node.kwargs))
    formula = shape_wrapper(FLOP_GAPS[packet]) if packet in FLOP_GAPS else flop_registry.get(packet)
    if formula is None:
        return 0.0
    return float(formula(*args, out_val=node.meta.get("val"), **kwargs))


class FlopsEstimator:
    name: ClassVar[str] = "flops"
    unit: ClassVar[str] = "flop"

    @classmethod
    def available(cls) -> bool:
        return True

    def estimate(self, node: torch.fx.Node) -> NodeCost:
        f = node_flops(node)
        return NodeCost(cost=f, flops=f)


class UnitEstimator:
    """Every op that computes something costs 1 (views cost 0): for tests and debugging."""

    name: ClassVar[str] = "unit"
    unit: ClassVar[str] = "op"

    @classmethod
    def available(cls) -> bool:
        return True

    def estimate(self, node: torch.fx.Node) -> NodeCost:
        target = node.target
        computes = isinstance(target, torch._ops.OpOverload) and not target.is_view
        cost = 1.0 if node.op == "call_function" and computes else 0.0
        return NodeCost(cost=cost, flops=node_flops(node))
