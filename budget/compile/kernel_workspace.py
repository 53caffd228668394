"""What a node's kernel allocates and frees inside itself, for the peak model.

:mod:`budget.compile.peak` adds this to the live bytes at the node's step: CPU
convolutions' workspace, measured or by rule, and the other kernels
:func:`budget.estimators.memory.workspace_bytes` knows. The rescheduler predicts the same
graphs hundreds of times and its clones make the same calls again, so each node's figure
and each distinct call's is kept (:class:`KernelMemo`).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import torch
import torch.fx as fx

from ..estimators.memory import tensor_bytes, workspace_bytes
from ..runtime.values import storage_of


@dataclass
class KernelMemo:
    """Workspace figures kept between predictions: by node and layout (shapes only, which
    no rewiring changes), and by what a call is read from (:func:`_call`)."""

    by_node: dict[tuple[fx.Node, bool | None], int] = field(default_factory=dict)
    by_call: dict[Hashable, int] = field(default_factory=dict)


def node_workspace(
    node: fx.Node,
    layout: bool | None,
    memo: KernelMemo | None = None,
    measure: bool = True,
    inductor: bool = False,
) -> int:
    """What ``node``'s kernel allocates and frees inside itself (CPU convolutions), run
    channels-last (``layout`` True), on its values' own layouts (None), or (False: a
    ``convolution_backward`` whose input Inductor lays out anew,
    :func:`budget.compile.layout.backward_layouts`) contiguous, the copy of its input
    made for the call counted with it. ``measure``: CPU kernels' workspace measured on
    this host, else by rule; ``inductor``: Inductor generates the code (its own prims are
    lowered into it, with no temporaries of their own)."""
    if node.op != "call_function":
        return 0
    if memo is not None and (node, layout) in memo.by_node:
        return memo.by_node[node, layout]
    args = list(fx.node.map_arg(node.args, lambda a: a.meta.get("val")))
    kwargs = dict(fx.node.map_arg(node.kwargs, lambda a: a.meta.get("val")))
    call = _call(node.target, (args, kwargs, node.meta.get("val")), layout, measure, inductor)
    if memo is not None and call is not None and call in memo.by_call:
        memo.by_node[node, layout] = memo.by_call[call]
        return memo.by_call[call]
    device = next((a.device.type for a in args if isinstance(a, torch.Tensor)), None)
    copy = 0
    if layout is False:  # on a contiguous copy of its input, made for the call
        args = [_contiguous(a) for a in args]
        copy = tensor_bytes(args[1]) if isinstance(args[1], torch.Tensor) else 0
    out = copy + workspace_bytes(
        node.target,
        args,
        node.meta.get("val"),
        channels_last=layout or None,
        device=device,
        measure=measure,
        inductor=inductor,
        kwargs=kwargs,
    )
    if memo is not None:
        memo.by_node[node, layout] = out
        if call is not None:
            memo.by_call[call] = out
    return out


def _call(target: object, values: object, *flags: object) -> Hashable | None:
    """What a call's workspace is read from: its op, its values' metadata (sizes, strides,
    offset, dtype, device, storage bytes; which of them share a storage) and ``flags``;
    None where one is not hashable (a symbolic size)."""
    storages: dict[int, int] = {}

    def frozen(x: object) -> Hashable:
        if isinstance(x, torch.Tensor):
            s = storage_of(x)
            shared = None if s is None else storages.setdefault(s[0], len(storages))
            meta = (x.shape, x.stride(), x.storage_offset(), x.dtype, x.device)
            return ("tensor", *map(tuple, meta[:2]), *meta[2:], s and s[1], shared)
        if isinstance(x, (list, tuple)):
            return (type(x).__name__, *map(frozen, x))
        if isinstance(x, dict):
            return ("dict", *((k, frozen(v)) for k, v in x.items()))
        return x  # type: ignore[return-value]

    key = (target, frozen(values), flags)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _contiguous(val: object) -> object:
    """A meta tensor of ``val``'s shape and dtype, contiguous (``val`` where no tensor)."""
    if not isinstance(val, torch.Tensor):
        return val
    return torch.empty(val.shape, dtype=val.dtype, device="meta")
