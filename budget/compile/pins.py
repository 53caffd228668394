"""Orderings budget adds to the code Inductor generates, where Inductor's scheduler, which
orders by data alone, would undo them: one post-grad pass (:func:`pins_pass`) for both.

- An extra recomputation waits for the node before it in the planned backward
  (:func:`budget.compile.schedule.pin_order` names that node in its meta, ``PIN_AFTER``;
  :func:`pin_marked` makes it wait).
- An offload's wait, which frees its value's device storage, waits for every read of that
  storage (:func:`budget.compile.offload_safety.pin_waits`).

Both are Inductor's ``control_deps``, added to the graph Inductor lowers: after its
rewrites (a rewrite can move a read past a pin made before them), and after its FX graph
cache key is taken (``control_deps`` in the graph handed over bypass the cache; a pass
with a uuid keeps it). :func:`pinning` installs the pass for a compile whose graph needs it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
from pathlib import Path
from typing import Any

import torch.fx as fx

from ..runtime import _torch_private as T
from .offload_safety import pin_waits, waits_to_pin
from .schedule import PIN_AFTER

_log = logging.getLogger(__name__)


def marks(node: fx.Node) -> tuple[str, ...]:
    """The names ``node`` is marked to wait for (:data:`PIN_AFTER`), nearest first."""
    return tuple(node.meta.get(PIN_AFTER, ()))


def pin_marked(graph: fx.Graph) -> int:
    """Make each node marked ``PIN_AFTER`` wait for the nearest node it names that is in
    ``graph`` before it (Inductor's rewrites replace some: a matmul and its bias add become
    one addmm); returns how many it pinned (none left: unpinned, logged). A marked node a
    rewrite replaces goes unpinned, unseen: its replacement carries none of its meta."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    by_name = {n.name: n for n in graph.nodes}
    deps: dict[fx.Node, list[fx.Node]] = {}
    marked = [n for n in graph.nodes if marks(n)]
    for n in marked:
        kept = [by_name[a] for a in marks(n) if a in by_name]
        anchor = next((a for a in kept if order[a] < order[n]), None)
        if anchor is not None:
            deps[n] = [anchor]
    if deps:
        T.preserve_node_ordering(graph, deps)
    if len(deps) < len(marked):
        _log.debug(
            "%d of %d marked nodes pinned (none of the others' marks left)", len(deps), len(marked)
        )
    return len(deps)


@functools.cache
def pins_pass() -> Any:
    """:func:`pin_marked` and :func:`pin_waits` as Inductor's ``post_grad_custom_post_pass``.
    Its uuid hashes the modules that decide the pins (what is marked, and where; what
    reads a storage): a change to any of them compiles again rather than reuse code
    pinned the old way (the marks are node meta, which the cache key does not read)."""
    here = Path(__file__).parent
    sources = ("pins.py", "offload_safety.py", "schedule.py", "split.py", "../runtime/values.py")
    digest = hashlib.sha256(b"".join((here / f).read_bytes() for f in sources)).digest()

    class Pins(T.CustomGraphPass):  # type: ignore[misc, name-defined]
        def __call__(self, graph: fx.Graph) -> None:
            pin_marked(graph)
            if waits_to_pin(graph):
                pin_waits(graph)

        def uuid(self) -> bytes:
            return digest

    return Pins()


def pinning(gm: fx.GraphModule) -> contextlib.AbstractContextManager[Any]:
    """Inductor's config for compiling ``gm``: :func:`pins_pass` added to its post-grad
    passes where ``gm`` has pins to keep, and, where offload waits free storages, no
    buffer reuse (a later buffer would be written into the freed one:
    ``buf4 = buf0; del buf0  # reuse``)."""
    waits = waits_to_pin(gm.graph)
    if not waits and not any(marks(n) for n in gm.graph.nodes):
        return contextlib.nullcontext()
    passes = T.inductor_config.post_grad_custom_post_pass  # none, one, or several
    passes = (
        [] if passes is None else list(passes) if isinstance(passes, list | tuple) else [passes]
    )
    reuse = {"allow_buffer_reuse": False} if waits else {}
    return T.inductor_config.patch(post_grad_custom_post_pass=[*passes, pins_pass()], **reuse)
