"""The progress bar of ``budget sweep`` and ``budget solve``: tqdm on stderr, fed by the
planning callback (budgets planned; a peak search's plans partitioned, with no total)."""

from __future__ import annotations

import sys


class ProgressBar:
    """A tqdm bar on stderr driven by the progress(graph, done, total) callback;
    silent with --quiet, and (tqdm's ``disable=None``) when stderr is not a terminal."""

    def __init__(self, total: int, quiet: bool) -> None:
        from tqdm import tqdm

        self.graph = -1
        self.bar = tqdm(
            total=total,
            desc="tracing",
            unit="budget",
            file=sys.stderr,
            leave=False,
            disable=True if quiet else None,
        )

    def update(self, graph: int, done: int, total: int | None) -> None:
        if graph != self.graph:
            self.graph = graph
            self.bar.reset(total=total)
        if total != self.bar.total:  # a peak search counts the plans it partitions
            self.bar.total = total
        searching = total is None
        self.bar.bar_format = "{desc}{n} plans partitioned [{elapsed}]" if searching else None
        self.bar.set_description(
            f"graph {graph + 1}" + (": peak search" if searching else ""), refresh=False
        )
        self.bar.n = done
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
