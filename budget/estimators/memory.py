"""Bytes from ``meta["val"]``: what an op moves, the roofline's memory term.

``bytes_moved`` is the bytes of an op's tensor inputs read plus its outputs written. Views,
aliases and ``getitem`` move nothing (:func:`~budget.estimators.ops.is_alias`); an input
broadcast with stride 0 is read once per distinct element (its strided extent); gather-like
ops (``embedding``, ``index_select``, ``gather``, ``index``) read only the rows they return,
not the whole table. An input used twice is read once. What a value *occupies* is its
storage: :func:`~budget.runtime.values.storage_of`.

Symbolic sizes (dynamic shapes) are counted through their hints.
"""

from __future__ import annotations

import math

import torch
import torch.fx

from ..runtime._torch_private import OpOverload
from ..runtime.values import hint, input_tensors, numel, shape, tensors
from .conv_workspace import measured_workspace_bytes
from .cuda_workspace import cuda_workspace_bytes
from .onednn_workspace import onednn_measures, onednn_workspace_bytes
from .ops import is_alias
from .prim_workspace import kernel_workspace_bytes, prim_workspace_bytes

aten = torch.ops.aten

# Ops that read from their first tensor only the rows/elements they return.
GATHER_OPS = {aten.embedding, aten.index_select, aten.gather, aten.index, aten.take}


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of a tensor's elements (dtype size x number of elements)."""
    return numel(t) * t.dtype.itemsize


def extent(t: torch.Tensor) -> int:
    """Distinct elements a strided tensor touches: numel, or less for stride-0 broadcasts."""
    sizes = shape(t)
    if any(s == 0 for s in sizes):
        return 0
    span = 1 + sum((s - 1) * abs(hint(st)) for s, st in zip(sizes, t.stride(), strict=True))
    return min(math.prod(sizes), span)


def bytes_moved(node: torch.fx.Node) -> int:
    """Bytes ``node`` reads and writes (module docstring); 0 for views and non-ops."""
    if node.op != "call_function" or not isinstance(node.target, OpOverload):
        return 0
    if is_alias(node):
        return 0
    written = sum(tensor_bytes(t) for t in tensors(node.meta.get("val")))
    ins = input_tensors(node)
    if node.target.overloadpacket in GATHER_OPS and ins:
        source, index = ins[0], ins[1:]
        read = min(written, extent(source) * source.dtype.itemsize)
        read += sum(extent(t) * t.dtype.itemsize for t in index)
    else:
        read = sum(extent(t) * t.dtype.itemsize for t in ins)
    return int(read + written)


_CONVOLUTIONS = (aten.convolution.default, aten.convolution_backward.default)
KiB = 1024
# oneDNN's scratch in a CPU convolution: a fixed part and a part per thread, larger in a
# strided convolution (bench/conv_workspace.py at 1, 2 and 8 threads; 32 KiB per thread,
# not 16, since an AVX-512 AMD EPYC measured 152 KiB in a 64-channel contiguous backward at
# 2 threads)
_SCRATCH = 96 * KiB
_SCRATCH_PER_THREAD = 32 * KiB
_STRIDED_SCRATCH_PER_THREAD = {"contiguous": 64 * KiB, "channels-last backward": 160 * KiB}
# a channels-last depthwise backward: oneDNN (AVX-512 AMD EPYC, 2026-11-25) held 257 times
# its weight, at every image size and at 2 threads, in ConvNeXt's 7x7 depthwise layers
_DEPTHWISE_WEIGHT_COPIES = 257
# a backward on images smaller than its kernel: weight copies and scratch per thread
_SMALL_IMAGE_WEIGHT_COPIES_PER_THREAD = 4
_SMALL_IMAGE_SCRATCH_PER_THREAD = 64 * KiB


# prims.fma (an Inductor prim, in its decomposition of softmax's backward), run eagerly,
# makes a * b before it adds c; named, not imported: the prim exists once Inductor loads
_FMA = "prims::fma"
_ATTENTIONS = (
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
)


def _attention_split(q_len: int) -> int:
    """The query block of ATen's CPU flash attention (FlashAttentionKernel.cpp)."""
    return 256 if q_len >= 768 else 64 if q_len >= 192 else 32


def attention_workspace_bytes(forward: bool, args: tuple | list) -> int:
    """What ATen's CPU flash attention allocates inside itself (torch 2.13), by its blocks
    of ``qs = min(T, 32 | 64 | 256)`` query rows (by ``T``, the query length) and ``ks =
    min(S, 512)`` key rows, per thread (``torch.get_num_threads()``), in the accumulation
    type (float32 for float32, bfloat16 and float16 inputs):

    - forward: ``qs * ks + 2 * qs + qs * Dv`` elements per thread (scores, their max and
      sum, the output block), and ``qs * ks`` more in the input's type for 16-bit inputs;
    - backward: ``2 * qs * ks`` per thread (scores and their gradient); a contiguous
      copy of the output's gradient unless it is laid out as the kernel writes its output
      ((B, T, H, D) in memory); and a few bytes per query row (128 to 1024 measured;
      counted as ``max(128, 4 T)``). For 16-bit inputs, a bound, not fitted: ``2 * qs *
      ks`` more in the input's type, ``(qs + ks) * D`` float32 per thread, and float32
      copies of the query, key and value. Used where the call is not measured (``measure
      =False``); tests/estimators/test_workspace.py checks it covers the measurement."""
    grad_out = None
    if forward:
        q, k, v = args[0], args[1], args[2]
    else:
        grad_out, q, k, v = args[0], args[1], args[2], args[3]
    if not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in (q, k, v)):
        return 0
    t_len, s_len, dv = shape(q)[2], shape(k)[2], shape(v)[3]
    qs, ks = min(t_len, _attention_split(t_len)), min(s_len, 512)
    threads = torch.get_num_threads()
    acc = 4 if q.dtype in (torch.float32, torch.bfloat16, torch.float16) else q.dtype.itemsize
    reduced = q.dtype in (torch.bfloat16, torch.float16)
    if forward:
        per_thread = (qs * ks + 2 * qs + qs * dv) * acc + (
            qs * ks * q.dtype.itemsize if reduced else 0
        )
        return threads * per_thread
    per_thread = 2 * qs * ks * acc
    copies = 0
    if isinstance(grad_out, torch.Tensor) and not grad_out.transpose(1, 2).is_contiguous():
        copies = tensor_bytes(grad_out)
    if reduced:
        per_thread += 2 * qs * ks * q.dtype.itemsize + (qs + ks) * shape(q)[3] * 4
        copies += sum(numel(t) * 4 for t in (q, k, v))
    return threads * per_thread + copies + max(128, 4 * t_len)


def wrapped_scalar_bytes(func: object, args: tuple | list, out: object) -> int:
    """A Python number an op takes as a Tensor (``aten.mul.Tensor(x, 0.5)``, as a graph run
    op by op calls it) or as the ``other`` Scalar of a binary op (``aten.ge.Scalar(x,
    0.5)``) is wrapped in a 0-dim tensor for the call (8 bytes: double or int64; 1: bool),
    which the op casts to the dtype it computes in where they differ (the output's, or
    the operand's where the output is not floating: a comparison), both freed when it
    returns: 12 bytes at a float32 op. torch.profiler, per op (torch 2.13, CPU): mul, add,
    sub, div, rsub and comparisons wrap; clamp, pow, fill, masked_fill, leaky_relu,
    hardtanh and threshold_backward take their Scalars as they are; a dropout backward
    wraps its ``scale`` (it multiplies the gradient by it). The built-in GPT's
    step under the eager compiler peaks inside such a mul. Tensors (a run on fake or meta
    tensors sees a wrapped tensor where one was made) cost nothing here; a tensor operand
    the op casts to another dtype: :func:`promotion_bytes`."""
    if not isinstance(func, OpOverload):
        return 0
    operand = next((a for a in args if isinstance(a, torch.Tensor)), None)
    total = 0
    for slot, arg in zip(func._schema.arguments, args, strict=False):
        kind = str(slot.type)
        if not isinstance(arg, (bool, int, float)) or not (
            kind == "Tensor"
            or (kind == "number" and slot.name == "other")
            or (slot.name == "scale" and func.name() == "aten::native_dropout_backward")
        ):
            continue
        wrapped = (
            torch.bool
            if isinstance(arg, bool)
            else (torch.int64 if isinstance(arg, int) else torch.float64)
        )
        target = out.dtype if isinstance(out, torch.Tensor) else wrapped
        if not target.is_floating_point and operand is not None:
            target = operand.dtype
        total += wrapped.itemsize + (target.itemsize if target != wrapped else 0)
    return total


def promotion_bytes(func: object, args: tuple | list, out: object) -> int:
    """A CPU pointwise op whose operands differ in dtype computes in their common dtype:
    TensorIterator copies each operand of another dtype to it before the loop, and where
    the op makes a floating output of another dtype it computes into a temporary of the
    common dtype and copies it over; both live for the call (CUDA's kernels cast as they
    load instead). Ops that write an operand (in place, ``out=``) are left at 0: their
    copies follow other rules (bfloat16 ``*=`` float32 copies, float32 ``+=`` bfloat16
    does not), as are kernels that copy more (a mixed-dtype ``gelu_backward`` copies its
    float operand too). The
    common dtype is torch's promotion of the operands (dimensioned tensors first, then
    0-dim ones and Python numbers of a higher category), an integer one made the output's
    float where the op makes floats of integers (``sin``, true division). A ``where``'s
    condition and a ``masked_fill``'s mask select rather than compute: not copied; nor
    are 0-dim operands (a few bytes) or ops that convert on purpose (a ``dtype``
    argument). Run op by op (``compiler="eager"``, ``budget.apply``): Inductor casts
    inside its own kernels."""
    if not isinstance(func, OpOverload) or torch.Tag.pointwise not in func.tags:
        return 0
    slots = func._schema.arguments
    if any(
        slot.name == "dtype" or (slot.alias_info and slot.alias_info.is_write) for slot in slots
    ):
        return 0
    selectors = {"condition", "mask"} if func.name() != "aten::native_dropout_backward" else set()
    operands, numbers = [], []
    for slot, arg in zip(slots, args, strict=False):
        if isinstance(arg, torch.Tensor) and slot.name not in selectors:
            operands.append(arg)
        elif isinstance(arg, (bool, int, float)) and (
            str(slot.type) == "Tensor" or slot.name == "other"
        ):
            numbers.append(arg)
    common = _promoted(operands, numbers)
    if common is None:
        return 0
    made = out if isinstance(out, torch.Tensor) else None
    if made is not None and made.dtype.is_floating_point and _category(common) < 2:
        common = made.dtype  # integers made floats
    total = sum(t.numel() * common.itemsize for t in operands if t.dim() and t.dtype != common)
    if made is not None and made.dtype != common and made.dtype.is_floating_point:
        total += made.numel() * common.itemsize
    return total


def _category(dtype: torch.dtype) -> int:
    if dtype.is_complex:
        return 3
    return 2 if dtype.is_floating_point else (0 if dtype == torch.bool else 1)


def _promoted(tensors: list[torch.Tensor], numbers: list[bool | int | float]) -> torch.dtype | None:
    """torch's type promotion of ``tensors`` and Python ``numbers`` (as ``torch.result_type``
    does for two): dimensioned tensors' dtypes promoted together, then a 0-dim tensor or a
    number of a higher category raises it (a number to the default dtype of its kind)."""
    ranked = [t.dtype for t in tensors if t.dim()], [t.dtype for t in tensors if not t.dim()]
    common: torch.dtype | None = None
    for dtypes in ranked:
        if not dtypes:
            continue
        found = dtypes[0]
        for d in dtypes[1:]:
            found = torch.promote_types(found, d)
        if common is None or _category(found) > _category(common):
            common = found if common is None else torch.promote_types(common, found)
    for n in numbers:
        kind = (
            torch.bool
            if isinstance(n, bool)
            else (torch.int64 if isinstance(n, int) else torch.get_default_dtype())
        )
        if common is None or _category(kind) > _category(common):
            common = kind
    return common


def is_channels_last(t: object) -> bool:
    """Whether ``t`` is a 4-d tensor laid out channels-last and not also contiguous."""
    return (
        isinstance(t, torch.Tensor)
        and t.dim() == 4
        and t.is_contiguous(memory_format=torch.channels_last)
        and not t.is_contiguous()
    )


def workspace_bytes(
    func: object,
    args: tuple | list,
    out: object,
    *,
    channels_last: bool | None = None,
    device: str | None = None,
    measure: bool = True,
    inductor: bool = False,
    kwargs: dict | None = None,
) -> int:
    """Bytes an op allocates inside its kernel and frees before it returns, which neither
    its inputs nor its outputs show; for the peak models (:mod:`budget.compile.peak`,
    :mod:`budget.eager.peak`). CPU convolutions, where it is large: measured on this host
    with ``measure=True`` (:mod:`budget.estimators.conv_workspace`; the callers pass
    ``budget.config.conv_workspace == "measure"``, the default), since oneDNN picks its
    path by CPU, else :func:`convolution_rule_bytes`. ``channels_last=True``: the compiler
    lays the operands out channels-last although the graph's values say otherwise
    (Inductor's layout optimisation); by default the call runs on its operands as they are
    (measured so: oneDNN copies an NCHW weight to meet a channels-last input), and the
    rule takes the layout from its input or weight.

    Inductor's low-memory max-pool prims, run op by op (``compiler="eager"``; not with
    ``inductor=True``, where Inductor lowers them into its code): their temporaries,
    measured (:mod:`budget.estimators.prim_workspace`), on every device. Other CPU calls
    that no rule below owns, run op by op: CPU kernels with temporaries of their own and
    calls on an operand expanded with stride 0, measured with their ``kwargs`` unless
    ``measure=False`` (:func:`~budget.estimators.prim_workspace.kernel_workspace_bytes`).
    CPU flash attention (``_scaled_dot_product_flash_attention_for_cpu`` and its backward)
    allocates per-thread blocks: measured so too, by rule without ``measure``
    (:func:`attention_workspace_bytes`). ``prims.fma`` (in the
    decomposed softmax backward) run op by op makes its product before the sum: one
    output's bytes (a T5 step under ``compiler="eager"`` peaks inside one). A Python
    number where an op takes a Tensor: :func:`wrapped_scalar_bytes`.

    CPU matmuls in bfloat16 or float16 (oneDNN's packed operands and scratch) or on an
    operand BLAS cannot read as laid out (its copy), and LSTM layers (their gates, operand
    copies) are measured on this host
    (:mod:`budget.estimators.onednn_workspace`), unless ``measure=False``.
    On CUDA, the kernels that allocate inside themselves (attention backwards, cuDNN
    convolutions) are measured on this GPU (:mod:`budget.estimators.cuda_workspace`).
    Other ops and devices: 0. ``device``: the device the op runs on, by default its first
    operand's (given where the operands are ``meta`` tensors standing in for others)."""
    # the first tensor operand says where the op runs (a number may come first: sub(1, x))
    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if first is None:
        return 0
    inside = None if inductor else prim_workspace_bytes(func, args)
    if inside is not None:  # Inductor's max-pool prims, run op by op
        return inside
    where = device or first.device.type
    if where == "cuda":
        return cuda_workspace_bytes(func, args, kwargs)
    if where != "cpu":
        return 0
    if func in _ATTENTIONS:  # measured as the calls below are (Inductor calls it too)
        measured = measure and kwargs is not None
        found = kernel_workspace_bytes(func, args, kwargs, out, device=where) if measured else None
        forward = func is _ATTENTIONS[0]
        return attention_workspace_bytes(forward, args) if found is None else found
    if isinstance(func, OpOverload) and func.name() == _FMA and isinstance(out, torch.Tensor):
        return tensor_bytes(out)  # run eagerly as a * b, then + c: the product is a temporary
    if func not in _CONVOLUTIONS:
        inner = onednn_workspace_bytes(func, args) if measure else 0
        if measure and not inductor and kwargs is not None and not onednn_measures(func):
            kernel = kernel_workspace_bytes(func, args, kwargs, out, device=where)
            if kernel is not None:  # the whole call measured: its copies and numbers too
                return kernel
        copies = 0 if inductor else promotion_bytes(func, args, out)  # Inductor casts inside
        return inner + wrapped_scalar_bytes(func, args, out) + copies
    if measure:
        # measured with the operands' own strides, unless the compiler lays them out
        # channels-last (Inductor): an NCHW weight beside a channels-last input is copied
        measured = measured_workspace_bytes(func, args, channels_last=bool(channels_last))
        if measured is not None:
            return measured
    if channels_last is None:
        forward = func is aten.convolution.default
        x, w = (args[0], args[1]) if forward else (args[1], args[2])
        channels_last = is_channels_last(x) or is_channels_last(w)
    return convolution_rule_bytes(func, args, out, channels_last)


def convolution_rule_bytes(
    func: object, args: tuple | list, out: object, channels_last: bool
) -> int:
    """A CPU convolution's workspace by rule, in the layout it runs in (``channels_last``).
    Against torch.profiler on 12 convolutions of 3 to 256 channels in each layout at 1, 2
    and 8 threads (torch 2.13, CPU; ``python bench/conv_workspace.py --threads N``), the
    rule is at or over in all 72 cases on one machine; on
    another (an AVX-512 AMD EPYC, 2 threads) one row was 24 KiB under until the scratch per
    thread went from 16 to 32 KiB, and the small-image path below is not taken there (the
    estimate is then 4-8x over on those rows). oneDNN picks its path by CPU:

    - the copies: contiguous, forward ``max(input, output) + weight`` and backward
      ``max(2 x input, input + grad_output, weight)``; channels-last, forward ``weight``
      and backward ``2 x weight`` (a blocked copy of the weight, and of its gradient), one
      weight more where the stride is the kernel (a patchify or downsampling layer), or
      ``257 x weight`` in a depthwise convolution (groups = channels: ConvNeXt's 7x7,
      measured on one CPU, ConvNeXt-atto's 40 to 320 channels; a bound elsewhere);
    - plus oneDNN's scratch: 96 KiB, and per thread (``torch.get_num_threads()``) 32
      KiB, or in a strided convolution 64 KiB (contiguous) or 160 KiB (a channels-last
      backward);
    - but a backward whose image is smaller than its kernel (a 3x3 convolution on 2x2 or
      1x1 images: the last stage of a ResNet on small images) takes another path, in
      either layout, on some CPUs: 4 copies of the weight per thread (8 at 2 threads, 32
      at 8) and 64 KiB of scratch per thread, on 96 KiB (counted on every CPU).
    """
    forward = func is aten.convolution.default
    x, w = (args[0], args[1]) if forward else (args[1], args[2])
    stride = args[3 if forward else 4] if len(args) > (3 if forward else 4) else [1]
    threads = torch.get_num_threads()
    groups = args[9] if not forward and len(args) > 9 else 1
    depthwise = channels_last and not forward and groups > 1 and groups == shape(x)[1]
    if depthwise:  # ConvNeXt's 7x7, at every image size (small ones included)
        return _DEPTHWISE_WEIGHT_COPIES * tensor_bytes(w) + _SCRATCH + _SCRATCH_PER_THREAD * threads
    if not forward and any(xs < ks for xs, ks in zip(shape(x)[2:], shape(w)[2:], strict=False)):
        # oneDNN's path for images smaller than the kernel: weight copies per thread, in
        # place of the blocked copies
        copies = _SMALL_IMAGE_WEIGHT_COPIES_PER_THREAD * tensor_bytes(w)
        per_thread = copies + _SMALL_IMAGE_SCRATCH_PER_THREAD
        return _SCRATCH + per_thread * threads
    per_thread = _SCRATCH_PER_THREAD
    if any(s != 1 for s in stride):
        if not channels_last:
            per_thread = _STRIDED_SCRATCH_PER_THREAD["contiguous"]
        elif not forward:
            per_thread = _STRIDED_SCRATCH_PER_THREAD["channels-last backward"]
    scratch = _SCRATCH + per_thread * threads
    if channels_last:
        kernel = shape(w)[2:]
        patchify = len(stride) == len(kernel) and all(
            s == k > 1 for s, k in zip(stride, kernel, strict=True)
        )
        return ((1 if forward else 2) + patchify) * tensor_bytes(w) + scratch
    if forward:
        made = tensor_bytes(out) if isinstance(out, torch.Tensor) else 0
        return max(tensor_bytes(x), made) + tensor_bytes(w) + scratch
    grad_out = args[0]
    copies = max(2 * tensor_bytes(x), tensor_bytes(x) + tensor_bytes(grad_out), tensor_bytes(w))
    return copies + scratch
