"""Steps shared by the tests: the 5-matmul chain, compiling with budget, gradients; the
budget logger's messages."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

import torch

import budget

MiB = 2**20


def conv_scratch_allowance() -> int:
    """How far over the measured peak a convnet's predicted peak may be from the kernel
    scratch alone: what budget.estimators.memory.workspace_bytes allows one strided CPU
    convolution for oneDNN's scratch (96 KiB and 160 KiB per thread), which tiny
    convolutions do not use up."""
    import torch

    return 96 * 1024 + 160 * 1024 * torch.get_num_threads()


UNIT = 512**3 * 2  # FLOPs of one 512x512 @ 512x512 matmul


def chain(x, *ws):
    """The issue's 5-matmul chain (with six 512x512 leaves): cos, then mm + cos per weight."""
    x = x.cos()
    for w in ws:
        x = torch.mm(x, w).cos()
    return x.sum()


@contextlib.contextmanager
def budget_log() -> Iterator[list[str]]:
    """The messages the ``budget`` logger gives at INFO and above inside (pytest's logging
    plugin is off: pyproject.toml)."""
    messages: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    log = logging.getLogger("budget")
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        yield messages
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def compile_with(fn: Callable[..., Any], b: float | str, compiler: str = "eager", **kw: Any):
    be = budget.backend(b, compiler=compiler, **kw)
    return torch.compile(fn, backend=be), be


def grads_of(
    step: Callable[..., Any],
    tensors: list[torch.Tensor],
    *args: Any,
    seed: int | None = None,
    **kwargs: Any,
) -> tuple[Any, list[torch.Tensor]]:
    """Run ``step``, backprop the sum of its tensor outputs, return outputs and grads."""
    for t in tensors:
        t.grad = None
    if seed is not None:
        torch.manual_seed(seed)
    out = step(*args, **kwargs)
    leaves = [o for o in torch.utils._pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
    total = sum(o.float().sum() for o in leaves if o.requires_grad)
    total.backward()
    detached = torch.utils._pytree.tree_map(
        lambda o: o.detach().clone() if isinstance(o, torch.Tensor) else o, out
    )
    grads = [t.grad.clone() for t in tensors]
    for t in tensors:
        t.grad = None
    return detached, grads


def assert_same_grads(model: torch.nn.Module, ref: torch.nn.Module, **tolerance: Any) -> None:
    """Every parameter of ``model`` has the gradient of ``ref``'s in the same place."""
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, **tolerance)
