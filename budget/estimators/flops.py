"""FLOP counting, and the ``flops`` estimator: FLOPs turned into seconds at the peak rate.

FLOPs come from ``torch.utils.flop_counter``'s formulas on the node's fake ``meta["val"]``
shapes, so nothing is executed. Its registry leaves real work at 0; ``FLOP_GAPS`` fills
those gaps (``budget.compile.measure`` uses the same table, so estimates and measurements agree):

- CPU attention (``_scaled_dot_product_flash_attention_for_cpu`` and its backward, and the
  ``_fused_attention_overrideable`` kernel): priced like torch prices the CUDA SDPA kernels
  (2 FLOPs per multiply-add of QK^T and PV; the backward 5 such matmuls). As in torch's
  counter, a causal mask does not halve the count.
- Normalisations, per input element N (weight/bias terms only when they are given):
  layer, group and training batch norm forward ``6N`` (statistics ``4N``: sum, subtract
  the mean, square, sum; normalise ``2N``: subtract, scale) ``+ N`` weight ``+ N`` bias;
  batch norm with running statistics (eval) ``2N + N + N``; RMS norm ``3N`` (square, sum,
  scale) ``+ N`` weight. Backward, per gradient asked for: input ``2N`` (x-hat again)
  ``+ 7N`` (``N`` + weight ``N`` for running-statistics batch norm, which has no
  statistics to differentiate; ``4N`` for RMS norm); weight ``2N`` (product with x-hat,
  sum); bias ``N``.
- Embedding: the forward is a gather and computes nothing: 0 FLOPs (the ``roofline``
  estimator prices it by the bytes it moves); the dense backward adds every gradient row
  into the table: one FLOP per element of ``grad_output``.

Pointwise ops, reductions and views count 0 FLOPs, as in torch's counter: prefer the
roofline estimator when memory traffic matters.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
import torch.fx
from torch.utils.flop_counter import (
    flop_registry,
    sdpa_backward_flop_count,
    sdpa_flop_count,
    shape_wrapper,
)

from ..compile._torch_private import OpOverload, tree_map
from .base import DeviceEstimator, NodeCost
from .memory import bytes_moved
from .values import compute_dtype, hint, shape, value_of

aten = torch.ops.aten


def _n(shape: Sequence[Any]) -> int:
    return math.prod(hint(s) for s in shape)


def _has(x: Any) -> int:
    return 0 if x is None else 1


def _norm_fwd(x: Sequence[int], weight: Any, bias: Any, *, stats: bool = True) -> int:
    n = _n(x)
    return (4 * n if stats else 0) + 2 * n + n * _has(weight) + n * _has(bias)


def _norm_bwd(
    x: Sequence[int], weight: Any, mask: Sequence[bool] | None, *, stats: bool = True
) -> int:
    n = _n(x)
    grad_in, grad_w, grad_b = list(mask) if mask is not None else [True, True, True]
    total = 0
    if grad_in:
        total += (2 * n + 7 * n) if stats else n
        total += n * _has(weight)
    if grad_w and weight is not None:
        total += 2 * n
    if grad_b:
        total += n
    return total


def _layer_norm(x, normalized_shape, weight=None, bias=None, *_, **__) -> int:  # type: ignore[no-untyped-def]
    return _norm_fwd(x, weight, bias)


def _layer_norm_bwd(g, x, normalized_shape, mean, rstd, weight, bias, mask, *_, **__) -> int:  # type: ignore[no-untyped-def]
    return _norm_bwd(x, weight, mask)


def _group_norm(x, weight, bias, *_, **__) -> int:  # type: ignore[no-untyped-def]
    return _norm_fwd(x, weight, bias)


def _group_norm_bwd(g, x, mean, rstd, weight, n, c, hw, group, mask, *_, **__) -> int:  # type: ignore[no-untyped-def]
    return _norm_bwd(x, weight, mask)


def _rms_norm(x, normalized_shape, weight=None, *_, **__) -> int:  # type: ignore[no-untyped-def]
    return 3 * _n(x) + _n(x) * _has(weight)


def _rms_norm_bwd(g, x, normalized_shape, rstd, weight, mask, *_, **__) -> int:  # type: ignore[no-untyped-def]
    n = _n(x)
    grad_in, grad_w = list(mask)
    return (4 * n + n * _has(weight) if grad_in else 0) + (2 * n if grad_w and weight else 0)


def _batch_norm_training_arg(pos: int) -> Callable[..., int]:
    """Batch norm whose ``training`` flag is argument ``pos``."""

    def formula(x, weight=None, bias=None, *args, **kwargs) -> int:  # type: ignore[no-untyped-def]
        rest = list(args)
        training = rest[pos - 3] if len(rest) > pos - 3 else kwargs.get("training", True)
        return _norm_fwd(x, weight, bias, stats=bool(training))

    return formula


def _legit(x, weight=None, bias=None, *args, **kwargs) -> int:  # type: ignore[no-untyped-def]
    # _native_batch_norm_legit(x, w, b, running_mean, running_var, training, ...) and its
    # .no_stats overload (x, w, b, training, ...): the first bool is the training flag.
    training = next((a for a in args if isinstance(a, bool)), True)
    return _norm_fwd(x, weight, bias, stats=training)


def _bn_train(x, weight=None, bias=None, *_, **__) -> int:  # type: ignore[no-untyped-def]
    return _norm_fwd(x, weight, bias)


def _bn_eval(x, weight=None, bias=None, *_, **__) -> int:  # type: ignore[no-untyped-def]
    return _norm_fwd(x, weight, bias, stats=False)


def _native_bn_bwd(g, x, weight, rm, rv, sm, si, train, eps, mask, *_, **__) -> int:  # type: ignore[no-untyped-def]
    return _norm_bwd(x, weight, mask, stats=bool(train))


def _bn_bwd(g, x, weight, rm, rv, sm, sv, update, eps, mask, *_, **__) -> int:  # type: ignore[no-untyped-def]
    return _norm_bwd(x, weight, mask, stats=bool(update))


def _cudnn_bn_bwd(x, g, weight, *_, **__) -> int:  # type: ignore[no-untyped-def]
    return _norm_bwd(x, weight, None)


def _embedding_bwd(grad_output, *_, **__) -> int:  # type: ignore[no-untyped-def]
    return _n(grad_output)


def _sdpa(q, k, v, *_, **__) -> int:  # type: ignore[no-untyped-def]
    return sdpa_flop_count(q, k, v)


def _sdpa_bwd(g, q, k, v, *_, **__) -> int:  # type: ignore[no-untyped-def]
    return sdpa_backward_flop_count(g, q, k, v)


# Formulas on shapes (the form FlopCounterMode's ``custom_mapping`` takes), keyed by
# overload packet, for the ops torch's counter prices at 0. See the module docstring.
FLOP_GAPS: dict[Any, Callable[..., int]] = {
    aten._scaled_dot_product_flash_attention_for_cpu: _sdpa,
    aten._scaled_dot_product_fused_attention_overrideable: _sdpa,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _sdpa_bwd,
    aten.native_layer_norm: _layer_norm,
    aten.native_layer_norm_backward: _layer_norm_bwd,
    aten.native_group_norm: _group_norm,
    aten.native_group_norm_backward: _group_norm_bwd,
    aten._fused_rms_norm: _rms_norm,
    aten._fused_rms_norm_backward: _rms_norm_bwd,
    aten.native_batch_norm: _batch_norm_training_arg(5),
    aten._native_batch_norm_legit: _legit,
    aten._native_batch_norm_legit_functional: _batch_norm_training_arg(5),
    aten._native_batch_norm_legit_no_training: _bn_eval,
    aten._batch_norm_with_update: _bn_train,
    aten._batch_norm_with_update_functional: _bn_train,
    aten._batch_norm_no_update: _bn_eval,
    aten.cudnn_batch_norm: _batch_norm_training_arg(5),
    aten.miopen_batch_norm: _batch_norm_training_arg(5),
    aten.native_batch_norm_backward: _native_bn_bwd,
    aten.batch_norm_backward: _bn_bwd,
    aten.cudnn_batch_norm_backward: _cudnn_bn_bwd,
    aten.miopen_batch_norm_backward: _cudnn_bn_bwd,
    aten.embedding_dense_backward: _embedding_bwd,
}

# What kind of work each priced op is (which peak rate applies); everything else is "other".
_KINDS = {
    **{p: "matmul" for p in (aten.mm, aten.addmm, aten.bmm, aten.baddbmm, aten._scaled_mm)},
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
    gap = FLOP_GAPS.get(packet)
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
