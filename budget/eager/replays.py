"""Autograd's view replays on fake tensors: op calls the real step never makes.

After an in-place op on a view (``nn.ReLU(inplace=True)`` on a ``Linear``'s 3-D output,
which is a view of its ``addmm``), autograd rebuilds the view's history. On a dense
tensor it does so with ``as_strided`` metadata, without an op call; on a tensor subclass
such as a fake tensor it runs the view's ops again on the base (the view's ``view_fn``),
within the in-place call, and the dispatcher sees them. The trace (on fake tensors) would
record calls that the real step does not make, and the selective-checkpoint policy,
which matches the plan's op calls one by one, would refuse the real step.

:class:`ViewReplays` recognises those calls from the op calls alone, with their outputs:
after an in-place op on a view that autograd records, the view ops that start from the
view's base and end at a tensor laid out as the view was. The trace leaves them out of
its op calls; in a fake run of a planned step (:func:`budget.eager.policy.fake_run`) it is
a dispatch mode beside checkpointing's, and the policy does not count them either.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.checkpoint import SAC_IGNORED_OPS

from ..runtime import _torch_private as T
from ..runtime.values import storage_of, written_args


def _layout(t: torch.Tensor) -> tuple[Any, ...]:
    """A tensor's storage and how it lays out on it (autograd hands the replay a tensor of
    the base's, not the base object itself)."""
    st = storage_of(t)
    return (st and st[0], tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype)


class ViewReplays(T.TorchDispatchMode):  # type: ignore[misc,name-defined]
    """Tells the op calls autograd makes to replay a view written in place (see above).

    Used as a dispatch mode or fed by hand (:meth:`is_replay` before a call, :meth:`note`
    after it). Its answer for a call is the same before and after the call has run, so a
    policy may ask it from either side of the mode."""

    def __init__(self) -> None:
        super().__init__()
        self._from: set[tuple] = set()  # layouts the replay's next call may start from
        self._goal: tuple[Any, ...] | None = None  # the layout the replay ends at
        self._last: tuple[Any, ...] | None = None  # the replay's last call so far

    def is_replay(self, func: Any, args: tuple) -> bool:
        """Whether the call about to run (or that just ran) is a step of a replay."""
        if not getattr(func, "is_view", False) or func in SAC_IGNORED_OPS or not args:
            return False
        if not isinstance(args[0], torch.Tensor):
            return False
        given = _layout(args[0])
        return given in self._from or (func, given) == self._last

    def note(self, func: Any, args: tuple, kwargs: dict, out: Any, replay: bool) -> None:
        """What a call that ran means for the calls after it (calls checkpointing ignores,
        such as ``prim.device``, mean nothing)."""
        if func in SAC_IGNORED_OPS:
            return
        if replay and isinstance(out, torch.Tensor):
            self._last = (func, _layout(args[0]))
            # a view of a view: the next call starts from here; else the view is made
            self._from = set() if _layout(out) == self._goal else {_layout(out)}
            return
        self._from, self._goal, self._last = set(), None, None
        if not torch.is_grad_enabled():
            return  # autograd records nothing, so it replays nothing
        tensors = [t for t in T.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if not any(t.requires_grad for t in tensors):
            return
        for w in written_args(func, args, kwargs):
            if w._base is not None:  # the replay starts from the view's base
                self._from, self._goal = {_layout(w._base)}, _layout(w)
                return

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        replay = self.is_replay(func, args)
        out = func(*args, **kwargs)
        self.note(func, args, kwargs, out, replay)
        return out
