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
