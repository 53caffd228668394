"""Kernels run op by op that allocate inside themselves, measured on zeros of their calls.

Inductor's decomposition of ``max_pool2d_with_indices`` (used by ``compiler="eager"``
too, which runs Inductor's decompositions) saves int8 offsets in place of int64 indices:
``prims._low_memory_max_pool_with_offsets`` in the forward and
``prims._low_memory_max_pool_offsets_to_indices`` where the backward needs the indices.
Run outside Inductor, each is its Python implementation: a handful of int64 tensors of
the pooled output's size, alive together inside the call and freed before it returns
(the output itself aside). A ResNet-18 step under the eager compiler peaks inside the
backward's conversion. What they allocate beyond their outputs is measured once per call
signature (:func:`budget.runtime.measure.measure_workspace`) by running the prim on zeros
of the call's shapes: index arithmetic that is the same on every host and device
(:func:`prim_workspace_bytes`).

CPU kernels run op by op (``budget.apply``, ``compiler="eager"``, and the ATen kernels
Inductor's code calls, on meta tensors standing for CPU ones) take memory too, measured the
same way on zeros laid out as the call's operands, per thread count
(:func:`kernel_workspace_bytes`): ``CPU_KERNELS``, whose implementations allocate inside
whatever the layout (reduced losses make the unreduced losses first; group and layer norm
backwards sum the parameters' gradients per thread; batch norm's backward makes a temporary
of the input's size; upsampling copies or keeps weights; softmax backwards copy a gradient
laid out otherwise; FFTs over other than the last dimension transpose; EmbeddingBag's
backward and CTC keep per-bag and per-step buffers; exact GELU's backward,
``F.unfold``/``F.fold`` and grid sampling's backward copy an operand laid out otherwise than
they read it; a full ``mean`` wraps its divisor; flash attention's per-thread blocks; a sum
of booleans or integers casts them to int64; the masked indexing of Inductor's
decompositions clamps its indices and masks its values first), and any functional ATen call on an operand
expanded with stride 0 (the gradient of a ``sum`` or ``mean`` reaching the op before it,
which many kernels copy first). Calls that write an operand, return a view or anything but
tensors, draw random numbers or make outputs of data-dependent sizes are not run; nor calls
whose operands and outputs would take over ``MAX_OPERAND_BYTES``; a call that fails on zeros
counts 0. Operands whose values size an allocation (``ONES``) are ones: every bag of an
EmbeddingBag nonempty, an upper bound that is exact for the usual bags.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch

from ..runtime import _torch_private as T
from ..runtime._torch_private import OpOverload, _disable_current_modes
from ..runtime.measure import measure_workspace, profiler_busy
from ..runtime.values import hint, op_tensors, shape

PRIMS = (
    "prims::_low_memory_max_pool_with_offsets",
    "prims::_low_memory_max_pool_offsets_to_indices",
)
CPU_KERNELS = tuple(
    f"aten::{name}"
    for name in (
        "native_group_norm_backward",
        "native_layer_norm_backward",
        "native_batch_norm",
        "native_batch_norm_backward",
        "upsample_nearest2d",
        "upsample_nearest2d_backward",
        "upsample_linear1d",
        "upsample_bilinear2d",
        "_upsample_bilinear2d_aa",
        "upsample_bicubic2d",
        "upsample_trilinear3d",
        "_softmax_backward_data",
        "_log_softmax_backward_data",
        "_fft_r2c",
        "_fft_c2r",
        "_fft_c2c",
        "_embedding_bag_backward",
        "_embedding_bag_dense_backward",
        "_embedding_bag_per_sample_weights_backward",
        "_ctc_loss",
        "_ctc_loss_backward",
        "gelu_backward",
        "im2col",
        "col2im",
        "grid_sampler_2d_backward",
        "grid_sampler_3d_backward",
        "mean",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention_for_cpu_backward",
        "mse_loss",
        "mse_loss_backward",
        "smooth_l1_loss",
        "smooth_l1_loss_backward",
        "huber_loss",
        "huber_loss_backward",
        "binary_cross_entropy",
        "binary_cross_entropy_backward",
        "binary_cross_entropy_with_logits",
        "soft_margin_loss",
        "soft_margin_loss_backward",
        "_unsafe_masked_index",
        "_unsafe_masked_index_put_accumulate",
    )
)
# sums of integers or booleans (``mask.sum()``) cast their operand to int64 inside the call
_SUMS = ("aten::sum", "aten::sum.dim_IntList")
MAX_OPERAND_BYTES = 256 * 2**20  # operands larger than this are not materialised
# Operands whose values size what a kernel allocates, made ones rather than zeros: an
# EmbeddingBag backward in max mode gathers the rows of the bags whose size is not 0.
ONES = frozenset({"bag_size"})

_MEMO: dict[tuple[Any, ...], int] = {}


def prim_workspace_bytes(func: Any, args: Sequence[Any]) -> int | None:
    """The bytes ``func`` (one of ``PRIMS``) allocates inside itself on ``args``, beyond what
    it returns; None for any other op (and 0 for operands too large to run)."""
    name = func.name() if isinstance(func, OpOverload) else None
    if name not in PRIMS:
        return None
    return _memo(func, args, {}, None)


def kernel_workspace_bytes(
    func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any, device: str | None = None
) -> int | None:
    """The bytes a CPU call of ``func`` (one of ``CPU_KERNELS``, or a functional ATen op on
    an operand expanded with stride 0) allocates inside itself, beyond what it returns;
    None for any other call (its owner elsewhere prices it). ``device="cpu"``: operands on
    ``meta`` stand for CPU ones (Inductor's code run on meta tensors)."""
    name = func.name() if isinstance(func, OpOverload) else None
    listed = name in CPU_KERNELS or (name in _SUMS and _integral(args))
    if not listed and not (_functional(func) and _expanded(args)):
        return None  # (asked first: most calls stop here, and it reads fewer tensors)
    allowed = ("cpu", "meta") if device == "cpu" else ("cpu",)
    if not all(t.device.type in allowed for t in op_tensors(args, kwargs, out)):
        return None
    return _memo(func, args, kwargs, out)


def _memo(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    key = (
        func.name(),
        torch.get_num_threads(),
        *(_signature(a) for a in args),
        *((k, _signature(v)) for k, v in kwargs.items()),
    )
    if key not in _MEMO:
        if profiler_busy():  # the user's profiler is recording: unmeasured, nothing kept
            return 0
        _MEMO[key] = _measure(func, args, kwargs, out)
    return _MEMO[key]


def _functional(func: Any) -> bool:
    """An ATen op safe to run again on zeros: it writes no operand, returns no view of one,
    draws no random numbers and makes outputs of sizes its operands' sizes decide."""
    return isinstance(func, OpOverload) and func.namespace == "aten" and _pure(func)


@functools.cache  # asked at every op call of a fake step; an op's schema never changes
def _pure(func: OpOverload) -> bool:
    schema = func._schema
    aliased = any(r.alias_info is not None for r in schema.returns)
    tensors = bool(schema.returns) and all(str(r.type) == "Tensor" for r in schema.returns)
    tags = (torch.Tag.nondeterministic_seeded, torch.Tag.dynamic_output_shape)
    pure = not schema.is_mutable and not aliased and tensors
    return pure and not any(t in func.tags for t in tags)


def _integral(args: Sequence[Any]) -> bool:
    return bool(args) and isinstance(args[0], torch.Tensor) and not args[0].is_floating_point()


def _expanded(args: Sequence[Any]) -> bool:
    """Whether a tensor operand repeats elements: a stride of 0 over a size above 1."""
    return any(
        isinstance(a, torch.Tensor)
        and any(hint(st) == 0 and hint(n) > 1 for n, st in zip(a.shape, a.stride(), strict=True))
        for a in args
    )


def _signature(arg: Any) -> Any:
    if isinstance(arg, torch.Tensor):
        return ("tensor", shape(arg), tuple(hint(s) for s in arg.stride()), str(arg.dtype))
    if isinstance(arg, (list, tuple)):
        return tuple(_signature(a) for a in arg)
    if isinstance(arg, (torch.SymInt, torch.SymBool)):
        return hint(arg)
    return arg


def _measure(func: Any, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> int:
    tensors = [t for t in T.tree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor)]
    size = sum(t.dtype.itemsize * max(1, int(torch.Size(shape(t)).numel())) for t in tensors)
    if size > 2 * MAX_OPERAND_BYTES:  # made twice: a run unmeasured, then the measured one
        return 0

    def real(arg: Any, name: str = "") -> Any:
        if isinstance(arg, torch.Tensor):  # laid out as the operand (a kernel may copy it)
            size, stride = shape(arg), [hint(s) for s in arg.stride()]
            extent = 1 + sum((n - 1) * st for n, st in zip(size, stride, strict=True))
            fill = torch.ones if name in ONES else torch.zeros
            return fill(max(1, extent), dtype=arg.dtype).as_strided(size, stride)
        if isinstance(arg, (list, tuple)):  # fx's immutable lists as plain ones
            return [real(a) for a in arg] if isinstance(arg, list) else tuple(map(real, arg))
        if isinstance(arg, (torch.SymInt, torch.SymBool)):
            return hint(arg)
        return arg

    names = [a.name for a in func._schema.arguments] if isinstance(func, OpOverload) else []
    with _disable_current_modes(), torch.no_grad():  # real values, outside the caller's modes
        made = [real(a, n) for a, n in zip(args, names + [""] * len(args), strict=False)]
        made_kw = {k: real(v, k) for k, v in kwargs.items()}
        try:
            return max(0, measure_workspace(lambda: func(*made, **made_kw)))
        except (RuntimeError, ValueError, TypeError, AttributeError, IndexError):
            return 0  # refused on zeros (a factorisation of a singular matrix): not priced
