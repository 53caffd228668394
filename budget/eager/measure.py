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

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from ..runtime._torch_private import memory_events, tree_leaves
from ..runtime.collector import gc_paused
from ..runtime.measure import backward_flops, cuda_memory_stat


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
    """Run ``fn(*args, **kwargs)`` (a forward) and count the bytes it leaves allocated.

    The device is that of the first tensor argument. A closure with none (``lambda:
    model(x)``) is measured both ways, CUDA's counter and the CPU profiler, and its
    output's device says which count is its own."""
    found = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    device = found[0].device if found else None
    if device is not None and device.type not in ("cpu", "cuda"):
        raise ValueError(f"retained_bytes measures CPU and CUDA steps; got {device.type}")
    cuda = device if device is not None and device.type == "cuda" else None
    if device is None and torch.cuda.is_available() and torch.cuda.is_initialized():
        cuda = torch.device("cuda", torch.cuda.current_device())
    with gc_paused(), _cpu_events(device is None or device.type == "cpu") as cpu:
        before = cuda_memory_stat(cuda, _REQUESTED) if cuda is not None else 0
        out = fn(*args, **kwargs)
        on_cuda = cuda is not None and (device is not None or _device_of_output(out) == "cuda")
        net = cuda_memory_stat(cuda, _REQUESTED) - before if on_cuda else 0
    if not on_cuda:
        net = sum(nbytes for _, nbytes in memory_events(cpu))
    return Retained(output=out, retained_bytes=int(net - _output_bytes(out)))


_REQUESTED = "requested_bytes.all.current"  # the caching allocator's rounding aside


def _device_of_output(out: Any) -> str:
    leaves = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
    return leaves[0].device.type if leaves else "cpu"


@contextmanager
def _cpu_events(wanted: bool) -> Iterator[Any]:
    """torch.profiler with memory events (every CPU allocation and free), when wanted."""
    if not wanted:
        yield None
        return
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        yield prof


def measure_eager(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Retained:
    """Bytes the forward ``fn(*args, **kwargs)`` keeps, then the FLOPs of its backward
    (its output, or the output's first tensor, is the loss)."""
    m = retained_bytes(fn, *args, **kwargs)
    out = m.output
    loss = out if isinstance(out, torch.Tensor) else tree_leaves(out)[0]
    m.backward_flops = backward_flops(loss)
    return m
