"""Bytes from ``meta["val"]``: what an op moves, the roofline's memory term.

``bytes_moved`` is the bytes of an op's tensor inputs read plus its outputs written. Views,
aliases and ``getitem`` move nothing (:func:`~budget.estimators.ops.is_alias`); an input
broadcast with stride 0 is read once per distinct element (its strided extent); gather-like
ops (``embedding``, ``index_select``, ``gather``, ``index``) read only the rows they return,
not the whole table. An input used twice is read once. What a value *occupies* is its
storage: :func:`~budget.estimators.values.storage_of`.

Symbolic sizes (dynamic shapes) are counted through their hints.
"""

from __future__ import annotations

import math

import torch
import torch.fx

from ..compile._torch_private import OpOverload
from .ops import is_alias
from .values import hint, input_tensors, numel, shape, tensors

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
# strided convolution (bench/conv_workspace.py at 1, 2 and 8 threads)
_SCRATCH = 96 * KiB
_SCRATCH_PER_THREAD = 16 * KiB
_STRIDED_SCRATCH_PER_THREAD = {"contiguous": 64 * KiB, "channels-last backward": 160 * KiB}
# a backward on images smaller than its kernel: weight copies and scratch per thread
_SMALL_IMAGE_WEIGHT_COPIES_PER_THREAD = 4
_SMALL_IMAGE_SCRATCH_PER_THREAD = 64 * KiB


def is_channels_last(t: object) -> bool:
    """Whether ``t`` is a 4-d tensor laid out channels-last and not also contiguous."""
    return (
        isinstance(t, torch.Tensor)
        and t.dim() == 4
        and t.is_contiguous(memory_format=torch.channels_last)
        and not t.is_contiguous()
    )


def workspace_bytes(
    func: object, args: tuple | list, out: object, *, channels_last: bool | None = None
) -> int:
    """Bytes an op allocates inside its kernel and frees before it returns, which neither
    its inputs nor its outputs show; for the peak models (:mod:`budget.compile.peak`,
    :mod:`budget.eager.peak`). Only CPU convolutions, where it is large: oneDNN copies
    operands into blocked layouts, and which ones depends on the layout the convolution
    runs in (``channels_last``: by default, whether its input or weight is channels-last;
    Inductor's layout optimisation runs every convolution channels-last although the
    graph's values say otherwise). The rule, against torch.profiler on 12 convolutions of
    3 to 256 channels in each layout at 1, 2 and 8 threads (torch 2.13, CPU; ``python
    bench/conv_workspace.py --threads N``), at or over in all 72 cases:

    - the copies: contiguous, forward ``max(input, output) + weight`` and backward
      ``max(2 x input, input + grad_output, weight)``; channels-last, forward ``weight``
      and backward ``2 x weight`` (a blocked copy of the weight, and of its gradient);
    - plus oneDNN's scratch: 96 KiB, and per thread (``torch.get_num_threads()``) 16
      KiB, or in a strided convolution 64 KiB (contiguous) or 160 KiB (a channels-last
      backward);
    - but a backward whose image is smaller than its kernel (a 3x3 convolution on 2x2 or
      1x1 images: the last stage of a ResNet on small images) takes another path, in
      either layout: 4 copies of the weight per thread (8 at 2 threads, 32 at 8) and 64
      KiB of scratch per thread, on 96 KiB.

    Other ops and devices: 0."""
    if func not in _CONVOLUTIONS or not args or not isinstance(args[0], torch.Tensor):
        return 0
    if args[0].device.type != "cpu":
        return 0
    forward = func is aten.convolution.default
    x, w = (args[0], args[1]) if forward else (args[1], args[2])
    if channels_last is None:
        channels_last = is_channels_last(x) or is_channels_last(w)
    stride = args[3 if forward else 4] if len(args) > (3 if forward else 4) else [1]
    threads = torch.get_num_threads()
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
        return (1 if forward else 2) * tensor_bytes(w) + scratch
    if forward:
        made = tensor_bytes(out) if isinstance(out, torch.Tensor) else 0
        return max(tensor_bytes(x), made) + tensor_bytes(w) + scratch
    grad_out = args[0]
    copies = max(2 * tensor_bytes(x), tensor_bytes(x) + tensor_bytes(grad_out), tensor_bytes(w))
    return copies + scratch
