"""An eager plan as text: the plan's report, then its modules and their per-op policies.

``str(eager_plan)`` and ``budget solve --eager`` print it; returns text, prints nothing.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from ..core.report import plan_report
from ..core.sizes import format_bytes
from ..core.text import format_flops, short_op, shorten, wrap_items

if TYPE_CHECKING:  # plan.py imports this module for EagerPlan.__str__
    from .plan import EagerPlan, RegionChoice


def label(region: RegionChoice, calls: int = 1) -> str:
    """A region's name in a report: its label, naming the first call too where the step
    runs the module's forward ``calls`` times."""
    return f"{region.label} call 0" if calls > 1 and not region.call else region.label


def region_table(plan: EagerPlan) -> str:
    """One row per candidate module call: checkpointed or not, ops saved / recomputed,
    bytes kept by its cache and RNG state, recompute FLOPs."""
    chosen = sum(r.checkpoint for r in plan.regions)
    calls = Counter(r.module for r in plan.regions)
    what = "modules" if len(calls) == len(plan.regions) else "module calls"
    lines = [
        f"eager checkpointing: {chosen} of {len(plan.regions)} candidate {what} checkpointed",
        f"  {'module':<28} {'checkpoint':>10} {'saved/ops':>10} {'cached':>10} {'FLOPs':>12}",
    ]
    for r in plan.regions:
        name = shorten(label(r, calls[r.module]), 28)
        if not r.checkpoint:
            why = f"  ({r.reason})" if r.reason else ""
            lines.append(f"  {name:<28} {'no':>10}{why}")
            continue
        ops = f"{r.saved_ops}/{len(r.ops)}"
        lines.append(
            f"  {name:<28} {'yes':>10} {ops:>10} {format_bytes(r.saved_bytes):>10} "
            f"{format_flops(r.recompute_flops):>12}"
        )
    return "\n".join(lines)


def region_ops(region: RegionChoice, calls: int = 1) -> str:
    """The per-op policy of one checkpointed module: the op calls it caches (by position),
    the number it runs again (or, after the last saved tensor, not at all)."""
    saved = [
        f"{i}:{short_op(op)}"
        for i, (op, p) in enumerate(zip(region.ops, region.policy, strict=True))
        if p == "save"
    ]
    head = f"  {label(region, calls)}: save"
    lines = wrap_items(head, saved or ["nothing"])
    lines.append(f"    recompute the other {region.recomputed_ops} of {len(region.ops)} op calls")
    return "\n".join(lines)


def eager_report(plan: EagerPlan, *, depth: int = 2, top: int = 10, ops: bool = False) -> str:
    """The plan's report, its module table and, with ``ops``, every module's policy."""
    parts = [plan_report(plan, depth=depth, top=top), region_table(plan)]
    if ops:
        chosen = [r for r in plan.regions if r.checkpoint]
        calls = Counter(r.module for r in plan.regions)
        if chosen:
            parts.append(
                "per-op policy (op call index: op; the others are recomputed)\n"
                + "\n".join(region_ops(r, calls[r.module]) for r in chosen)
            )
    return "\n\n".join(parts)
