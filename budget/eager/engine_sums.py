"""The autograd engine's sums of gradients, made in place on fake tensors where the real
step makes them so.

Where several gradients flow into one input of a backward node, the engine sums them as
they arrive (``torch/csrc/autograd/input_buffer.cpp``, ``accumulate``): in place into the
first (``old.add_(new)``) where grad mode is off and that tensor is a plain tensor,
non-overlapping and dense, that nothing but the engine holds, storage included; out of
place (``old + new``) otherwise. A tensor with a Python dispatch key, as every fake tensor
has, is never summed in place, so a fake run of the step makes a buffer of the gradient's
size at each such sum that the real step does not: the predicted peak is over wherever it
falls at one.

:class:`EngineSums` makes those sums in place on the fake run. It tells the engine's sums
from a backward formula's additions by when they run: between a node's post-hook and the
next node's pre-hook (hooks on every node of the step's graph but the parameters'
``AccumulateGrad``, whose stealing of a gradient a hook would change), never inside a
node. Whether only the engine holds the tensor is read from its reference counts, against
those of a sum known to be made in place, taken once per process on a probe of the same
shape of run (:func:`exclusive_counts`). A sum inside a node not hooked (a reentrant
checkpoint's inner backward) stays out of place: over, never under.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from ..runtime import _torch_private as T

aten = torch.ops.aten


class EngineSums(T.TorchDispatchMode):  # type: ignore[misc,name-defined]
    """Entered above every other dispatch mode of a fake run (it is asked first, as the
    engine's call reaches Python): the engine's sums of gradients that the real step makes
    in place are made in place. :meth:`hook` the step's graph before its backward runs."""

    def __init__(self, counts: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.between = False  # after a node's post-hook, before the next node's pre-hook
        self.counts = counts

    def hook(self, root: Any) -> None:
        """Hooks every node reachable from ``root`` (a ``grad_fn``) but ``AccumulateGrad``."""
        seen, todo = set(), [root]
        while todo:
            node = todo.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            todo.extend(n for n, _ in node.next_functions)
            if node.name() != "torch::autograd::AccumulateGrad":
                node.register_prehook(self._enter)
                node.register_hook(self._leave)

    def _enter(self, grad_outputs: Any) -> None:
        self.between = False

    def _leave(self, grad_inputs: Any, grad_outputs: Any) -> None:
        self.between = True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if func is aten.add.Tensor and self.between and not kwargs and self._in_place(*args):
            return args[0].add_(args[1])
        return func(*args, **kwargs)

    def _in_place(self, old: Any, new: Any = None) -> bool:
        if torch.is_grad_enabled() or not _plain_pair(old, new):
            return False
        counts = self.counts if self.counts is not None else exclusive_counts()
        return T.reference_counts(old) == counts


def _plain_pair(old: Any, new: Any) -> bool:
    return (
        isinstance(old, torch.Tensor)
        and isinstance(new, torch.Tensor)
        and old.shape == new.shape
        and old.dtype == new.dtype
        and old.device == new.device
        and old.layout == torch.strided
        and not old._is_zerotensor()
        and not old.is_nested
        and _dense(old)
    )


def _dense(t: torch.Tensor) -> bool:
    """Non-overlapping and dense: its elements fill its storage's extent once, in some order
    of its dimensions (torch's own test, size-1 dimensions aside)."""
    expected = 1
    for stride, size in sorted(
        (st, n) for n, st in zip(t.shape, t.stride(), strict=True) if n != 1
    ):
        if stride != expected:
            return False
        expected *= size
    return True


@functools.cache
def exclusive_counts() -> tuple[int, int]:
    """The reference counts a gradient only the engine holds has, seen from this mode: taken
    at the sum of two fresh gradients of one value, on fake tensors (``(a * 2 + a * 3)``:
    the second multiplication's gradient reaches ``a`` after the first's)."""
    probe = _Probe()
    with T._disable_current_modes(), T.FakeTensorMode():
        x = torch.empty(4, requires_grad=True)
        a = x * 1.0
        loss = (a * 2.0 + a * 3.0).sum()
        probe.hook(loss.grad_fn)
        with probe:
            loss.backward()
    if probe.seen is None:
        raise RuntimeError("the probe of the engine's gradient sums made no sum")
    return probe.seen


class _Probe(EngineSums):
    seen: tuple[int, int] | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func is aten.add.Tensor and self.between and self.seen is None:
            self.seen = T.reference_counts(args[0])
        return func(*args, **(kwargs or {}))
