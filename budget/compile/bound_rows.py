"""The rows of the liveness bound (:mod:`budget.compile.liveness`) from what is alive in the
backward when: one row per backward step (the storages alive there, each once), and one
per recomputation at its home (what is alive across that moment, with the value and its
inputs)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import torch.fx as fx

from ..core.liveness import BoundRow, Literal, RecomputeRow

Interval = tuple[int, int, int]  # (raw storage, first step, last step), both ends included


def rows(
    live: list[Interval],
    steps: int,
    sizes: dict[int, int],
    key: dict[int, int],
    copies: dict[int, int],
) -> list[BoundRow]:
    """One row per step: the bytes of the storages alive there (each storage once), and
    which of them are storages a plan may save or their copies (counted here already)."""
    spans: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for raw, a, b in live:
        if b >= 0:
            spans[raw].append((max(a, 0), min(b, steps - 1)))
    delta = [0] * (steps + 1)
    excluded: list[list[int]] = [[] for _ in range(steps)]
    for raw, intervals in spans.items():
        for a, b in _merge(intervals):
            delta[a] += sizes[raw]
            delta[b + 1] -= sizes[raw]
            if raw in key:
                for t in range(a, b + 1):
                    excluded[t].append(key[raw])
                    if key[raw] in copies:
                        excluded[t].append(copies[key[raw]])
    rows, const = [], 0
    for t in range(steps):
        const += delta[t]
        rows.append(BoundRow(t, const, tuple(sorted(excluded[t]))))
    return rows


def _merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def recompute_rows(
    forward: list[fx.Node],
    home: dict[fx.Node, int],
    live: list[Interval],
    sizes: dict[int, int],
    key: dict[int, int],
    raws: Callable[[fx.Node], list[int]],
    index: dict[fx.Node, int],
) -> list[RecomputeRow]:
    """A row for the moment a value is recomputed, when a plan first needs it at its home
    (it runs just before that node then): what is alive across that moment (before the
    home node and after it) is alive then, with the value and its inputs."""
    out = []
    for n in forward:
        if n not in home or not raws(n):
            continue
        at = home[n]
        across = {raw for raw, lo, hi in live if lo <= at - 1 and hi >= at}
        keys = {key[raw] for raw in across if raw in key}
        extra: list[tuple[int, Literal]] = [
            (key[raw], ("AND", (), (index[n],), (), ())) for raw in raws(n)
        ]
        for u in n.all_input_nodes:  # forward values (graph inputs have no storage here)
            for raw in raws(u):
                if raw in key and u in index:
                    extra.append((key[raw], ("AND", (), (index[u],), (), ())))
                    extra.append((key[raw], ("AND", (index[u],), (index[n],), (), ())))
        out.append(
            RecomputeRow(
                value=index[n],
                through=at,
                const=sum(sizes[raw] for raw in across),
                excluded=tuple(sorted(keys)),
                extra=tuple(e for e in extra if e[0] not in keys),
            )
        )
    return out
