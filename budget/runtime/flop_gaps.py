"""FLOPs of the real work torch's FLOP counter prices at 0, as formulas on shapes.

``FLOP_GAPS`` is the form ``FlopCounterMode``'s ``custom_mapping`` takes, keyed by overload
packet. The ``flops`` estimator (:mod:`budget.estimators.flops`) and the measurements
(:mod:`budget.runtime.measure`) both use it, so estimated and measured FLOPs agree:

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
- Grouped matmuls (mixture-of-experts layers): ``aten._grouped_mm`` of ``(M, K)`` by
  ``(K, N)``, grouped along any of them, ``2MKN`` (times the groups where both operands
  are batched); transformers' own ``grouped_mm_fallback`` (its MoE layers under
  ``torch.compile`` outside bfloat16), ``2SKN`` for ``(S, K)`` rows by ``E`` experts'
  ``(K, N)``, its backward twice that (the input's gradient and the weights').
  Registered by name (:func:`flop_gaps`): transformers defines them when it is imported.
- CPU LSTM layers (``aten.mkldnn_rnn_layer``, what ``nn.LSTM`` runs on the CPU): the two
  matmuls of each time step, ``2 * (T * B) * G * (I + H)`` for ``T * B`` rows of input,
  ``G`` gate rows (``4H``) and input and hidden widths ``I`` and ``H``; the gates'
  pointwise work counts 0, as elsewhere. The backward twice that (the gradients of the
  inputs and of the weights of both matmuls).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

aten = torch.ops.aten


def _n(shape: Sequence[Any]) -> int:
    return math.prod(int(s) for s in shape)


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


def _grouped_mm(a, b, *_, **__) -> int:  # type: ignore[no-untyped-def]
    batched = len(a) == 3 and len(b) == 3
    return 2 * int(a[-2]) * int(a[-1]) * int(b[-1]) * (int(a[0]) if batched else 1)


def _grouped_mm_fallback(x, weight, *_, **__) -> int:  # type: ignore[no-untyped-def]
    return 2 * int(x[0]) * int(x[1]) * int(weight[2])


def _grouped_mm_fallback_bwd(x, weight, *_, **__) -> int:  # type: ignore[no-untyped-def]
    return 2 * _grouped_mm_fallback(x, weight)


def _rnn_layer(x, w_ih, w_hh, *_, **__) -> int:  # type: ignore[no-untyped-def]
    return 2 * int(x[0]) * int(x[1]) * (_n(w_ih) + _n(w_hh))


def _rnn_layer_bwd(x, w_ih, w_hh, *_, **__) -> int:  # type: ignore[no-untyped-def]
    return 2 * _rnn_layer(x, w_ih, w_hh)


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
    aten._grouped_mm: _grouped_mm,
    aten.mkldnn_rnn_layer: _rnn_layer,
    aten.mkldnn_rnn_layer_backward: _rnn_layer_bwd,
}

# Ops of other libraries, by qualified name: in FLOP_GAPS' form once they are registered.
NAMED_GAPS: dict[str, Callable[..., int]] = {
    "transformers::grouped_mm_fallback": _grouped_mm_fallback,
    "transformers::grouped_mm_fallback_backward": _grouped_mm_fallback_bwd,
}


def flop_gaps() -> dict[Any, Callable[..., int]]:
    """``FLOP_GAPS`` with the ops of ``NAMED_GAPS`` that are registered now."""
    found = dict(FLOP_GAPS)
    for name, formula in NAMED_GAPS.items():
        namespace, op = name.split("::")
        with contextlib.suppress(AttributeError, RuntimeError):  # its library not imported
            found[getattr(getattr(torch.ops, namespace), op)] = formula
    return found
