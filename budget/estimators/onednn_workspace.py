"""CPU calls that allocate inside themselves: matmuls (oneDNN's, copies) and LSTM layers.

On the CPU, torch runs some ops through oneDNN, which takes memory while the call runs and
frees it before it returns: memory no graph value shows, at a moment a step may peak.

- matmuls in bfloat16 or float16: oneDNN packs the operands into blocked copies and takes
  scratch (an eager step under bf16 autocast peaks inside one). float32 matmuls (MKL)
  take none, unless an operand is laid out otherwise than BLAS reads it (neither its rows
  nor its columns contiguous: the stride-0 gradient of a ``sum`` loss), which the kernel
  copies first;
- LSTM layers (``aten.mkldnn_rnn_layer`` and its backward, what ``nn.LSTM`` runs on the
  CPU), in any dtype: the gates of every time step and copies of operands laid out
  otherwise than oneDNN's own (a ``batch_first`` input, a gradient expanded by ``sum``),
  about as large as the layer's output again in the backward.

As for convolutions (:mod:`budget.estimators.conv_workspace`), each distinct call (the op,
its operands' sizes, strides and dtypes, its other arguments) runs on zeros on this host,
measured as a convolution is (:func:`budget.estimators.conv_workspace.measured_runs`), and
is kept in the same table (in memory and on disk, keyed by CPU model, torch version and
thread count). Zeros are enough: what the kernels allocate depends on shapes, strides and
dtypes, not values (the layer backward reads its forward's workspace, here zeros too).
Calls whose operands would take over
:data:`budget.estimators.conv_workspace.MAX_OPERAND_BYTES` are not run (0).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import torch

from ..runtime.measure import profiler_busy
from ..runtime.values import hint
from .conv_workspace import MAX_OPERAND_BYTES, known_workspace, measured_runs, store_workspace

aten = torch.ops.aten

MATMULS = (aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default)
# what Inductor's code calls (extern_kernels.mm(a, b, out=buf)): the same kernel, the same
# scratch, into an output it was given
OUT_VARIANTS = {aten.mm.out: aten.mm.default, aten.addmm.out: aten.addmm.default}
OUT_VARIANTS |= {aten.bmm.out: aten.bmm.default, aten.baddbmm.out: aten.baddbmm.default}
LOW_PRECISION = (torch.bfloat16, torch.float16)
RNN_LAYERS = (aten.mkldnn_rnn_layer.default, aten.mkldnn_rnn_layer_backward.default)


def _argument(a: Any) -> Any:
    """One argument of a call as the table's key holds it."""
    if isinstance(a, torch.Tensor):
        size = [hint(n) for n in a.shape]
        stride = [hint(s) for s in a.stride()]
        return {"size": size, "stride": stride, "dtype": str(a.dtype).removeprefix("torch.")}
    if isinstance(a, (list, tuple)):
        return [_argument(b) for b in a]
    if a is None or isinstance(a, (bool, int, float, str)):
        return a
    return hint(a)


def _extent(o: dict[str, Any]) -> int:
    """Elements of the storage a tensor of these sizes and strides spans."""
    return 1 + sum((n - 1) * s for n, s in zip(o["size"], o["stride"], strict=True))


def _signature(func: Any, args: Sequence[Any]) -> dict[str, Any] | None:
    kept = [_argument(a) for a in args]
    tensors = [o for o in kept if isinstance(o, dict)]
    nbytes = sum(_extent(o) * getattr(torch, o["dtype"]).itemsize for o in tensors)
    if nbytes > MAX_OPERAND_BYTES:
        return None
    return {"op": func.name(), "args": kept}


def _run(func: Any, sig: dict[str, Any]) -> int:
    from ..runtime._torch_private import _disable_current_modes

    def real(o: Any) -> Any:
        if isinstance(o, dict):
            flat = torch.zeros(_extent(o), dtype=getattr(torch, o["dtype"]))
            return flat.as_strided(o["size"], o["stride"])
        return [real(b) for b in o] if isinstance(o, list) else o

    with _disable_current_modes(), torch.no_grad():  # real zeros, outside the caller's modes
        args = [real(o) for o in sig["args"]]
        return measured_runs(lambda: func(*args))


def onednn_measures(func: Any) -> bool:
    """Whether calls of ``func`` are this module's to price (matmuls, ``out=`` ones too, and
    LSTM layers), whether or not a given call needs measuring."""
    return OUT_VARIANTS.get(func, func) in (*MATMULS, *RNN_LAYERS)


def _measured(func: Any, args: Sequence[Any]) -> bool:
    """Whether ``func`` on ``args`` is a call this module measures."""
    if func in RNN_LAYERS:
        return True
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if func not in MATMULS or not tensors:
        return False
    return tensors[0].dtype in LOW_PRECISION or not all(map(_blas_ready, tensors))


def _blas_ready(t: torch.Tensor) -> bool:
    """Whether a matmul operand's last two dimensions are laid out as BLAS reads them (rows
    or columns contiguous): otherwise the CPU kernel copies it first (the gradient of a
    ``sum`` loss, expanded with stride 0, reaching a Linear's backward)."""
    if t.dim() < 2:
        return True
    (rows, cols), (row_stride, col_stride) = (
        [hint(n) for n in t.shape[-2:]],
        [hint(s) for s in t.stride()[-2:]],
    )
    by_rows = (col_stride == 1 or cols == 1) and row_stride >= max(1, cols)
    by_cols = (row_stride == 1 or rows == 1) and col_stride >= max(1, rows)
    return by_rows or by_cols


def onednn_workspace_bytes(func: Any, args: Sequence[Any]) -> int:
    """The bytes a CPU call of a matmul (low-precision, or on an operand BLAS cannot read
    as it is) or an LSTM layer allocates inside itself, measured on this host (0 for other
    calls, operands too large to run, or a failed run). An ``out=`` matmul is measured as
    the call that makes its output."""
    func = OUT_VARIANTS.get(func, func)
    if not _measured(func, args):
        return 0
    sig = _signature(func, args)
    if sig is None:
        return 0
    key = json.dumps(sig, sort_keys=True)
    known = known_workspace()
    if key not in known:
        if profiler_busy():  # the user's profiler is recording: unmeasured, nothing kept
            return 0
        try:
            measured = _run(func, sig)
        except (RuntimeError, ValueError, TypeError):
            measured = 0
        store_workspace(key, max(0, measured))
    return known[key]
