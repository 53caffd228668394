"""Run a step for a preview and leave what it reaches as it was.

A preview runs the step on fake tensors. Where code outside the compiled graphs depends on
tensor values, it runs on the example inputs instead (:func:`budget.compile.preview`),
which runs the forward for real: batch norm updates its running statistics, dropout draws
from the generators, and a whole train step (its own ``backward()`` and optimizer step
inside) writes gradients, parameters and the optimizer's state. :func:`restored` puts back
the buffers, parameters and gradients of the modules the step reaches
(:func:`modules_of`), the parameters and state of the optimizers it reaches
(:func:`optimizers_of`), and the CPU and CUDA generators' states after the run.
Parameters, gradients and optimizer state are kept in host memory meanwhile, and written
back only where the run changed them. A run on fake tensors writes no real tensor, but a
train step run so leaves fake gradients, and dynamo makes an optimizer's state for real
when it compiles its step: :func:`references_kept` puts back what the step's parameters
and optimizers hold.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn


def reached(fn: Callable[..., Any]) -> list[Any]:
    """What ``fn`` reaches directly: itself, a bound method's object and its attributes,
    what a ``functools.partial`` holds, its closure's cells, the globals its code names."""
    found: list[Any] = [fn]
    owner = getattr(fn, "__self__", None)
    if owner is not None:
        found += [owner, *getattr(owner, "__dict__", {}).values()]
    if isinstance(fn, functools.partial):
        for obj in (fn.func, *fn.args, *fn.keywords.values()):
            found += [obj, getattr(obj, "__self__", None)]
        fn = fn.func
    for cell in getattr(fn, "__closure__", None) or ():
        with contextlib.suppress(ValueError):  # an empty cell
            found.append(cell.cell_contents)
    code = getattr(fn, "__code__", None)
    if code is not None:
        scope = getattr(fn, "__globals__", {})
        found += [scope.get(name) for name in code.co_names]
    return found


def _distinct(objects: list[Any], kind: type) -> list[Any]:
    return list({id(o): o for o in objects if isinstance(o, kind)}.values())


def modules_of(fn: Callable[..., Any]) -> list[nn.Module]:
    """The modules ``fn`` reaches directly (:func:`reached`), each with its submodules
    (through ``buffers()`` and ``parameters()``)."""
    return _distinct(reached(fn), nn.Module)


def optimizers_of(fn: Callable[..., Any]) -> list[torch.optim.Optimizer]:
    """The optimizers ``fn`` reaches directly (:func:`reached`)."""
    return _distinct(reached(fn), torch.optim.Optimizer)


def _parameters(
    modules: Sequence[nn.Module], optimizers: Sequence[torch.optim.Optimizer]
) -> list[nn.Parameter]:
    params = [p for m in modules for p in m.parameters()]
    params += [p for opt in optimizers for g in opt.param_groups for p in g["params"]]
    return list({id(p): p for p in params}.values())


@contextlib.contextmanager
def references_kept(
    modules: Sequence[nn.Module], optimizers: Sequence[torch.optim.Optimizer] = ()
) -> Iterator[None]:
    """Put back, when the block ends, the objects the step's parameters and optimizers
    hold, not their contents (:func:`restored` keeps those): each parameter's ``grad``
    (a backward inside the step, run on fake tensors, leaves fake ones), each optimizer's
    per-parameter state entries, and none of the entries they gain (dynamo makes them when
    it compiles an optimizer's step, on real tensors even in a fake run)."""
    grads = [(p, p.grad) for p in _parameters(modules, optimizers)]
    states = [{key: dict(state) for key, state in opt.state.items()} for opt in optimizers]
    try:
        yield
    finally:
        for p, grad in grads:
            p.grad = grad
        for opt, had in zip(optimizers, states, strict=True):
            for key in [k for k in opt.state if k not in had]:
                del opt.state[key]
            for key, state in had.items():
                opt.state[key].clear()
                opt.state[key].update(state)


class _Kept:
    """Tensors copied (to host memory, or beside them), written back where their version
    moved."""

    def __init__(self) -> None:
        self._kept: dict[int, tuple[torch.Tensor, int, torch.Tensor]] = {}

    def add(self, t: torch.Tensor | None, *, host: bool = True) -> None:
        if t is None or id(t) in self._kept:
            return
        copy = t.detach().to("cpu", copy=True) if host else t.detach().clone()
        self._kept[id(t)] = (t, t._version, copy)

    def put_back(self) -> None:
        with torch.no_grad():
            for t, version, copy in self._kept.values():
                if t._version != version:
                    t.copy_(copy)


@contextlib.contextmanager
def restored(
    modules: Sequence[nn.Module], optimizers: Sequence[torch.optim.Optimizer] = ()
) -> Iterator[None]:
    """Put back ``modules``' buffers, parameters and gradients, ``optimizers``' parameters
    and state, and the generators' states when the block ends: the objects
    (:func:`references_kept`) and their contents (host copies of parameters, gradients and
    optimizer state; buffers copied beside them)."""
    kept = _Kept()
    for module in modules:
        for buf in module.buffers():
            kept.add(buf, host=False)
    for p in _parameters(modules, optimizers):
        kept.add(p)
        kept.add(p.grad)
    for opt in optimizers:
        for state in opt.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    kept.add(value)
    with torch.random.fork_rng(), references_kept(modules, optimizers):
        try:
            yield
        finally:
            kept.put_back()
