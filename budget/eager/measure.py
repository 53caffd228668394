"""What an eager step keeps after its forward: the memory an eager plan is about.

Checkpointing keeps tensors that autograd's saved-tensor hooks never see (the inputs of a
checkpointed call, its RNG state, the values the selective policy caches), so the
saved-tensors count of :func:`budget.runtime.measure.saved_bytes` does not apply to it.
:func:`retained_bytes` measures allocations instead: the bytes allocated during the
forward and still alive when it returns, less the storages of what it returns (the loss).
On CPU from torch.profiler's memory events (every allocation and free); on CUDA from
the caching allocator's requested bytes (``torch.cuda.memory_stats``). Nothing else may run meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..runtime._torch_private import memory_events, tree_leaves
from ..runtime.collector import gc_paused
from ..runtime.measure import backward_flops, cuda_memory_stat, device_of


@dataclass
class Retained:
    output: Any
    retained_bytes: int  # alive after the forward, outputs excluded
    backward_flops: int | None = None


def _output_bytes(out: Any) -> int:
    seen: dict[int, int] = {}
    for t in tree_leaves(out):
        if isinstance(t, torch.Tensor):
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def retained_bytes(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Retained:
    """Run ``fn(*args, **kwargs)`` (a forward) and count the bytes it leaves allocated."""
    device = device_of(args, kwargs)
    if device.type == "cuda":  # bytes requested: the caching allocator's rounding aside
        stat = "requested_bytes.all.current"
        with gc_paused():
            before = cuda_memory_stat(device, stat)
            out = fn(*args, **kwargs)
            net = cuda_memory_stat(device, stat) - before
    elif device.type == "cpu":
        from torch.profiler import ProfilerActivity, profile

        with (
            gc_paused(),
            profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof,
        ):
            out = fn(*args, **kwargs)
        net = sum(nbytes for _, nbytes in memory_events(prof))
    else:
        raise ValueError(f"retained_bytes measures CPU and CUDA steps; got {device.type}")
    return Retained(output=out, retained_bytes=int(net - _output_bytes(out)))


def measure_eager(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Retained:
    """Bytes the forward ``fn(*args, **kwargs)`` keeps, then the FLOPs of its backward
    (its output, or the output's first tensor, is the loss)."""
    m = retained_bytes(fn, *args, **kwargs)
    out = m.output
    loss = out if isinstance(out, torch.Tensor) else tree_leaves(out)[0]
    m.backward_flops = backward_flops(loss)
    return m
