"""What a CUDA kernel allocates inside itself, measured on this GPU, for the peak models.

Some ATen kernels allocate through the caching allocator while they run and free before
they return, memory no graph value shows: the attention backwards (efficient attention's
fp32 accumulators and ``delta``, cuDNN's workspace), cuDNN convolutions' workspace. What
they take depends on the kernel a library picks for this GPU and these shapes, so it is
measured, not ruled: each distinct call (the op, its operands' sizes, strides and dtypes,
its other arguments) runs twice on zeros of those shapes on this GPU, and the second run's
peak of requested bytes, above what was allocated before it and less what it returns, is
the workspace (the first run builds cuDNN's plans, which persist). Results are kept in
memory for the process (a GPU is measured in milliseconds, and its allocator's state is
the process's). Measuring resets the allocator's peak statistics
(``torch.cuda.reset_peak_memory_stats``): it happens while a step is planned or
compiled, never inside a step.

Only ops named in :data:`MEASURED` are run, on zeros; no model code runs and no user
tensor is touched. Calls whose operands would take over :data:`MAX_OPERAND_BYTES`, or any
call where CUDA is not available (a CUDA graph planned from fake tensors on a CPU host),
count 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..runtime._torch_private import _disable_current_modes
from ..runtime.measure import cuda_memory_stat

# Ops whose kernels allocate inside themselves on CUDA, by name (overloads included).
MEASURED = frozenset(
    {
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_flash_attention_backward",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_efficient_attention_backward",
        "aten::_scaled_dot_product_cudnn_attention",
        "aten::_scaled_dot_product_cudnn_attention_backward",
        "aten::_flash_attention_forward",
        "aten::_flash_attention_backward",
        "aten::_efficient_attention_forward",
        "aten::_efficient_attention_backward",
        "aten::convolution",
        "aten::convolution_backward",
    }
)
MAX_OPERAND_BYTES = 2 * 2**30

_MEMORY: dict[str, int] = {}


def _describe(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return ("T", tuple(x.shape), tuple(x.stride()), str(x.dtype))
    if isinstance(x, (list, tuple)):
        return tuple(_describe(y) for y in x)
    return repr(x)


def _materialise(x: Any, device: torch.device) -> Any:
    if isinstance(x, torch.Tensor):
        t = torch.empty_strided(tuple(x.shape), tuple(x.stride()), dtype=x.dtype, device=device)
        return t.zero_() if t.numel() else t
    if isinstance(x, (list, tuple)):
        return type(x)(_materialise(y, device) for y in x)
    if isinstance(x, torch.device) and x.type in ("cuda", "meta"):
        return device
    return x


def _operand_bytes(args: Sequence[Any]) -> int:
    total = 0
    for a in args:
        if isinstance(a, torch.Tensor):
            total += a.numel() * a.element_size()
        elif isinstance(a, (list, tuple)):
            total += _operand_bytes(a)
    return total


def _storages(out: Any) -> int:
    seen: dict[int, int] = {}
    for t in out if isinstance(out, (list, tuple)) else (out,):
        if isinstance(t, torch.Tensor) and t.device.type == "cuda":
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def _run(func: Any, args: Sequence[Any], kwargs: dict[str, Any], device: torch.device) -> int:
    """The measurement, outside every dispatch mode: the peak models call it from inside
    theirs (fake tensors, the compiled peak's meta run), which must neither see these
    real tensors nor count them."""
    with _disable_current_modes(), torch.no_grad():
        return _measure(func, args, kwargs, device)


def _measure(func: Any, args: Sequence[Any], kwargs: dict[str, Any], device: torch.device) -> int:
    stat = "requested_bytes.all"
    real = _materialise(list(args), device)
    real_kwargs = {k: _materialise(v, device) for k, v in kwargs.items()}
    func(*real, **real_kwargs)  # cuDNN builds and caches its plan
    before = cuda_memory_stat(device, f"{stat}.current")
    torch.cuda.reset_peak_memory_stats(device)
    out = func(*real, **real_kwargs)
    peak = cuda_memory_stat(device, f"{stat}.peak")
    return max(int(peak - before - _storages(out)), 0)


def cuda_workspace_bytes(
    func: Any, args: Sequence[Any], kwargs: dict[str, Any] | None = None
) -> int:
    """The bytes ``func(*args)`` allocates inside itself on this GPU (0 for ops not in
    :data:`MEASURED`, where CUDA is not available, or for operands too large to run)."""
    name = getattr(func, "name", lambda: "")()
    if name.split(".")[0] not in MEASURED or not torch.cuda.is_available():
        return 0
    kwargs = kwargs or {}
    key = repr((name, _describe(list(args)), _describe(sorted(kwargs.items()))))
    if key not in _MEMORY:
        if _operand_bytes(args) > MAX_OPERAND_BYTES:
            return 0
        device = torch.device("cuda", torch.cuda.current_device())
        try:
            _MEMORY[key] = _run(func, args, kwargs, device)
        except (RuntimeError, TypeError, ValueError):  # a call this GPU does not run: unknown
            _MEMORY[key] = 0
    return _MEMORY[key]
