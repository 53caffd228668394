"""Eager offload, running side: saved-tensor hooks around the model's forward that move a
plan's offloaded values to host memory and back.

:class:`OffloadHooks` wraps the model's forward in ``torch.autograd.graph.saved_tensors_hooks``
(as ``torch.distributed.algorithms._checkpoint.checkpoint_wrapper.offload_wrapper`` does,
but for the plan's values only). The k-th tensor the hooks are given in a forward is
checked against the plan's k-th :class:`~budget.eager.plan.SaveChoice` (shape and dtype;
another tensor, or one save too many or too few, raises
:class:`~budget.errors.PlanMismatchError`: a plan is never applied to saves it was not made
for). An offloaded value is copied once however often it is saved:

- on CUDA into pinned host memory on a side stream that waits for the compute stream; it
  is copied back on the side stream into a tensor the compute stream made, and the compute
  stream waits for that copy only where the backward reads it. Reading one offloaded value
  starts the reload of the one offloaded before it (the backward reads values in about the
  reverse order), so reloads run ahead of their use;
- on fake tensors (the peak prediction, :mod:`budget.eager.peak`) nothing is copied; a
  tensor of the same layout is made at the reload;
- on the host CPU (where offload frees nothing; plans made for a GPU, and tests) the value
  is copied to another CPU tensor and that is what the backward reads.

Every block is freed in the compute stream's order, never through ``record_stream``: the
caching allocator holds a block another stream used until it sees that use finish, which
the host, running ahead of the device, reaches late, so what the step holds would depend
on timing. The hooks keep each offloaded value's device tensor until the next offloaded
value's save (or the forward's end), where the compute stream waits for its copy out and
lets it go: the copy runs beside the forward's compute in between, and the device memory
held is the same on every run and on fake tensors, which the peak prediction runs through
this same code.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..errors import PlanMismatchError
from ..runtime import _torch_private as T
from .plan import SaveChoice


class OffloadHooks:
    """The plan's offload for one model: ``run(forward, *args, **kwargs)`` runs a forward
    under the hooks. ``offloads`` counts the values copied to host memory (all forwards)."""

    def __init__(self, saves: Sequence[SaveChoice]) -> None:
        by_value: dict[str, bool] = {}
        for s in saves:
            if by_value.setdefault(s.value, s.offload) != s.offload:
                raise ValueError(
                    f"the plan saves {s.value!r} more than once, offloaded at one save and not "
                    "at another: a value is offloaded at all its saves or at none"
                )
        self.saves = tuple(saves)
        self.offloads = 0
        self._streams: dict[torch.device, Any] = {}

    def run(self, forward: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        step = _Forward(self)
        try:
            with torch.autograd.graph.saved_tensors_hooks(step.pack, step.unpack):
                out = forward(*args, **kwargs)
        finally:
            step.release()
        if step.index != len(self.saves):
            raise PlanMismatchError(
                f"budget.apply: the model's forward saved {step.index} tensors outside "
                f"checkpointed modules, but its plan has {len(self.saves)}: the forward is "
                "not the one that was planned; plan it again with budget.apply"
            )
        return out

    def stream(self, device: torch.device) -> Any:
        """The side stream offload copies run on (one per device)."""
        if device not in self._streams:
            self._streams[device] = torch.cuda.Stream(device)
        return self._streams[device]


class _Forward:
    """The hooks of one forward: counts its saves and holds its offloaded values."""

    def __init__(self, hooks: OffloadHooks) -> None:
        self.hooks = hooks
        self.index = 0
        self.moved: dict[str, weakref.ref[_Moved]] = {}
        self.order: list[weakref.ref[_Moved]] = []  # offloaded values, in offload order
        self.held: tuple[_Moved, torch.Tensor] | None = None  # the last one, until its copy

    def release(self) -> None:
        """Let go of the last offloaded value's device tensor once its copy out is done (in
        the compute stream's order)."""
        if self.held is not None:
            moved, _ = self.held
            if moved.copied is not None:
                torch.cuda.current_stream(moved.device).wait_event(moved.copied)
            self.held = None

    def pack(self, t: torch.Tensor) -> Any:
        k = self.index
        self.index += 1
        saves = self.hooks.saves
        if k >= len(saves) or list(t.shape) != saves[k].shape or str(t.dtype) != saves[k].dtype:
            planned = (
                f"{saves[k].value} ({saves[k].dtype}{saves[k].shape})"
                if k < len(saves)
                else f"the end of its saves ({len(saves)})"
            )
            raise PlanMismatchError(
                f"budget.apply: the model's forward saved a {t.dtype}{list(t.shape)} tensor "
                f"as save {k}, but its plan has {planned} there: the forward is not the one "
                "that was planned; plan it again with budget.apply"
            )
        if not saves[k].offload:
            return t
        ref = self.moved.get(saves[k].value)
        moved = ref() if ref is not None else None
        if moved is None:
            self.release()
            moved = _Moved(self, len(self.order), t)
            self.held = (moved, t)
            self.moved[saves[k].value] = weakref.ref(moved)
            self.order.append(self.moved[saves[k].value])
            self.hooks.offloads += 1
        return moved

    def unpack(self, packed: Any) -> torch.Tensor:
        if not isinstance(packed, _Moved):
            return packed
        if packed.position > 0:  # reload the value offloaded before it, ahead of its use
            before = self.order[packed.position - 1]()
            if before is not None:
                before.load()
        return packed.tensor()


class _Moved:
    """One offloaded value: its host copy, and its device copy once reloaded."""

    def __init__(self, owner: _Forward, position: int, t: torch.Tensor) -> None:
        self.owner = owner  # keeps the forward's offload order alive for the reloads
        self.position = position
        self.device = t.device
        self.layout = (t.size(), t.stride(), t.dtype)
        self.fake = isinstance(t, T.FakeTensor)
        self.loaded: torch.Tensor | None = None
        self.ready: Any = None  # CUDA: the event of the reload
        self.host: torch.Tensor | None = None
        self.copied: Any = None  # CUDA: the event of the copy out
        if self.fake:
            return
        if self.device.type != "cuda":
            self.host = t.detach().clone()
            return
        stream = owner.hooks.stream(self.device)
        self.host = torch.empty(t.size(), dtype=t.dtype, pin_memory=True)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            self.host.copy_(t, non_blocking=True)
            self.copied = stream.record_event()

    def load(self) -> None:
        """Start the copy back to the device (once)."""
        if self.loaded is not None:
            return
        size, stride, dtype = self.layout
        if self.fake:
            self.loaded = torch.empty_strided(size, stride, dtype=dtype, device=self.device)
        elif self.device.type != "cuda":
            self.loaded = self.host
        else:
            # Made on the compute stream, which frees it in its own order once the backward
            # is done with it (module docstring).
            compute = torch.cuda.current_stream(self.device)
            loaded = torch.empty_strided(size, stride, dtype=dtype, device=self.device)
            stream = self.owner.hooks.stream(self.device)
            stream.wait_stream(compute)  # the block may be one compute freed but still reads
            stream.wait_event(self.copied)
            with torch.cuda.stream(stream):
                loaded.copy_(self.host, non_blocking=True)
                self.ready = stream.record_event()
            self.loaded = loaded

    def tensor(self) -> torch.Tensor:
        """The device copy, for the backward to read (on CUDA, once the copy is done)."""
        self.load()
        assert self.loaded is not None
        if self.ready is not None:
            torch.cuda.current_stream(self.device).wait_event(self.ready)
        return self.loaded

    def __del__(self) -> None:
        # A reload the backward never read (a partial backward) may still be writing its
        # block: the compute stream, which may reuse the block once it is freed, waits.
        if self.ready is not None:
            with contextlib.suppress(Exception):  # at interpreter exit CUDA may be gone
                torch.cuda.current_stream(self.device).wait_event(self.ready)
