"""What an op *is*: the one classification the estimators and the graph builder read.

- **alias**: only re-views its inputs (views, ``getitem``...): every output shares storage
  with an input; it computes and moves nothing;
- **mutating**: its schema writes to an input;
- **collective**: communicates across processes (an op of ``COLLECTIVE_NAMESPACES``);
- **random**: running it again draws new random numbers. torch's ``nondeterministic_seeded``
  tag alone is not enough: CPU attention carries it even with ``dropout_p=0`` (DESIGN.md,
  "Tags are not semantics"), so attention is random only with a non-zero dropout.

:func:`forbidden_recompute` turns these (and the user's checkpoint tags) into the reason
a node must not be recomputed; the ``profile`` estimator reads them to decide what it may
run.
"""

from __future__ import annotations

import torch
import torch.fx
from torch.utils.checkpoint import CheckpointPolicy

from ..runtime import _torch_private as T  # T.must_recompute loads the partitioner: on use
from ..runtime.values import input_tensors, storage_of, tensors

aten = torch.ops.aten

# The namespaces of communication ops (functional collectives, DTensor, c10d's own).
COLLECTIVE_NAMESPACES = frozenset({"_c10d_functional", "c10d_functional", "_dtensor", "c10d"})

# Attention ops and the position of their ``dropout_p`` argument.
_SDPA_WITH_DROPOUT_ARG = {
    aten._scaled_dot_product_flash_attention_for_cpu: 3,
    aten._scaled_dot_product_flash_attention: 3,
    aten._scaled_dot_product_efficient_attention: 4,
    aten._scaled_dot_product_cudnn_attention: 5,
    aten.scaled_dot_product_attention: 4,
}


def is_alias(node: torch.fx.Node) -> bool:
    """True when ``node`` only re-views its inputs (view, permute, split, alias, getitem...):
    every output shares storage with an input, nothing is computed or copied."""
    if node.op != "call_function":
        return False
    target = node.target
    if isinstance(target, T.HigherOrderOperator):
        return False
    if not isinstance(target, T.OpOverload):
        return True  # getitem and other Python glue
    if target._schema.is_mutable:
        return False
    outs = tensors(node.meta.get("val"))
    if not outs:
        return bool(target.is_view)
    ins = {storage_of(t) for t in input_tensors(node)}
    ins.discard(None)
    return all(storage_of(t) in ins for t in outs)


def is_mutating(node: torch.fx.Node) -> bool:
    """True when ``node``'s op writes to one of its inputs (its schema says so)."""
    target = node.target
    return isinstance(target, T.OpOverload) and target._schema.is_mutable


def is_collective(node: torch.fx.Node) -> bool:
    """True when ``node``'s op communicates across processes (``COLLECTIVE_NAMESPACES``)."""
    target = node.target
    return isinstance(target, T.OpOverload) and target.namespace in COLLECTIVE_NAMESPACES


def is_random(node: torch.fx.Node) -> bool:
    """True when recomputing ``node`` would draw new random numbers.

    The ``nondeterministic_seeded`` tag alone is not enough: CPU attention carries it
    even with ``dropout_p=0`` (DESIGN.md, "Tags are not semantics").
    """
    target = node.target
    if node.op != "call_function" or not hasattr(target, "tags"):
        return False
    if torch.Tag.nondeterministic_seeded not in target.tags:
        return False
    packet = getattr(target, "overloadpacket", None)
    if packet in _SDPA_WITH_DROPOUT_ARG:
        pos = _SDPA_WITH_DROPOUT_ARG[packet]
        p = node.kwargs.get("dropout_p", node.args[pos] if len(node.args) > pos else 0.0)
        return bool(p)
    return True


def forbidden_recompute(node: torch.fx.Node) -> str:
    """Why ``node`` must not be recomputed, or '' when it may be."""
    if node.meta.get("recompute") == CheckpointPolicy.MUST_SAVE:
        return "tagged MUST_SAVE"
    if is_random(node) and not T.must_recompute(node):
        return "random op (recomputing would draw a new sample)"
    if is_mutating(node):
        return "mutates its inputs"
    if is_collective(node):
        return "collective"
    if isinstance(node.target, T.HigherOrderOperator):
        return f"higher-order op {node.target.name()}"
    return ""
