"""Run a step on real tensors and leave its modules as they were: a preview's fallback.

A preview runs the step on fake tensors. Where code outside the compiled graphs depends on
tensor values, it runs on the example inputs instead (:func:`budget.compile.preview`),
which runs the forward for real: batch norm updates its running statistics, dropout draws
from the generators. :func:`restored` puts back the buffers of the modules the step
reaches (:func:`modules_of`) and the CPU and CUDA generators' states after the run.
Parameters are not copied (a forward does not write them) and no backward runs, so no
gradient is left.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn


def modules_of(fn: Callable[..., Any]) -> list[nn.Module]:
    """The modules ``fn`` reaches directly: itself, a bound method's object, what a
    ``functools.partial`` holds, and the modules its closure and the globals its code
    names hold (each module with its submodules, through ``buffers()``)."""
    found: dict[int, nn.Module] = {}

    def add(obj: Any) -> None:
        if isinstance(obj, nn.Module):
            found.setdefault(id(obj), obj)

    add(fn)
    add(getattr(fn, "__self__", None))
    if isinstance(fn, functools.partial):
        for obj in (fn.func, *fn.args, *fn.keywords.values()):
            add(obj)
            add(getattr(obj, "__self__", None))
        fn = fn.func
    code = getattr(fn, "__code__", None)
    for cell in getattr(fn, "__closure__", None) or ():
        with contextlib.suppress(ValueError):  # an empty cell
            add(cell.cell_contents)
    if code is not None:
        scope = getattr(fn, "__globals__", {})
        for name in code.co_names:
            add(scope.get(name))
    return list(found.values())


@contextlib.contextmanager
def restored(modules: list[nn.Module]) -> Iterator[None]:
    """Put back ``modules``' buffers and the generators' states when the block ends."""
    seen: set[int] = set()
    kept: list[tuple[torch.Tensor, torch.Tensor]] = []
    for module in modules:
        for buf in module.buffers():
            if id(buf) not in seen:
                seen.add(id(buf))
                kept.append((buf, buf.detach().clone()))
    with torch.random.fork_rng():  # the CPU and CUDA generators' states, put back
        try:
            yield
        finally:
            with torch.no_grad():
                for buf, before in kept:
                    buf.copy_(before)
