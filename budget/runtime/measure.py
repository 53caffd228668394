"""Measure what a plan really does, on any device (DESIGN.md, "Measuring").

- saved activation memory: the distinct new storages autograd saves during a forward,
  seen through ``torch.autograd.graph.saved_tensors_hooks`` (storages of the inputs and
  of ``exclude``, e.g. parameters, are not new and are not counted);
- peak memory: the largest sum of live allocations during one warmed-up step (forward
  and backward), above what was allocated before it: on CPU from torch.profiler's memory
  events (every allocation and free, Inductor's own buffers included), on CUDA from
  ``torch.cuda.max_memory_allocated``. Never under a TorchDispatchMode: dynamo would skip
  the compiled frame and run it eagerly, silently;
- recompute cost: FLOPs of ``backward()`` under ``FlopCounterMode``. torch's counter gives
  some real work 0 FLOPs (CPU flash attention, forward and backward; normalisations; the
  embedding backward); by default we fill those gaps with the estimators' own table
  (``budget.runtime.flop_gaps.flop_gaps()``), so measured and estimated FLOPs agree and
  recomputing attention is never free.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from ._torch_private import _profiler_enabled, memory_events, tree_leaves
from .collector import gc_paused
from .flop_gaps import flop_gaps


def _key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


@dataclass
class Measured:
    output: Any
    saved_bytes: int
    backward_flops: int | None = None


def saved_bytes(
    fn: Callable[..., Any],
    *args: Any,
    exclude: Iterable[torch.Tensor] = (),
    on: torch.device | None = None,
    **kwargs: Any,
) -> Measured:
    """Run ``fn`` and count the bytes of new storages saved for backward.

    Without ``exclude``, a leaf that requires grad is taken for a parameter and not
    counted. With it, only the storages of ``exclude`` and of the arguments are left out:
    a compiled step hands autograd some of its new values as leaves that require grad
    (the bf16 copies of weights autocast makes), which are new memory all the same.
    ``on``: count only storages on that device (an offload plan's host copies are not);
    ``cuda`` takes in the current CUDA device, as tensors name it (``cuda:0``)."""
    exclude = list(exclude)
    existing = {_key(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
    existing |= {_key(t) for t in exclude}
    leaves_are_parameters = not exclude
    storages: dict[int, int] = {}
    if on is not None and on.type == "cuda" and on.index is None:
        on = torch.device("cuda", torch.cuda.current_device())

    def pack(t: torch.Tensor) -> torch.Tensor:
        k = _key(t)
        parameter = leaves_are_parameters and t.is_leaf and t.requires_grad
        if k not in existing and not parameter and (on is None or t.device == on):
            storages[k] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args, **kwargs)
    return Measured(output=out, saved_bytes=sum(storages.values()))


def backward_flops(loss: torch.Tensor, *, fill_gaps: bool = True) -> int:
    """FLOPs counted by torch's FlopCounterMode during ``loss.backward()``.

    ``fill_gaps=False`` gives torch's raw count, without any of ``flop_gaps()``."""
    mapping = flop_gaps() if fill_gaps else {}
    with FlopCounterMode(display=False, custom_mapping=mapping) as mode:
        loss.backward()
    return int(mode.get_total_flops())


def measure_step(
    fn: Callable[..., Any],
    *args: Any,
    exclude: Iterable[torch.Tensor] = (),
    fill_gaps: bool = True,
    **kwargs: Any,
) -> Measured:
    """Saved bytes of the forward and FLOPs of the backward of a scalar-loss step."""
    m = saved_bytes(fn, *args, exclude=exclude, **kwargs)
    loss = m.output if isinstance(m.output, torch.Tensor) else tree_leaves(m.output)[0]
    m.backward_flops = backward_flops(loss, fill_gaps=fill_gaps)
    return m


def _backprop(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> None:
    out = fn(*args, **kwargs)
    loss = out if isinstance(out, torch.Tensor) else tree_leaves(out)[0]
    loss.backward()


def device_of(args: tuple, kwargs: dict[str, Any]) -> torch.device:
    """The device of a step's first tensor argument (CPU when it has none)."""
    found = [t.device for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    return found[0] if found else torch.device("cpu")


def _quiet_kineto() -> None:
    """Kineto (torch.profiler's library) writes two lines to stderr for every profiled
    run ("USDT: ... profiler_start"): planning a convnet profiles each convolution once
    (:mod:`budget.estimators.conv_workspace`), dozens of them. Read when kineto starts;
    a value the user set is kept."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "99")


def profiler_busy() -> bool:
    """Whether a torch.profiler session is recording: measuring a kernel's workspace (a
    profiler of its own) inside it would end the user's session, so nothing is measured;
    the callers price the call as unmeasured and keep nothing of it."""
    return bool(_profiler_enabled())


def measure_workspace(fn: Callable[[], Any]) -> int:
    """Bytes a CPU call allocates and frees inside itself: the peak of torch.profiler's
    running sum of allocations during ``fn()``, less the storages of what it returns (a
    tensor or a tuple of tensors and Nones). ``fn`` runs once first, unmeasured (caches,
    oneDNN's primitives). What ``budget.estimators.memory.workspace_bytes`` estimates."""
    from torch.profiler import ProfilerActivity, profile

    _quiet_kineto()
    fn()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
    live = peak = 0
    for _, nbytes in sorted(memory_events(prof), key=lambda e: e[0]):
        live += nbytes
        peak = max(peak, live)
    outs = out if isinstance(out, tuple) else (out,)
    return peak - sum(t.untyped_storage().nbytes() for t in outs if t is not None)


def cuda_memory_stat(device: torch.device, stat: str) -> int:
    """One counter of the CUDA caching allocator (``torch.cuda.memory_stats``), read once
    the device is idle and the allocator has taken back every block it was waiting on.

    A tensor freed while another stream still used it (``record_stream``: offload and
    reload copies on a side stream) stays counted in ``requested_bytes`` until the
    allocator next processes its events, which it does at its next allocation. Read
    without that, a step's baseline carries the last step's pending blocks, and the
    step's retained bytes and peak come out short by them. One small allocation after
    the synchronize settles it.
    """
    torch.cuda.synchronize(device)
    torch.empty(1, device=device)  # the allocator processes finished events at a malloc
    return int(torch.cuda.memory_stats(device).get(stat, 0))


def measure_peak(
    fn: Callable[..., Any], *args: Any, warmup: int = 1, requested: bool = False, **kwargs: Any
) -> int:
    """Peak bytes of one training step, ``fn(*args, **kwargs)`` then ``backward()`` of its
    loss (the output, or its first tensor), above what was allocated before the step.

    ``warmup`` steps run first and are not measured (compilation, the first ``.grad``
    allocations). CPU: the running sum of torch.profiler's memory events; CUDA:
    ``max_memory_allocated`` minus ``memory_allocated`` before the step, the caching
    allocator's blocks (each size rounded up to 512 bytes, and a cached block reused
    whole when what is left of it would be small). ``requested=True`` counts on CUDA the
    bytes asked for instead (``requested_bytes`` of ``torch.cuda.memory_stats``): what
    the peak models predict, the rounding aside. On CPU both are the same.
    """
    for _ in range(warmup):
        _backprop(fn, args, kwargs)
    device = device_of(args, kwargs)
    if device.type == "cuda":
        stat = "requested_bytes.all" if requested else "allocated_bytes.all"
        with gc_paused():  # a collection mid-step would free garbage counted before it
            before = cuda_memory_stat(device, f"{stat}.current")
            torch.cuda.reset_peak_memory_stats(device)
            _backprop(fn, args, kwargs)
            return cuda_memory_stat(device, f"{stat}.peak") - before
    if device.type != "cpu":
        raise ValueError(f"measure_peak measures CPU and CUDA steps; got {device.type}")
    from torch.profiler import ProfilerActivity, profile

    _quiet_kineto()
    with gc_paused(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        _backprop(fn, args, kwargs)
    # A stable sort on time alone: events of one instant keep the order they came in.
    events = sorted(memory_events(prof), key=lambda e: e[0])
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return int(peak)
