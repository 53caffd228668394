"""CPU matmuls in bfloat16 or float16: what they allocate inside themselves, measured.

On the CPU, torch runs low-precision matmuls through oneDNN, which packs its operands into
blocked copies and takes scratch while the call runs and frees them before it returns:
memory no graph value shows, at a moment a step may peak (an eager step under bf16
autocast). float32 matmuls (MKL) take none. As for convolutions (:mod:`budget.estimators.conv_workspace`), each
distinct call (the op, its operands' sizes, strides and dtype) runs on zeros on this host,
measured as a convolution is (:func:`budget.estimators.conv_workspace.measured_runs`), and
kept in the same table (in memory and on disk, keyed by CPU model, torch version and
thread count). Calls whose operands would take over
:data:`budget.estimators.conv_workspace.MAX_OPERAND_BYTES` are not run (0).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import torch

from ..runtime.values import hint
from .conv_workspace import MAX_OPERAND_BYTES, known_workspace, measured_runs, store_workspace

aten = torch.ops.aten

MATMULS = (aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default)
# what Inductor's code calls (extern_kernels.mm(a, b, out=buf)): the same kernel, the same
# scratch, into an output it was given
OUT_VARIANTS = {aten.mm.out: aten.mm.default, aten.addmm.out: aten.addmm.default}
OUT_VARIANTS |= {aten.bmm.out: aten.bmm.default, aten.baddbmm.out: aten.baddbmm.default}
LOW_PRECISION = (torch.bfloat16, torch.float16)


def _signature(func: Any, args: Sequence[Any]) -> dict[str, Any] | None:
    operands, others = [], []
    for a in args:
        if isinstance(a, torch.Tensor):
            size = [hint(n) for n in a.shape]
            stride = [hint(s) for s in a.stride()]
            operands.append({"size": size, "stride": stride, "dtype": str(a.dtype)[6:]})
        else:
            others.append(a if isinstance(a, (int, float, bool)) else hint(a))
    extent = sum(
        (1 + sum((n - 1) * s for n, s in zip(o["size"], o["stride"], strict=True)))
        * getattr(torch, o["dtype"]).itemsize
        for o in operands
    )
    if extent > MAX_OPERAND_BYTES:
        return None
    return {"op": func.name(), "operands": operands, "others": others}


def _run(func: Any, sig: dict[str, Any]) -> int:
    from ..runtime._torch_private import _disable_current_modes

    with _disable_current_modes(), torch.no_grad():  # real zeros, outside the caller's modes
        real = []
        for o in sig["operands"]:
            extent = 1 + sum((n - 1) * s for n, s in zip(o["size"], o["stride"], strict=True))
            flat = torch.zeros(extent, dtype=getattr(torch, o["dtype"]))
            real.append(flat.as_strided(o["size"], o["stride"]))
        args = [*real, *sig["others"]]
        return measured_runs(lambda: func(*args))


def matmul_workspace_bytes(func: Any, args: Sequence[Any]) -> int:
    """The bytes a CPU matmul in bfloat16 or float16 allocates inside itself, measured on
    this host (0 for other ops and dtypes, operands too large to run, or a failed run).
    An ``out=`` call is measured as the call that makes its output."""
    func = OUT_VARIANTS.get(func, func)
    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if func not in MATMULS or first is None or first.dtype not in LOW_PRECISION:
        return 0
    sig = _signature(func, args)
    if sig is None:
        return 0
    key = json.dumps(sig, sort_keys=True)
    known = known_workspace()
    if key not in known:
        try:
            measured = _run(func, sig)
        except (RuntimeError, ValueError, TypeError):
            measured = 0
        store_workspace(key, max(0, measured))
    return known[key]
