"""The values of the rescheduler's clones (:mod:`budget.compile.schedule`): a clone is a
storage of its own, so its fake value is new, made as running its op would make it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import torch
import torch.fx as fx

from ..runtime import _torch_private as T
from ..runtime._torch_private import tree_map
from ..runtime.values import storage_of, tensors


def fresh_val(clone: fx.Node, original: fx.Node | None = None) -> object:
    """The clone's value as a new fake tensor of its own storage (a view of a cloned base
    shares the clone's), computed from its arguments' values under their fake mode; where
    ``original``'s outputs are of storages of their own (:func:`remade`), or each views one
    of its inputs' storages (:func:`viewed_again`), made from their metadata alone, the op
    not run."""
    if clone.target is operator.getitem:  # the very element of its input's value
        return operator.getitem(
            *(a.meta["val"] if isinstance(a, fx.Node) else a for a in clone.args)
        )
    made = None if original is None else remade(original)
    if made is None and original is not None:
        made = viewed_again(original, clone)
    if made is not None:
        return made
    args = tree_map(lambda a: a.meta["val"] if isinstance(a, fx.Node) else a, clone.args)
    kwargs = tree_map(lambda a: a.meta["val"] if isinstance(a, fx.Node) else a, clone.kwargs)
    mode = next(
        (t.fake_mode for t in tensors(clone.meta.get("val")) if hasattr(t, "fake_mode")), None
    )
    if mode is None:
        raise ValueError(f"{clone.name}: no fake tensor to recompute it on")
    with mode:
        return clone.target(*args, **kwargs)  # type: ignore[operator]


def remade(node: fx.Node) -> object | None:
    """``node``'s value with each tensor made again on a new storage of the same size, at
    the same offset, sizes and strides: what running its op again makes, where each output
    is a fake tensor of static sizes on a storage of its own (none of its inputs', not a
    view); else None (run the op). Making one this way costs a small fraction of running
    a fake op, and the rescheduler makes thousands."""
    val = node.meta.get("val")
    outs = tensors(val)
    held = {
        s[0]
        for a in node.all_input_nodes
        for t in tensors(a.meta.get("val"))
        if (s := storage_of(t))
    }
    raws = [s[0] for t in outs if (s := storage_of(t))]
    if not outs or len(raws) != len(outs) or len(set(raws)) < len(raws) or held & set(raws):
        return None
    for t in outs:
        if not _static_fake(t) or t._is_view() or type(t.untyped_storage().nbytes()) is not int:
            return None
    return _made_on(
        val, lambda t: torch.UntypedStorage(t.untyped_storage().nbytes(), device="meta")
    )


def viewed_again(original: fx.Node, clone: fx.Node) -> object | None:
    """``original``'s value made again for ``clone`` (a copy of it reading the clones of
    its inputs, or the inputs themselves), where each of its tensors is a fake tensor of
    static sizes on the storage of exactly one tensor of one input (a view op: ``view``,
    ``permute``, ``split``): the same offset, sizes and strides on the storage of that
    tensor of the clone's input, which is what running the op on it makes (a clone's
    input is laid out as its original's). Else None (run the op)."""
    val = original.meta.get("val")
    outs = tensors(val)
    olds, news = original.all_input_nodes, clone.all_input_nodes
    if not outs or len(olds) != len(news):
        return None
    bases: dict[int, list[torch.Tensor]] = {}  # raw storage -> the clone inputs' tensors on it
    for old, new in zip(olds, news, strict=True):
        was, now = tensors(old.meta.get("val")), tensors(new.meta.get("val"))
        if len(was) != len(now):
            return None
        for a, b in zip(was, now, strict=True):
            if (s := storage_of(a)) is not None:
                bases.setdefault(s[0], []).append(b)
    base_of: dict[int, torch.Tensor] = {}  # each output tensor (by id) -> its base's tensor
    for t in outs:
        s = storage_of(t)
        on = [] if s is None else bases.get(s[0], [])
        if not _static_fake(t) or len({storage_of(b) for b in on}) != 1:
            return None
        if not isinstance(on[0], T.FakeTensor):
            return None
        base_of[id(t)] = on[0]
    return _made_on(val, lambda t: base_of[id(t)].untyped_storage())


def _static_fake(t: torch.Tensor) -> bool:
    """A fake tensor of static sizes, strides and offset, not a constant, not requiring a
    gradient: one that can be made again from its metadata."""
    dims = (*t.shape, *t.stride(), t.storage_offset())
    return (
        isinstance(t, T.FakeTensor)
        and not t.requires_grad
        and t.constant is None
        and all(type(d) is int for d in dims)
    )


def _made_on(val: object, storage: Callable[[torch.Tensor], torch.UntypedStorage]) -> object:
    """``val`` with each tensor made again as a fake tensor at its offset, sizes and strides
    on ``storage(tensor)``, from metadata alone."""

    def again(t: torch.Tensor) -> torch.Tensor:
        meta = torch.empty(0, dtype=t.dtype, device="meta")
        meta.set_(storage(t), t.storage_offset(), t.shape, t.stride())
        return T.FakeTensor(t.fake_mode, meta, t.device)

    with T._disable_current_modes():  # meta tensors, made as such (not faked by a mode on)
        return tree_map(lambda x: again(x) if isinstance(x, torch.Tensor) else x, val)
