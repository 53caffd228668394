"""Inductor fuses only nodes near each other, so its code runs them where the graphs do.

Inductor's scheduler fuses two nodes into one kernel wherever that is legal and saves
memory traffic, and runs the kernel at the place of its earliest node. Two nodes far
apart in the graph fused together run the later one early: its output is allocated
there and lives to its last reader, and what it reads is held from there. A partitioned
backward places each recomputation just before its first use (the rescheduler, where the
peak allows); fusing recomputations of different layers, which read the same saved values
or one another's, undoes that, and the code peaks above the graphs' prediction, which the
peak search plans on: a peak budget then compiles again (``peak_check``), and a memory
budget's plan peaks higher than planned. torch's own rule against it
(``Scheduler.are_long_distant_nodes``) takes horizontal fusions only, and the fused node's
whole span.

So budget's Inductor compiles fuse no two nodes more than ``fusion_distance`` places
apart in the scheduler's order before fusion
(:attr:`budget.core.settings.PlanSettings.fusion_distance`; measured from the last node of
one to the first of the other, so long chains of neighbours still fuse, and such a chain
can still carry a node far from its place), through Inductor's choices handler
(``V.set_choices_handler``, per thread), which hands every other decision to the handler
in place. The distance is in the compile caches' keys
(:func:`budget.compile.plan_cache.settings_key`).

Inductor also moves a small reduction without fusing it: one over fewer than
``unroll_reductions_threshold`` (8) elements it unrolls into pointwise code, which it
inlines into its readers however far away they are, so what the reduction reads is held
to its last reader (T5's relative position bias: each layer's attention gradient, summed
over a batch of 2, read only by the embedding's backward at the graph's end). Under the
same limit budget's compiles set the threshold to 1, torch's way to unroll none (a pooling
window is Inductor's own: its lowerings set their own threshold): each reduction runs where
the graph has it, as its own kernel or fused with its neighbours. A threshold the user set
is replaced there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..runtime import _torch_private as T

# Inductor's unroll_reductions_threshold in budget's compiles: 1 unrolls no reduction
# (torch's config: "disable with = 1"); one over a single element is a copy either way
UNROLL_THRESHOLD = 1


def distance(node1: Any, node2: Any) -> int:
    """How many places apart two (fused) scheduler nodes are in Inductor's order before
    fusion (each spans ``min_order`` to ``max_order``): 1 for neighbours, 0 or less where
    their spans overlap."""
    return max(node1.min_order - node2.max_order, node2.min_order - node1.max_order)


class _NearFusion:
    """Inductor's choices handler ``inner``, but no fusion of nodes more than ``limit``
    places apart (:func:`distance`)."""

    def __init__(self, inner: Any, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    def can_fuse(self, scheduler: Any, node1: Any, node2: Any, shared_data_score: int) -> bool:
        if distance(node1, node2) > self._limit:
            return False
        return bool(self._inner.can_fuse(scheduler, node1, node2, shared_data_score))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # not set yet (a copy, a pickle): no recursion into _inner
            raise AttributeError(name)
        return getattr(self._inner, name)


@contextlib.contextmanager
def fusion_within(limit: int | None) -> Iterator[None]:
    """Inductor compiles in this thread fuse no nodes more than ``limit`` places apart and
    unroll no small reduction into its readers (None: Inductor's own rules)."""
    if limit is None:
        yield
        return
    V = T.inductor_virtualized
    with (
        V.set_choices_handler(_NearFusion(V.choices, limit)),
        T.inductor_config.patch(unroll_reductions_threshold=UNROLL_THRESHOLD),
    ):
        yield
