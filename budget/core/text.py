"""Text primitives of budget's reports: numbers in a plan's own cost unit, FLOPs, seconds,
budgets as users wrote them, names shortened to fit, lists wrapped to a width. Pure string
formatting; nothing here prints or imports torch."""

from __future__ import annotations

from collections.abc import Sequence

from .sizes import format_bytes, parse_budget

WIDTH = 80

_FLOP_SCALES = ((1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP"))
_TIME_SCALES = ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"))


# --------------------------------------------------------------------------- numbers


def cost_scale(values: Sequence[float], unit: str) -> tuple[float, str]:
    """(divisor, label) that shows the largest of ``values`` in ``unit`` readably."""
    top = max((abs(v) for v in values), default=0.0)
    if unit == "flop":
        for scale, label in _FLOP_SCALES:
            if top >= scale:
                return scale, label
        return 1.0, "FLOP"
    if unit == "s":
        for scale, label in _TIME_SCALES:
            if top >= scale:
                return scale, label
        return 1e-9, "ns"
    return 1.0, unit


def format_cost(cost: float, unit: str, scale: tuple[float, str] | None = None) -> str:
    """``cost`` in ``unit`` for people: '1.208 GFLOP', '3.214 ms', '37 op'."""
    if cost == 0:
        return "0"
    divisor, label = scale or cost_scale([cost], unit)
    if unit in ("flop", "s"):
        return f"{cost / divisor:.3f} {label}"
    return f"{cost:g} {label}"


def format_flops(flops: float) -> str:
    return format_cost(flops, "flop")


def shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters with '...' in the middle (keeps both ends)."""
    if len(text) <= width:
        return text
    if width <= 3:
        return text[:width]
    tail = (width - 3) * 2 // 3
    head = width - 3 - tail
    return text[:head] + "..." + text[len(text) - tail :]


def short_op(op: str) -> str:
    """'aten.addmm.default' -> 'addmm', 'aten.add.Tensor' -> 'add.Tensor'."""
    for prefix in ("aten.", "prims."):
        if op.startswith(prefix):
            op = op[len(prefix) :]
    if op.endswith(".default"):
        op = op[: -len(".default")]
    if op == "<built-in function getitem>":
        return "getitem"
    return op


def describe_budget(budget: float | str) -> str:
    """A plan's ``budget`` field for people: '0.5 of the range', '512.00 MiB'."""
    parsed = parse_budget(budget)
    if parsed.fraction is not None:
        return f"{parsed.fraction:g} of the range"
    return format_bytes(parsed.nbytes or 0)


def format_seconds(t: float) -> str:
    return f"{t:.2f} s" if t >= 1 else f"{t * 1e3:.0f} ms"


def with_unit(cost: float, unit: str) -> str:
    """Like :func:`format_cost`, but a zero keeps its unit ('0 s', '0 FLOP')."""
    return format_cost(cost, unit) if cost else f"0 {cost_scale([1.0], unit)[1]}"


def wrap_items(prefix: str, items: Sequence[str], width: int = WIDTH, sep: str = ",") -> list[str]:
    """``prefix item, item, ...`` over as many lines as it takes to stay within ``width``."""
    lines: list[str] = []
    line, empty = prefix, True
    for i, item in enumerate(items):
        piece = item + (sep if i < len(items) - 1 else "")
        if not empty and len(line) + 1 + len(piece) > width:
            lines.append(line)
            line, empty = " " * len(prefix), True
        line, empty = f"{line} {piece}", False
    lines.append(line)
    return lines


def budget_cell(budget: float | str) -> str:
    """A plan's budget, short: '0.5', '64.00 MiB'."""
    parsed = parse_budget(budget)
    return f"{parsed.fraction:g}" if parsed.fraction is not None else format_bytes(parsed.nbytes)
