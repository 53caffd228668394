"""What a preview compiles, held apart from what training compiles.

Dynamo keeps the graphs it compiles on the code object of the frame it compiled, so a
preview that compiled training's own code would leave its graphs (planned on fake
tensors) in training's cache, and many previews would reach dynamo's recompile limit. A
preview therefore compiles copies of the code it runs (:func:`own_code`), dropped after it.

A model compiled block by block (``torch.compile(block)`` for each block, as torchtitan
compiles it, or ``block.compile()``) and called from eager code gets one graph per block
in training (blocks alike share one, run once per block), eager code between them run as
it is; ``torch.compile`` of the whole step would instead make one graph of it, for dynamo
traces through a compiled module inside a compiled frame. A preview of a step that reaches
such modules runs it as training does (:func:`compiled_modules`): the step's own code
eagerly, each compiled module compiled by the preview's backend, from a copy of its
``forward``'s code shared by the blocks that share it.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from ..runtime.restore import modules_of, reached


def own_code(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with a code object of its own, where it is a plain function (else ``fn``)."""
    if not isinstance(fn, types.FunctionType):
        return fn
    own = types.FunctionType(
        fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )
    own.__kwdefaults__ = fn.__kwdefaults__
    own.__qualname__, own.__module__ = fn.__qualname__, fn.__module__
    return own


@contextlib.contextmanager
def compiled_modules(fn: Callable[..., Any], backend: Any) -> Iterator[bool]:
    """While the block runs, each module compiled on its own among the modules ``fn``
    reaches and their submodules compiles its ``forward``'s own code with ``backend``
    instead of its own; yields whether there is one. Every module is as it was after the
    block. Not where ``fn`` also reaches a function compiled on its own (which would then
    compile with its own backend): yields False, and ``fn`` is compiled whole."""
    from ..runtime._torch_private import OptimizedModule

    if any(
        getattr(obj, "_torchdynamo_orig_callable", None) is not None
        and not isinstance(obj, nn.Module)
        for obj in reached(fn)
    ):
        yield False
        return
    modules = modules_of(fn)

    undo: list[tuple[nn.Module, str, Any]] = []
    copies: dict[Any, Callable[..., Any]] = {}  # a class's forward -> its copy

    def swap(m: nn.Module, name: str, value: Any) -> None:
        undo.append((m, name, m.__dict__.get(name, _UNSET)))
        setattr(m, name, value)

    def own_forward(m: nn.Module) -> None:
        forward = getattr(type(m), "forward", None)
        if "forward" not in m.__dict__ and isinstance(forward, types.FunctionType):
            swap(m, "forward", types.MethodType(copies.setdefault(forward, own_code(forward)), m))

    try:
        seen: set[int] = set()
        for m in (sub for root in modules for sub in root.modules()):
            if id(m) in seen:
                continue
            seen.add(id(m))
            if isinstance(m, OptimizedModule):
                own_forward(m._orig_mod)
                swap(m, "forward", torch.compile(m._orig_mod, backend=backend).forward)
            elif getattr(m, "_compiled_call_impl", None) is not None:  # m.compile()
                own_forward(m)
                swap(m, "_compiled_call_impl", torch.compile(m._call_impl, backend=backend))
        yield bool(undo)
    finally:
        for m, name, old in reversed(undo):
            if old is _UNSET:
                delattr(m, name)
            else:
                setattr(m, name, old)


_UNSET = object()
