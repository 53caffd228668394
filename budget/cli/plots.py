"""Plots, as PNGs: a sweep's memory/recompute frontier, a plan's live-bytes timeline.

``budget sweep --plot FILE.png`` draws saved activation memory (x) against recompute
cost (y, in the plans' own cost unit), one line per graph, each point labelled with its
budget, and beside it the peak of the step against the same cost (predicted from the
graphs, or with ``--compile`` that of the code Inductor generated).
``budget solve --timeline FILE.png`` draws the live bytes after each node of the step,
forward, backward and recomputation marked, with the predicted peak, the peak the plan
was searched for (when it was made for a peak budget) and the peak of the code Inductor
generated (when the plan was compiled). matplotlib is an optional dependency (``pip install budget-remat[plot]``); it is
imported only here and only when a plot is drawn, through its object-oriented API (no
pyplot, so no global backend or figure state is touched).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..core.plan import Plan, sweep_peaks
from ..core.text import budget_cell
from ..core.versus import sweep_scale

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
    x: str = "saved",
) -> None:
    """Draw one graph's sweep on a matplotlib Axes: saved MiB (``x="saved"``) or the
    peak MiB (``x="peak"``: the code's where compiled, else predicted) against recompute
    cost.

    ``scale`` is ``(divisor, unit label)`` for the cost axis (:func:`sweep_scale` of the
    plans when not given; pass one when several sweeps share the axes).
    """
    if not plans:
        return
    divisor, unit_label = scale or sweep_scale(plans)  # of every plan: torch's beside too
    # the x of each plan: its saved bytes, or its peak (the code's where compiled, else the
    # graphs' prediction: one kind for the whole curve), plans without one left out
    xs = [p.saved_bytes for p in plans] if x == "saved" else sweep_peaks(plans)
    drawn = [(p, nbytes) for p, nbytes in zip(plans, xs, strict=True) if nbytes is not None]
    if not drawn:
        return
    plans = [p for p, _ in drawn]
    labels: dict[tuple[float, float], list[str]] = {}
    for p, nbytes in drawn:  # plans with the same bytes and cost share a point and a label
        point = (nbytes / 2**20, p.total_recompute_cost / divisor)
        labels.setdefault(point, []).append(budget_cell(p.budget))
    points = sorted(labels, key=lambda xy: (xy[0], -xy[1]))
    ax.plot(
        [x for x, _ in points],
        [y for _, y in points],
        marker="o",
        # saved memory: the frontier's steps; peaks are not monotone: points only
        drawstyle="steps-post",
        linestyle="none" if x == "peak" else "-",
        label=label,
    )
    for xy in points:
        text = ", ".join(labels[xy])
        ax.annotate(text, xy, textcoords="offset points", xytext=(4, 4), fontsize=7)
    code = any(p.compiled_peak_bytes is not None for p in plans)
    peak = "peak of the step's compiled code" if code else "predicted peak of the step"
    ax.set_xlabel(f"{peak} (MiB)" if x == "peak" else "saved activation memory (MiB)")
    ax.set_ylabel(f"recompute cost ({unit_label})")
    ax.grid(True, alpha=0.3)


def save_sweep_plot(
    sweeps: Sequence[Sequence[Plan]],
    path: str | os.PathLike,
    title: str = "",
    without_offload: Sequence[Sequence[Plan]] = (),
) -> None:
    """Write the sweep of every graph of a step to ``path`` as a PNG: saved memory against
    recompute, and the predicted peak against recompute when the plans have one.
    ``without_offload``: the same sweep planned without offload, drawn beside it (the
    cost axis then counts the offloads' exposed copy time too)."""
    require_matplotlib()
    from matplotlib.figure import Figure

    everything = [p for plans in [*sweeps, *without_offload] for p in plans]
    if not everything:
        raise ValueError("nothing to plot: the sweep has no plans")
    with_peak = any(p.own_peak_bytes is not None for p in everything)
    fig = Figure(figsize=(12 if with_peak else 7, 4.5), layout="constrained")
    axes = fig.subplots(1, 2 if with_peak else 1, squeeze=False)[0]
    several = len(sweeps) > 1
    scale = sweep_scale(everything)
    vs = any(p.torch_plan is not None for p in everything)  # torch's plans beside
    curves = [(sweeps, "with offload" if without_offload else "")]
    if without_offload:
        curves.append((without_offload, "recompute only"))
    for ax, x in zip(axes, ("saved", "peak"), strict=False):
        for group, kind in curves:
            for i, plans in enumerate(group):
                name = f"graph {i + 1} ({plans[0].graph_hash})" if several and plans else ""
                label = ", ".join(t for t in ("budget" if vs else "", name, kind) if t) or None
                draw_sweep(ax, plans, label, scale, x=x)
        for i, plans in enumerate(sweeps):
            draw_torch_plans(ax, plans, scale, x, i + 1 if several else None)
        if several or without_offload or vs:
            ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.savefig(os.fspath(path), format="png", dpi=120)


def draw_torch_plans(
    ax: Any,
    plans: Sequence[Plan],
    scale: tuple[float, str] | None = None,
    x: str = "saved",
    graph: int | None = None,
) -> None:
    """torch's plans beside a sweep's (``vs_torch``) as crosses on the axes
    :func:`draw_sweep` drew it on (``scale``: the same; chosen from the plans when not
    given): saved MiB, or their graphs' predicted peak where the sweep's peaks are
    predictions too (a compiled sweep's are its code's: no like to set them beside)."""
    if not plans:
        return
    scale = scale or sweep_scale(plans)
    if x == "peak" and any(p.compiled_peak_bytes is not None for p in plans):
        return
    points = []
    for theirs in (p.torch_plan for p in plans):
        nbytes = None if theirs is None else getattr(theirs, f"{x}_bytes")
        if theirs is not None and nbytes is not None:
            points.append((nbytes / 2**20, theirs.recompute_cost / scale[0]))
    if points:
        eager = any(p.torch_plan is not None and p.torch_plan.modules for p in plans)
        name = "torch's checkpoint_wrapper" if eager else "torch's partitioner"
        name += "" if graph is None else f", graph {graph}"
        ax.plot(*zip(*sorted(points), strict=True), marker="x", linestyle="none", label=name)


PHASE_COLOURS = {"forward": "tab:blue", "backward": "tab:orange", "recompute": "tab:red"}


def save_timeline_plot(plans: Sequence[Plan], path: str | os.PathLike, title: str = "") -> None:
    """Write each plan's live-bytes timeline to ``path`` as a PNG, one panel per graph:
    live MiB after every node, coloured by phase, with the predicted peak, the peak the
    plan was searched for (``peak_target_bytes``: the peak budget, or below it after the
    compiled check's retries) and the compiled peak, where the plan has them; for an eager
    plan, where each candidate module's backward begins."""
    require_matplotlib()
    from matplotlib.figure import Figure

    shown = [p for p in plans if p.timeline]
    if not shown:
        raise ValueError("nothing to plot: the plans have no timeline (made without graphs)")
    fig = Figure(figsize=(10, 3.2 * len(shown)), layout="constrained")
    axes = fig.subplots(len(shown), 1, squeeze=False)[:, 0]
    for ax, plan in zip(axes, shown, strict=True):
        live = [pt.live_bytes / 2**20 for pt in plan.timeline]
        ax.plot(range(len(live)), live, color="0.6", linewidth=0.8, zorder=1)
        for phase, colour in PHASE_COLOURS.items():
            xs = [i for i, pt in enumerate(plan.timeline) if pt.phase == phase]
            ax.scatter(xs, [live[i] for i in xs], s=4, color=colour, label=phase, zorder=2)
        if plan.peak_bytes is not None:
            ax.axhline(plan.peak_bytes / 2**20, color="black", linestyle=":", linewidth=0.8)
        for region in getattr(plan, "regions", ()):  # an eager plan: each module's backward
            if region.backward_at is not None:
                ax.axvline(region.backward_at, color="0.8", linewidth=0.6, zorder=0)
                ax.text(region.backward_at, 0, f" {region.label}", fontsize=6, rotation=90)
        for level, colour, style, label in (
            (plan.peak_target_bytes, "tab:green", "--", "planned for at most"),
            (plan.compiled_peak_bytes, "tab:red", "-.", "peak of the generated code"),
        ):
            if level is not None:
                ax.axhline(level / 2**20, color=colour, linestyle=style, linewidth=0.8, label=label)
        ax.set_ylabel("live MiB")
        ax.set_xlabel("node of the forward, then the backward graph")
        ax.set_title(f"graph {plan.graph_hash}, budget {budget_cell(plan.budget)}", fontsize=9)
        ax.legend(fontsize=7, loc="upper left", markerscale=3)
        ax.grid(True, alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.savefig(os.fspath(path), format="png", dpi=120)
