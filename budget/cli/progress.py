"""The progress bar of ``budget sweep`` and ``budget solve``: tqdm on stderr, fed by the
planning callback (budgets planned; a peak search's plans partitioned, or an eager plan's
peaks predicted, with no total). Its clock ticks each second between updates: a compile
(``--compile``) can spend a minute generating one plan's code with nothing to count."""

from __future__ import annotations

import sys
import threading

TICK_S = 1.0  # how often the bar's elapsed time is redrawn between updates


class ProgressBar:
    """A tqdm bar on stderr driven by the progress(graph, done, total) callback;
    silent with --quiet, and (tqdm's ``disable=None``) when stderr is not a terminal.
    ``eager``: the bar of ``budget.apply``'s planning, one step (no graphs), its ticks
    without a total the plans whose peaks a fake run predicted."""

    def __init__(self, total: int, quiet: bool, *, eager: bool = False) -> None:
        from tqdm import tqdm

        self.eager = eager
        self.graph = -1
        self.bar = tqdm(
            total=total,
            desc="tracing",
            unit="budget",
            file=sys.stderr,
            leave=False,
            disable=True if quiet else None,
        )
        self._lock = threading.Lock()  # an update is drawn whole, never half by a tick
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if not self.bar.disable:
            self._ticker = threading.Thread(target=self._tick, name="budget-progress", daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            with self._lock:
                self.bar.refresh()

    def update(self, graph: int, done: int, total: int | None) -> None:
        with self._lock:
            self._update(graph, done, total)

    def _update(self, graph: int, done: int, total: int | None) -> None:
        if graph != self.graph:
            self.graph = graph
            self.bar.reset(total=total)
        if total != self.bar.total:  # a peak search counts the plans it partitions
            self.bar.total = total
        searching = total is None
        counted = "predicted" if self.eager else "partitioned"
        self.bar.bar_format = f"{{desc}}{{n}} plans {counted} [{{elapsed}}]" if searching else None
        name = "eager plan" if self.eager else f"graph {graph + 1}"
        if searching and not self.eager:  # eager plans predict peaks without a peak budget too
            name += ": peak search"
        self.bar.set_description(name, refresh=False)
        self.bar.n = done
        self.bar.refresh()

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        self.bar.close()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
