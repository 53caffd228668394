"""Eager offload, planning side: which saved values ``budget.apply`` can move to host
memory, and the saves its hooks will see (DESIGN.md, "Offload").

``budget.apply`` offloads with saved-tensor hooks around the model's forward
(:mod:`budget.eager.hooks`), as ``offload_wrapper`` composes with ``checkpoint_wrapper``:
those hooks see every tensor autograd saves outside checkpointed modules (inside one,
checkpointing's own hooks come first) and the positional tensor arguments of each
checkpointed call (checkpointing saves them through the hooks around it). A value can be
moved when every reference the step keeps to it goes through those hooks, so moving it
frees its device storage:

- an op's whole, contiguous output on the step's device that is not a view, a graph
  input or a constant;
- saved at least once through the hooks, and never by code outside the model's forward
  (a loss function's saves keep it), nor returned by the model (its caller holds it);
- not a tensor a checkpointed call keeps by reference (a keyword or nested argument), nor
  one its selective policy may cache (made in a checkpointed module before its last save).

:func:`expected_saves` lists the saves the hooks see, in order, for a set of checkpointed
regions; :func:`save_choices` turns it and a plan's offloaded values into the plan's
:class:`~budget.eager.plan.SaveChoice` list.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import torch
import torch.fx as fx

from ..runtime.values import storage_of
from .plan import SaveChoice
from .traced import Trace


def expected_saves(trace: Trace, checkpointed: Collection[int]) -> list[fx.Node]:
    """The values the hooks around the model's forward are given, in save order, with
    the regions ``checkpointed`` checkpointed."""
    ckpt = set(checkpointed)
    entries = sorted(
        (trace.regions[r].saves_at, trace.regions[r].start, r)
        for r in ckpt
        if trace.regions[r].in_model
    )
    out: list[fx.Node] = []
    j = 0
    for i, save in enumerate(trace.saves):
        while j < len(entries) and entries[j][0] <= i:
            out.extend(trace.regions[entries[j][2]].positional)
            j += 1
        if save.in_model and (save.region is None or save.region not in ckpt):
            out.append(save.value)
    for _, _, r in entries[j:]:
        out.extend(trace.regions[r].positional)
    return out


def movable(
    trace: Trace, checkpointed: Collection[int], nodes: Sequence[fx.Node | None]
) -> list[bool]:
    """Per problem node (``nodes``: the fx node behind each), whether offload may move it
    with the regions ``checkpointed`` checkpointed (module docstring)."""
    ckpt = set(checkpointed)
    through_hooks = set(expected_saves(trace, ckpt))
    kept: set[fx.Node] = set(trace.outputs)
    for save in trace.saves:
        if not save.in_model and (save.region is None or save.region not in ckpt):
            kept.add(save.value)
    for r in ckpt:
        region = trace.regions[r]
        positional = set(region.positional) if region.in_model else set()
        kept.update(a for a in region.args if a not in positional)
        for op in region.nodes:
            if region.last_save is not None and trace.order[op] < region.last_save:
                kept.update(trace.outputs_of(op))
    kept_storages = {st[0] for n in kept if (st := storage_of(n.meta.get("val"))) is not None}
    constants = set(trace.constants)
    return [
        n is not None
        and n in through_hooks
        and n.op == "call_function"
        and n not in constants
        and n not in kept
        and _whole(n.meta.get("val"), trace.device)
        and storage_of(n.meta.get("val"))[0] not in kept_storages  # type: ignore[index]
        for n in nodes
    ]


def _whole(val: object, device: torch.device) -> bool:
    """A contiguous tensor on ``device`` that is its storage, whole (not a view)."""
    if not isinstance(val, torch.Tensor) or val.device.type != device.type:
        return False
    st = storage_of(val)
    return (
        st is not None
        and not val._is_view()
        and val.is_contiguous()
        and val.storage_offset() == 0
        and st[1] == val.numel() * val.element_size()
    )


def save_choices(
    trace: Trace, checkpointed: Collection[int], offloaded: Collection[str]
) -> list[SaveChoice]:
    """The plan's saves around the model's forward, each offloaded when its value is."""
    away = set(offloaded)
    out = []
    for n in expected_saves(trace, checkpointed):
        val = n.meta.get("val")
        shape = list(val.shape) if isinstance(val, torch.Tensor) else []
        dtype = str(val.dtype) if isinstance(val, torch.Tensor) else ""
        out.append(SaveChoice(n.name, [int(d) for d in shape], dtype, n.name in away))
    return out
