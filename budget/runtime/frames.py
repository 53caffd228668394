"""Planning on a fresh chunk of CPython's frame stack.

CPython 3.11 and 3.12 keep Python frames in chunks of 16 KiB and free a chunk as soon as
the first frame in it returns. A loop whose callee lands at the start of a chunk maps and
unmaps one on every call (python/cpython#142183; later 3.13 and 3.14 releases keep one
spare chunk): two system calls and a page fault per call. Where that happens depends only
on how deep the stack is. Planning runs inside torch.compile, under dynamo's and
AOTAutograd's frames, and at the depth of torch's partitioner hook loops of the planner,
and of the graph copies it has torch make, paid it on every call.

:func:`on_fresh_stack` calls a function from a frame too large for what is left of any
ordinary chunk, so CPython starts a new chunk for it and the call runs with 32 KiB of
stack above it, whatever the depth it came from. Same thread, same modes and contexts:
nothing the call sees changes, only where its frames live. Elsewhere (3.10's heap frames,
a CPython that keeps a spare chunk) it costs one frame of 32 KiB.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

R = TypeVar("R")

# Frame slots (pointers) of the padding frame: more than a 16 KiB chunk holds, so it never
# fits in one; CPython sizes its new chunk for the frame plus 1000 slots, rounded up to a
# power of two times 16 KiB (64 KiB), which leaves 32 KiB above it.
PAD_SLOTS = 4096


@functools.cache
def _padding_frame() -> Callable[..., Any]:
    """A function whose frame has ``PAD_SLOTS`` local variables, never bound (the names
    are locals of the code object all the same: the compiler counts them before it drops
    the dead branch). Made on first use (a few milliseconds)."""
    names = ", ".join(f"_{i}" for i in range(PAD_SLOTS))
    source = (
        "def padded(fn, args, kwargs):\n"
        "    if False:\n"
        f"        del {names}\n"
        "    return fn(*args, **kwargs)\n"
    )
    namespace: dict[str, Any] = {}
    exec(compile(source, "<budget.runtime.frames>", "exec"), namespace)
    return namespace["padded"]


def on_fresh_stack(fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """``fn(*args, **kwargs)``, its frames on a new chunk of the frame stack (module
    docstring): its result returned, its exceptions raised, as a direct call."""
    return _padding_frame()(fn, args, kwargs)
