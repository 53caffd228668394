"""FLOP counting, and the ``flops`` estimator: FLOPs turned into seconds at the peak rate.

FLOPs come from ``torch.utils.flop_counter``'s formulas on the node's fake ``meta["val"]``
shapes, so nothing is executed. Its registry leaves real work at 0; ``FLOP_GAPS``
(:mod:`budget.runtime.flop_gaps`) fills those gaps, as :mod:`budget.runtime.measure` does,
so estimates and measurements agree.

Pointwise ops, reductions and views count 0 FLOPs, as in torch's counter: prefer the
roofline estimator when memory traffic matters.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.fx
from torch.utils.flop_counter import (
    flop_registry,
    shape_wrapper,
)

from ..runtime._torch_private import OpOverload, tree_map
from ..runtime.flop_gaps import FLOP_GAPS, NAMED_GAPS
from ..runtime.values import compute_dtype, hint, shape, value_of
from .base import DeviceEstimator, NodeCost
from .memory import bytes_moved

aten = torch.ops.aten


# What kind of work each priced op is (which peak rate applies); everything else is "other".
_KINDS = {
    **{
        p: "matmul"
        for p in (
            aten.mm,
            aten.addmm,
            aten.bmm,
            aten.baddbmm,
            aten._scaled_mm,
            aten._grouped_mm,
            aten.mkldnn_rnn_layer,  # an LSTM layer's matmuls (runtime/flop_gaps.py)
            aten.mkldnn_rnn_layer_backward,
        )
    },
    **{
        p: "conv"
        for p in (
            aten.convolution,
            aten._convolution,
            aten.cudnn_convolution,
            aten.convolution_overrideable,
            aten._slow_conv2d_forward,
            aten.convolution_backward,
        )
    },
}


def op_kind(node: torch.fx.Node) -> str:
    """ "matmul", "conv", "attention" or "other": which peak rate prices the node's FLOPs."""
    target = node.target
    if not isinstance(target, OpOverload):
        return "other"
    packet = target.overloadpacket
    if packet in _KINDS:
        return _KINDS[packet]
    if packet._qualified_op_name in NAMED_GAPS:  # other libraries' grouped matmuls
        return "matmul"
    name = packet.__name__
    return "attention" if "attention" in name else "other"


def _hinted_shape(x: Any) -> Any:
    """A tensor as its shape, symbolic sizes through their hints (no guards are added)."""
    if isinstance(x, torch.Tensor):
        return torch.Size(shape(x))
    if isinstance(x, torch.SymInt):
        return hint(x)
    return x


def node_flops(node: torch.fx.Node) -> float:
    """FLOPs of one fx call_function node, from shapes only (0 when nothing prices it)."""
    if node.op != "call_function" or not isinstance(node.target, OpOverload):
        return 0.0
    packet = node.target.overloadpacket
    gap = FLOP_GAPS.get(packet) or NAMED_GAPS.get(packet._qualified_op_name)
    formula = shape_wrapper(gap) if gap is not None else flop_registry.get(packet)
    if formula is None:
        return 0.0
    values = tree_map(value_of, (node.args, node.kwargs, node.meta.get("val")))
    if hasattr(formula, "__wrapped__"):  # a shape formula: give it hinted shapes
        values = tree_map(_hinted_shape, values)
    args, kwargs, out = values
    return float(hint(formula(*args, out_val=out, **kwargs)))


class FlopsEstimator(DeviceEstimator):
    """Seconds = FLOPs / the device's peak rate for the node's dtype and kind of work.

    Only the ratio of costs matters to a plan, and on one device and dtype this is FLOPs
    scaled: the same plans as counting FLOPs, with a cost in seconds users can read.
    """

    name: ClassVar[str] = "flops"
    unit: ClassVar[str] = "s"

    def estimate(self, node: torch.fx.Node) -> NodeCost:
        f = node_flops(node)
        moved = float(bytes_moved(node))
        if f == 0.0:
            return NodeCost(cost=0.0, flops=0.0, bytes_moved=moved)
        peak = self.device_for(node).peak(compute_dtype(node), op_kind(node))
        return NodeCost(cost=f / peak, flops=f, bytes_moved=moved)
