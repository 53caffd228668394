"""A plan's tables as text: its saves and recomputes per module, its largest decisions.

Pure string formatting, as :mod:`budget.core.report` (whose ``plan_report`` puts them
under the plan's header): module paths are cut to a depth below the model, long names
shortened in the middle, costs shown in the plan's own unit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .sizes import format_bytes
from .text import WIDTH, cost_scale, format_cost, short_op, shorten

if TYPE_CHECKING:
    from .plan import Plan

NO_MODULE = "(no module)"


@dataclass
class ModuleRow:
    """Totals of one module (at the table's depth) over a plan's decisions."""

    module: str
    saved_bytes: int = 0
    recomputed_bytes: int = 0
    recompute_cost: float = 0.0
    saves: int = 0
    recomputes: int = 0
    offloaded_bytes: int = 0  # kept in host memory between the forward and the backward


def module_root(paths: Sequence[str]) -> str:
    """The first component every (non-empty) module path shares, or ''.

    In a step like ``loss(model(x))`` that is the model (``model.blocks.0...``); depths
    count below it, so depth 1 is the model's children.
    """
    firsts = {p.split(".")[0] for p in paths if p}
    return firsts.pop() if len(firsts) == 1 else ""


def module_key(path: str, depth: int, root: str = "") -> str:
    """``path`` cut to ``depth`` components below ``root`` (the root itself is kept)."""
    if not path:
        return NO_MODULE
    parts = path.split(".")
    keep = depth + (1 if root and parts[0] == root else 0)
    return ".".join(parts[:keep])


def module_rows(plan: Plan, depth: int = 2) -> list[ModuleRow]:
    """Per-module totals of saved bytes and recomputed bytes and cost, in graph order.

    Depth 1 is the model's direct children (``model.blocks``), depth 2 the next level
    (``model.blocks.0``), and so on; nodes outside any module (the loss) are one row.
    """
    if depth < 1:
        raise ValueError(f"depth must be at least 1; got {depth}")
    root = module_root([d.module for d in plan.decisions])
    rows: dict[str, ModuleRow] = {}
    for d in plan.decisions:
        if d.decision == "input":
            continue
        key = module_key(d.module, depth, root)
        row = rows.setdefault(key, ModuleRow(key))
        if d.decision == "save":
            row.saved_bytes += d.bytes
            row.saves += 1
        elif d.decision == "offload":
            row.offloaded_bytes += d.bytes
        else:
            row.recomputed_bytes += d.bytes
            row.recompute_cost += d.cost
            row.recomputes += 1
    ordered = [r for k, r in rows.items() if k != NO_MODULE]
    return ordered + ([rows[NO_MODULE]] if NO_MODULE in rows else [])


def module_table(plan: Plan, depth: int = 2) -> str:
    """Per module: bytes saved (offloaded, when any), recomputed, their cost; a total."""
    rows = module_rows(plan, depth)
    if not rows:
        return "per module: nothing saved or recomputed"
    scale = cost_scale([r.recompute_cost for r in rows], plan.cost_unit)
    host = any(r.offloaded_bytes for r in rows)
    name_w = WIDTH - 2 - (1 + 11) * (3 if host else 2) - (1 + 16)

    def line(name: str, saved: int, offloaded: int, recomputed: int, cost: float) -> str:
        moved = f" {format_bytes(offloaded):>11}" if host else ""
        return (
            f"  {shorten(name, name_w):<{name_w}} {format_bytes(saved):>11}{moved} "
            f"{format_bytes(recomputed):>11} {format_cost(cost, plan.cost_unit, scale):>16}"
        )

    head = f"  {'module':<{name_w}} {'saved':>11}" + (f" {'offloaded':>11}" if host else "")
    lines = [
        f"per module (depth {depth}): saved, {'offloaded, ' if host else ''}and recomputed in "
        "the backward",
        f"{head} {'recomputed':>11} {'recompute cost':>16}",
    ]
    for r in rows:
        lines.append(
            line(r.module, r.saved_bytes, r.offloaded_bytes, r.recomputed_bytes, r.recompute_cost)
        )
    copies = plan.copied_input_bytes
    if copies:
        lines.append(line("(layout copies of inputs)", copies, 0, 0, 0.0))
    if plan.rng_state_bytes:
        lines.append(line("(generator states)", plan.rng_state_bytes, 0, 0, 0.0))
    total = sum(r.recompute_cost for r in rows)
    saved = sum(r.saved_bytes for r in rows) + copies + plan.rng_state_bytes
    offloaded = sum(r.offloaded_bytes for r in rows)
    lines.append(line("total", saved, offloaded, sum(r.recomputed_bytes for r in rows), total))
    return "\n".join(lines)


def largest_decisions(plan: Plan, top: int = 10) -> str:
    """The ``top`` largest saves (by bytes) and recomputes (by cost, then bytes; by bytes
    where none costs anything, as the pointwise ops a flops count prices at 0)."""
    saves = sorted(
        (d for d in plan.decisions if d.decision == "save"), key=lambda d: (-d.bytes, d.name)
    )
    recomputes = sorted(
        (d for d in plan.decisions if d.decision == "recompute"),
        key=lambda d: (-d.cost, -d.bytes, d.name),
    )
    free = bool(recomputes) and recomputes[0].cost == 0  # the costliest costs nothing
    out = []
    for label, rows, by in (
        ("saves", saves, "bytes"),
        ("recomputes", recomputes, "bytes, each free" if free else "cost"),
    ):
        if not rows:
            out.append(f"largest {label}: none")
            continue
        shown = rows[:top]
        scale = cost_scale([d.cost for d in shown], plan.cost_unit)
        out.append(f"largest {label} ({len(shown)} of {len(rows)}, by {by})")
        in_bytes = by.startswith("bytes")
        mod_w = WIDTH - 2 - 13 - 2 - 20 - 1 - 14 - 1
        out.append(f"  {'bytes' if in_bytes else 'cost':>13}  {'node':<20} {'op':<14} module")
        for d in shown:
            value = (
                format_bytes(d.bytes) if in_bytes else format_cost(d.cost, plan.cost_unit, scale)
            )
            out.append(
                f"  {value:>13}  {shorten(d.name, 20):<20} {shorten(short_op(d.op), 14):<14} "
                f"{shorten(d.module or '-', mod_w)}"
            )
    return "\n".join(out)
