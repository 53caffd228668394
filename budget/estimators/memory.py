"""Bytes from ``meta["val"]``: what a value occupies and what an op moves.

- what a value *occupies* is its storage (``storage_of``): a view costs its base once, so
  the graph counts memory per storage, exactly as it is measured;
- what an op *moves* (``bytes_moved``, the roofline's memory term) is the bytes of its
  tensor inputs read plus its outputs written. Views, aliases and ``getitem`` move nothing;
  an input broadcast with stride 0 is read once per distinct element (its strided extent);
  gather-like ops (``embedding``, ``index_select``, ``gather``, ``index``) read only the
  rows they return, not the whole table. An input used twice is read once.

Symbolic sizes (dynamic shapes) are counted through their hints.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import optimization_hint
from torch.utils._pytree import tree_leaves

aten = torch.ops.aten
FALLBACK_SIZE = 4096  # hint for a symbolic size without one (unbacked)

# Ops that read from their first tensor only the rows/elements they return.
GATHER_OPS = {aten.embedding, aten.index_select, aten.gather, aten.index, aten.take}


def hint(x: Any) -> int:
    """An int, or a symbolic int through its hint."""
    if isinstance(x, int):
        return x
    if isinstance(x, torch.SymBool):
        return int(bool(optimization_hint(torch.sym_ite(x, 1, 0), fallback=0)))
    return int(optimization_hint(x, fallback=FALLBACK_SIZE))


def hint_float(x: Any) -> float:
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, (torch.SymInt, torch.SymBool)):
        return float(hint(x))
    if isinstance(x, torch.SymFloat):
        return float(x.node.hint) if x.node.hint is not None else 0.0
    return float(x)


def shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(hint(s) for s in t.shape)


def numel(t: torch.Tensor) -> int:
    return math.prod(shape(t))


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


def storage_of(val: object) -> tuple[int, int] | None:
    """(storage key, storage bytes) of a tensor value, None for non-tensors."""
    if not isinstance(val, torch.Tensor) or not torch._C._has_storage(val):
        return None
    storage = val.untyped_storage()
    return storage._cdata, hint(storage.nbytes())


def tensors(val: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(val) if isinstance(t, torch.Tensor)]


def value_of(x: Any) -> Any:
    """An fx node's ``meta["val"]``; anything else as it is."""
    return x.meta.get("val") if isinstance(x, torch.fx.Node) else x


def input_tensors(node: torch.fx.Node) -> list[torch.Tensor]:
    """The tensor values ``node`` reads, one per distinct input node, in argument order."""
    out = []
    for a in node.all_input_nodes:
        out.extend(tensors(a.meta.get("val")))
    return out


def node_tensors(node: torch.fx.Node) -> Iterator[torch.Tensor]:
    """Output tensors of ``node``, then its input tensors."""
    yield from tensors(node.meta.get("val"))
    yield from input_tensors(node)


def node_device(node: torch.fx.Node) -> torch.device:
    """The device ``node`` runs on: that of its first tensor; CPU when it has none, or when
    its tensors are on ``meta``."""
    where = next((t.device for t in node_tensors(node)), torch.device("cpu"))
    return torch.device("cpu") if where.type == "meta" else where


def compute_dtype(node: torch.fx.Node) -> torch.dtype | None:
    """The dtype ``node`` computes in: its first floating input, else its first output."""
    for t in input_tensors(node):
        if t.dtype.is_floating_point or t.dtype.is_complex:
            return t.dtype
    out = tensors(node.meta.get("val"))
    return out[0].dtype if out else None


def is_mutating(node: torch.fx.Node) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable


def is_alias(node: torch.fx.Node) -> bool:
    """True when ``node`` only re-views its inputs (view, permute, split, alias, getitem...):
    every output shares storage with an input, nothing is computed or copied."""
    if node.op != "call_function":
        return False
    target = node.target
    if isinstance(target, torch._ops.HigherOrderOperator):
        return False
    if not isinstance(target, torch._ops.OpOverload):
        return True  # getitem and other Python glue
    if target._schema.is_mutable:
        return False
    outs = tensors(node.meta.get("val"))
    if not outs:
        return bool(target.is_view)
    ins = {storage_of(t) for t in input_tensors(node)}
    ins.discard(None)
    return all(storage_of(t) in ins for t in outs)


def bytes_moved(node: torch.fx.Node) -> int:
    """Bytes ``node`` reads and writes (module docstring); 0 for views and non-ops."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
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
