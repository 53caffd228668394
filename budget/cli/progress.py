"""The progress bar of ``budget sweep``: tqdm on stderr, fed by budget.sweep's callback."""

from __future__ import annotations

import sys


class ProgressBar:
    """A tqdm bar on stderr driven by budget.sweep's progress(graph, done, total) callback;
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

    def update(self, graph: int, done: int, total: int) -> None:
        if graph != self.graph:
            self.graph = graph
            self.bar.reset(total=total)
            self.bar.set_description(f"graph {graph + 1}")
        self.bar.n = done
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
