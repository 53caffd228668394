"""The backward's paths for real tensors, taken on fake ones: in-place work the real step
does that torch does out of place for fake tensors.

torch chooses in-place work in the backward only for plain tensors: a tensor with a Python
dispatch key, as every fake tensor has, is "subclass-like", and gets out-of-place work
instead, each a buffer the real step does not make. A fake run of the step would then
predict over the real peak wherever one falls at it (or, for one formula, under):

- **the engine's sums of gradients** (``torch/csrc/autograd/input_buffer.cpp``,
  ``accumulate``): where several gradients flow into one input of a node, the engine sums
  them as they arrive, in place into the first (``old.add_(new)``) where grad mode is off
  and that tensor is non-overlapping and dense, not a zero tensor, and held by nothing but
  the engine, storage included; out of place otherwise. A sum is told from a formula's
  additions by when it runs: between one node's post-hook and the next node's pre-hook
  (every node of the step's graph is hooked but the parameters' ``AccumulateGrad``, whose
  stealing of a gradient a hook would change). Whether only the engine holds the tensor is
  read from its reference counts, against those of a sum known to be made in place, probed
  once per process (:func:`exclusive_counts`).
- **backward formulas** (``FunctionsManual.cpp`` and ATen's composite backwards) that build
  their result in a buffer they made (``new_zeros(...).index_put_(...)`` for ``x[idx]``):
  ``IN_PLACE`` names, per node, the ops made in place, where their first operand was made
  inside the node (found op by op against the real backward under torch.profiler);
- **a full max, min or median's backward** (``evenly_distribute_backward``): on the CPU it
  fills zeros of the input's size where the input equals the result; for fake tensors it
  multiplies a mask, which peaks lower. The fake run takes the CPU's path (``EVENLY``).

A sum or formula inside a node not hooked (a reentrant checkpoint's inner backward) stays
out of place: over, never under. Formulas whose real path depends on values (``prod``,
``cumprod``: whether a zero is present) keep the fake path, also over.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import torch

from ..runtime import _torch_private as T

aten = torch.ops.aten
DEVICE = torch.ops.prim.device.default

_SCATTERS = ("MaxBackward0", "MinBackward0", "SortBackward0", "TopkBackward0")
_SCATTERS += ("KthvalueBackward0", "MedianBackward1", "NanmedianBackward1", "ModeBackward0")
# node name -> the functional ops its formula runs in place on a buffer it made, for real
# tensors (for fake ones out of place)
IN_PLACE: dict[str, tuple[str, ...]] = {
    "IndexBackward0": ("index_put",),  # x[idx], x[mask]
    "GatherBackward0": ("scatter_add",),  # gather, take_along_dim
    "IndexSelectBackward0": ("index_add",),  # index_select, repeat_interleave(tensor)
    "MaskedSelectBackward0": ("masked_scatter",),
    "TakeBackward0": ("put",),
    "TraceBackward0": ("index_fill",),
    "CummaxBackward0": ("scatter_add",),
    "CumminBackward0": ("scatter_add",),
    **dict.fromkeys(_SCATTERS, ("scatter",)),  # values selected along a dimension
    "Atan2Backward0": ("masked_fill",),
    "ClampBackward0": ("logical_and", "logical_or"),  # tensor bounds
    "BinaryCrossEntropyWithLogitsBackward0": ("sub", "mul"),
    "BinaryCrossEntropyBackward0": ("mul",),
}

# full reductions whose CPU backward (``evenly_distribute_backward``) fills zeros of the
# input's size where the input equals the result; for fake tensors (and on CUDA) it
# multiplies a mask instead: :class:`_Evenly` runs the CPU's way
EVENLY = ("MaxBackward1", "MinBackward1", "MedianBackward0", "NanmedianBackward0")


class BackwardPaths(T.TorchDispatchMode):  # type: ignore[misc,name-defined]
    """Entered above every other dispatch mode of a fake run (it is asked first, as the
    backward's call reaches Python): the engine's sums and the formulas' work that the real
    step does in place are done in place. :meth:`hook` the step's graph before its
    backward runs."""

    def __init__(self, counts: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.counts = counts
        self.between = False  # after a node's post-hook, before the next node's pre-hook
        self.node = ""  # the node running, "" where none
        self.made: dict[int, weakref.ref] = {}  # id -> tensor made inside the node
        self.evenly: _Evenly | None = None  # the CPU's path of an EVENLY node running

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
                node.register_prehook(functools.partial(self._enter, node.name()))
                node.register_hook(self._leave)

    def _enter(self, name: str, grad_outputs: Any) -> None:
        self.between, self.node, self.made = False, name, {}
        self.evenly = _Evenly() if name in EVENLY else None

    def _leave(self, grad_inputs: Any, grad_outputs: Any) -> None:
        self.between, self.node, self.made, self.evenly = True, "", {}, None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func is DEVICE and _fake_device(args):  # most calls of a fake run: answered here
            return args[0].fake_device
        kwargs = kwargs or {}
        if torch.is_grad_enabled():  # the forward, a recomputation: as it is
            return func(*args, **kwargs)
        if func is aten.add.Tensor and self.between and not kwargs and self._sum(*args):
            return args[0].add_(args[1])
        if self.evenly is not None:
            return self.evenly(func, args, kwargs)
        in_place = self._formula(func, args)
        out = (in_place or func)(*args, **kwargs)
        if self.node in IN_PLACE:  # its buffers, for its formula
            tensors = (t for t in T.tree_leaves(out) if isinstance(t, torch.Tensor))
            self.made.update((id(t), weakref.ref(t)) for t in tensors)
        return out

    def _sum(self, old: Any, new: Any = None) -> bool:
        if not (isinstance(new, torch.Tensor) and _writable(old)):
            return False
        if (old.shape, old.dtype, old.device) != (new.shape, new.dtype, new.device):
            return False
        counts = self.counts if self.counts is not None else exclusive_counts()
        return T.reference_counts(old) == counts

    def _made(self, t: Any) -> bool:
        ref = self.made.get(id(t))
        return ref is not None and ref() is t

    def _formula(self, func: Any, args: tuple) -> Any:
        """The in-place twin of ``func`` where this node's formula runs it so on its own
        buffer (``args[0]``), else None."""
        name = func.overloadpacket.__name__ if isinstance(func, T.OpOverload) else ""
        if name not in IN_PLACE.get(self.node, ()) or not args or not self._made(args[0]):
            return None
        if not (_writable(args[0]) and _fits(name, args)):
            return None
        return getattr(getattr(aten, name + "_", None), func._overloadname, None)


_ELEMENTWISE = ("sub", "mul", "masked_fill", "logical_and", "logical_or")


class _Evenly:
    """The CPU's path of ``evenly_distribute_backward`` run on fake tensors, call by call of
    the path torch takes for them: ``isnan(input)`` and its ``logical_and`` with the
    result's are the input itself (the CPU makes neither); the mask ``input == value`` is
    made; before its ``sum``, zeros of the input's size; and the final ``mask * share``
    fills them where the mask holds (``masked_fill_``), as the CPU does."""

    def __init__(self) -> None:
        self.zeros: torch.Tensor | None = None

    def __call__(self, func: Any, args: tuple, kwargs: dict) -> Any:
        first = args[0] if args else None
        if not isinstance(first, torch.Tensor) or first.device.type != "cpu":
            return func(*args, **kwargs)
        if func is aten.isnan.default and first.dim() > 0:
            return first.view(first.shape)
        if func is aten.logical_and.default and first.dtype != torch.bool:
            return first.view(first.shape)
        if func is aten.eq.Tensor:  # the mask, then the zeros
            mask = func(*args, **kwargs)
            self.zeros = torch.zeros(first.shape, dtype=first.dtype, device=first.device)
            return mask
        if func is aten.mul.Tensor and self.zeros is not None and first.dtype == torch.bool:
            zeros, self.zeros = self.zeros, None
            return zeros.masked_fill_(first, args[1])
        return func(*args, **kwargs)


def _fits(name: str, args: tuple) -> bool:
    """Whether the op's result has its first operand's shape and dtype (so the in-place
    twin writes it there): always for the index ops; for elementwise ones, where the other
    operands broadcast to it and the result type is its own."""
    if name not in _ELEMENTWISE:
        return True
    t = args[0]
    shapes = [a.shape for a in args[1:] if isinstance(a, torch.Tensor)]
    if torch.broadcast_shapes(t.shape, *shapes) != t.shape:
        return False
    if name.startswith("logical"):
        return t.dtype == torch.bool
    return name == "masked_fill" or torch.result_type(*args[:2]) == t.dtype


def _writable(t: Any) -> bool:
    """A plain tensor in place work may write: strided, non-overlapping and dense, not a
    zero tensor."""
    return (
        isinstance(t, torch.Tensor)
        and t.layout == torch.strided
        and not t._is_zerotensor()
        and not t.is_nested
        and _dense(t)
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


class _Probe(BackwardPaths):
    seen: tuple[int, int] | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func is aten.add.Tensor and self.between and self.seen is None:
            self.seen = T.reference_counts(args[0])
        return func(*args, **(kwargs or {}))


def _fake_device(args: tuple) -> bool:
    """Whether ``prim.device`` of ``args`` is a fake tensor's own device. C++ code asks a
    fake tensor its device through the dispatcher (the autograd engine, per gradient), so
    a fake run makes more of these calls than of every other op together; each would pass
    down every mode below to the fake mode, which answers ``fake_device`` outside its
    kernels' invocation (where it answers ``meta``). No mode below acts on it (torch's
    checkpointing ignores it: ``SAC_IGNORED_OPS``; budget's modes pass it on)."""
    return (
        len(args) == 1
        and isinstance(args[0], T.FakeTensor)
        and not args[0].fake_mode.in_kernel_invocation
    )
