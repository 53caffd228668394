"""CPU convolution workspace measured on this host, for the peak models.

A CPU convolution allocates inside its kernel and frees before it returns: oneDNN's
blocked copies of its operands, and scratch per thread. How much depends on the algorithm
oneDNN picks, and it picks by CPU: the rule in :func:`budget.estimators.memory.
workspace_bytes`, fitted on two machines, is 2 to 8x over on a third (a ResNet's
small-image backward path, taken on one CPU and not on another) and can fall short where
it was not fitted. So each distinct convolution of a graph is measured instead, once per
host:

- the call (forward or backward, its shapes, its operands' strides, the convolution's
  strides, padding and groups, dtype, bias, the outputs a backward makes, and the layout
  it runs in: Inductor runs convolutions channels-last on CPU where the graph's values
  say otherwise) runs on zeros of those shapes and strides, once unmeasured (oneDNN
  builds its primitive), then ``RUNS`` times under torch.profiler
  (:func:`budget.runtime.measure.measure_workspace`); the estimate is the largest run
  plus the spread of the runs (largest less smallest). On the hosts measured the runs
  agree to the byte (the bench convnet's 24 distinct calls, 8 runs each, on the Zen 3
  EPYC), so the estimate is the workspace itself; the fixed 4 KiB margin it replaces
  priced the convnet's b=0.5 plan over a peak target its step meets;
- results are kept in memory and on disk beside the device figures
  (``$BUDGET_CACHE_DIR``, keyed by CPU model, torch version and thread count): a graph's
  convolutions are measured the first time any plan on this host meets them (about 0.1 s
  a call), then read;
- a call whose operands would take over 256 MiB is not run (nor a 1-d or 3-d one said to
  run channels-last, which only 2-d ones do): the rule covers it; so does
  ``budget.config.conv_workspace = "rule"``;
- nor is a call oneDNN gets wrong on this CPU (:func:`_broken_here`): on AVX2-only CPUs the
  backward of a strided 1x1 convolution over channels-last input with fewer than 8 input
  channels a group writes past its workspace (uxlfoundation/oneDNN#6035): the heap is
  corrupted with one thread, the call hangs or gives wrong weight gradients with more.

No model code runs and no user tensor is touched: only ``aten.convolution`` and its
backward on zeros of the graph's shapes.
"""

from __future__ import annotations

import json
import math
import platform
from collections.abc import Sequence
from typing import Any

import torch

from ..runtime.measure import profiler_busy
from ..runtime.values import hint, shape
from .devices import _cache_file, cpu_model, write_cache

aten = torch.ops.aten

# profiled runs of each call; the estimate is the largest plus their spread
RUNS = 3
# the cache file's format: 2 since the fixed 4 KiB margin gave way to the runs' spread
FORMAT = 2
# operands larger than this are not materialised to be measured
MAX_OPERAND_BYTES = 256 * 2**20

_MEMORY: dict[str, dict[str, int]] = {}


def _label() -> str:
    return f"{cpu_model()}|torch {torch.__version__}|{torch.get_num_threads()} threads"


def known_workspace() -> dict[str, int]:
    label = _label()
    if label not in _MEMORY:
        table: dict[str, int] = {}
        path = _cache_file(label, "conv-workspace")
        if path is not None:
            try:
                data = json.loads(path.read_text())
                if data.get("label") == label and data.get("format") == FORMAT:
                    table = {str(k): int(v) for k, v in data["workspace"].items()}
            except (OSError, ValueError, TypeError, KeyError, AttributeError):
                table = {}  # missing or corrupt: measure again
        _MEMORY[label] = table
    return _MEMORY[label]


def store_workspace(key: str, value: int) -> None:
    label = _label()
    table = known_workspace()
    table[key] = value
    write_cache(
        _cache_file(label, "conv-workspace"), {"label": label, "format": FORMAT, "workspace": table}
    )


def _ints(value: Any) -> list[int]:
    return [int(v) for v in value]


def _signature(forward: bool, args: Sequence[Any], channels_last: bool) -> dict[str, Any] | None:
    """What decides the workspace of a call, or None when it is not measured."""
    if forward:
        x, w, bias = args[0], args[1], args[2]
        rest = args[3:9]
        grad, bias_sizes, mask = None, None, None
    else:
        grad, x, w, bias_sizes = args[0], args[1], args[2], args[3]
        rest, mask = args[4:10], args[10]
        bias = None
    if not all(isinstance(t, torch.Tensor) for t in (x, w)) or len(shape(x)) < 3:
        return None
    if channels_last and len(shape(x)) != 4:
        return None  # Inductor's layout optimisation is for 2-d convolutions only
    stride, padding, dilation, transposed, output_padding, groups = rest
    sizes = [shape(x), shape(w)] + ([shape(grad)] if isinstance(grad, torch.Tensor) else [])
    item = x.dtype.itemsize
    if sum(item * math.prod(s) for s in sizes) > MAX_OPERAND_BYTES:
        return None
    operands = [x, w] + ([grad] if isinstance(grad, torch.Tensor) else [])
    strides = [_strides(t, size, channels_last) for t, size in zip(operands, sizes, strict=True)]
    sig = {
        "op": "forward" if forward else "backward",
        "x": sizes[0],
        "w": sizes[1],
        "grad": sizes[2] if len(sizes) > 2 else None,
        "strides": strides,
        "bias": bias is not None or (bias_sizes is not None and not forward),
        "stride": _ints(stride),
        "padding": _ints(padding),
        "dilation": _ints(dilation),
        "transposed": bool(transposed),
        "output_padding": _ints(output_padding),
        "groups": int(groups),
        "mask": [bool(m) for m in mask] if mask is not None else None,
        "dtype": str(x.dtype).removeprefix("torch."),
        "channels_last": bool(channels_last),
    }
    return None if _broken_here(sig) else sig


def _broken_here(sig: dict[str, Any]) -> bool:
    """Whether ``sig`` is a call oneDNN's AVX2 1x1 kernel mishandles on this CPU (module
    docstring): a backward making the weight's gradient, a 1x1 kernel with a stride over
    1, input laid out channels-last (its channel stride 1) with under 8 channels a group
    (the kernel's channel block), on a CPU that may be AVX2-only (:func:`_maybe_avx2_only`)."""
    if sig["op"] != "backward" or not (sig["mask"] and sig["mask"][1]):
        return False
    if list(sig["w"][2:]) != [1, 1] or max(sig["stride"]) <= 1 or sig["x"][1] == 1:
        return False
    channels_per_group = sig["x"][1] // sig["groups"]
    if sig["strides"][0][1] != 1 or channels_per_group >= 8:
        return False
    return _maybe_avx2_only()


def _maybe_avx2_only() -> bool:
    """Whether this CPU's widest vector unit may be AVX2: torch says AVX2, or says DEFAULT
    on an x86 CPU (``ATEN_CPU_CAPABILITY=default`` lowers what torch reports and uses, while
    oneDNN picks its kernels by the CPU itself)."""
    capability = torch.backends.cpu.get_cpu_capability()
    x86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
    return capability == "AVX2" or (capability == "DEFAULT" and x86)


def _strides(t: torch.Tensor, size: Sequence[int], channels_last: bool) -> list[int]:
    """The operand's own strides (a gradient reaching a convolution through a transpose is
    laid out otherwise than its input, and oneDNN copies it), or channels-last ones where
    the caller says the call runs channels-last and the graph's value is contiguous
    (Inductor's layout optimisation)."""
    if channels_last and t.is_contiguous():
        n, c, h, w = size
        return [h * w * c, 1, w * c, c]
    return [hint(st) for st in t.stride()]


def _run(sig: dict[str, Any]) -> int:
    dtype = getattr(torch, sig["dtype"])
    strides = iter(sig["strides"])

    def zeros(size: list[int]) -> torch.Tensor:
        stride = next(strides)  # may repeat elements (stride 0: an expanded gradient)
        extent = 1 + sum((n - 1) * st for n, st in zip(size, stride, strict=True))
        return torch.zeros(extent, dtype=dtype).as_strided(size, stride)

    x, w = zeros(sig["x"]), zeros(sig["w"])
    conv = (
        sig["stride"],
        sig["padding"],
        sig["dilation"],
        sig["transposed"],
        sig["output_padding"],
        sig["groups"],
    )
    # a transposed weight is (in, out / groups, ...)
    out_channels = sig["w"][1] * sig["groups"] if sig["transposed"] else sig["w"][0]
    if sig["op"] == "forward":
        bias = torch.zeros(out_channels, dtype=dtype) if sig["bias"] else None
        args: tuple = (x, w, bias, *conv)
        op = aten.convolution.default
    else:
        bias_sizes = [out_channels] if sig["bias"] else None
        args = (zeros(sig["grad"]), x, w, bias_sizes, *conv, sig["mask"])
        op = aten.convolution_backward.default
    with torch.no_grad():
        return measured_runs(lambda: op(*args))


def measured_runs(call: Any) -> int:
    """The workspace estimate of a CPU call: ``RUNS`` profiled runs (after one unmeasured,
    :func:`budget.runtime.measure.measure_workspace`), the largest plus their spread."""
    from ..runtime.measure import measure_workspace

    runs = [measure_workspace(call) for _ in range(RUNS)]
    return max(runs) + (max(runs) - min(runs))


def _measure(sig: dict[str, Any]) -> int:
    """Run outside the modes of the caller (a fake-tensor trace, a live-bytes counter):
    real zeros, on the CPU."""
    from ..runtime._torch_private import _disable_current_modes

    with _disable_current_modes():
        return _run(sig)


def measured_workspace_bytes(
    func: object, args: Sequence[Any], *, channels_last: bool
) -> int | None:
    """The workspace of a CPU convolution call (``aten.convolution`` or its backward),
    measured on this host (see the module's docstring), or None where it is not measured
    (operands over :data:`MAX_OPERAND_BYTES`, or the run failed)."""
    forward = func is aten.convolution.default
    if not forward and func is not aten.convolution_backward.default:
        return None
    sig = _signature(forward, args, channels_last)
    if sig is None:
        return None
    key = json.dumps(sig, sort_keys=True)
    table = known_workspace()
    if key not in table:
        if profiler_busy():  # the user's profiler is recording: the rule, nothing kept
            return None
        try:
            measured = _measure(sig)
        except (RuntimeError, ValueError, TypeError):
            return None  # a call oneDNN refuses on zeros: the rule covers it
        store_workspace(key, max(0, measured))
    return table[key]
