"""Plots of sweeps: the memory/recompute Pareto frontier of a step, as a PNG.

``budget sweep --plot FILE.png`` draws saved activation memory (x) against recompute
cost (y, in the plans' own cost unit), one line per graph, each point labelled with its
budget. matplotlib is an optional dependency (``pip install budget-remat[plot]``); it is
imported only here and only when a plot is drawn, through its object-oriented API (no
pyplot, so no global backend or figure state is touched).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..core.plan import Plan
from ..core.report import budget_cell, cost_scale

INSTALL_HINT = "pip install budget-remat[plot]"


def require_matplotlib() -> None:
    """Raise an ImportError naming the install command when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ImportError(f"plots need matplotlib: {INSTALL_HINT}") from None


def draw_sweep(
    ax: Any,
    plans: Sequence[Plan],
    label: str | None = None,
    scale: tuple[float, str] | None = None,
) -> None:
    """Draw one graph's sweep on a matplotlib Axes: saved MiB against recompute cost.

    ``scale`` is ``(divisor, unit label)`` for the cost axis (chosen from the plans when
    not given; pass one when several sweeps share the axes).
    """
    if not plans:
        return
    divisor, unit_label = scale or cost_scale([p.recompute_cost for p in plans], plans[0].cost_unit)
    labels: dict[tuple[float, float], list[str]] = {}
    for p in plans:  # plans with the same bytes and cost share a point and a label
        point = (p.saved_bytes / 2**20, p.recompute_cost / divisor)
        labels.setdefault(point, []).append(budget_cell(p.budget))
    points = sorted(labels, key=lambda xy: (xy[0], -xy[1]))
    ax.plot(
        [x for x, _ in points],
        [y for _, y in points],
        marker="o",
        drawstyle="steps-post",
        label=label,
    )
    for xy in points:
        text = ", ".join(labels[xy])
        ax.annotate(text, xy, textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel("saved activation memory (MiB)")
    ax.set_ylabel(f"recompute cost ({unit_label})")
    ax.grid(True, alpha=0.3)


def save_sweep_plot(
    sweeps: Sequence[Sequence[Plan]], path: str | os.PathLike, title: str = ""
) -> None:
    """Write the sweep of every graph of a step to ``path`` as a PNG."""
    require_matplotlib()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    several = len(sweeps) > 1
    everything = [p for plans in sweeps for p in plans]
    if not everything:
        raise ValueError("nothing to plot: the sweep has no plans")
    scale = cost_scale([p.recompute_cost for p in everything], everything[0].cost_unit)
    for i, plans in enumerate(sweeps):
        label = f"graph {i + 1} ({plans[0].graph_hash})" if several and plans else None
        draw_sweep(ax, plans, label, scale)
    if several:
        ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    fig.savefig(os.fspath(path), format="png", dpi=120)
