"""``Plan``: the save/recompute decisions for one graph, with totals and provenance.

A Plan is the product users see and trust before training: what is saved, what is
recomputed, what that costs, how it was found. It is plain data that round-trips through
JSON (``plan.to_json()`` / ``Plan.from_json(text)``) with a format version, and prints as
an aligned table.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .sizes import format_bytes

PLAN_FORMAT_VERSION = 1
Choice = Literal["save", "recompute", "input"]


@dataclass
class Decision:
    name: str
    op: str
    bytes: int  # bytes of the node's storage (0 for inputs and shared storages)
    cost: float  # recompute cost in the plan's cost unit
    flops: float
    decision: Choice
    module: str = ""


@dataclass
class Plan:
    budget: float | str  # the budget asked for: a fraction, or a size like "36MiB"
    target_bytes: int
    saved_bytes: int
    min_bytes: int
    max_bytes: int
    recompute_cost: float
    recompute_flops: float
    cost_unit: str
    status: Literal["optimal", "feasible", "reference"]
    gap: float | None
    solver: str
    estimator: str
    torch_version: str
    graph_hash: str
    decisions: list[Decision] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    version: int = PLAN_FORMAT_VERSION

    @property
    def saved(self) -> list[str]:
        return [d.name for d in self.decisions if d.decision == "save"]

    @property
    def recomputed(self) -> list[str]:
        return [d.name for d in self.decisions if d.decision == "recompute"]

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(asdict(self), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        try:
            data: dict[str, Any] = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"not a budget plan: invalid JSON ({e})") from None
        if not isinstance(data, dict) or "version" not in data:
            raise ValueError("not a budget plan: no 'version' field")
        if data["version"] != PLAN_FORMAT_VERSION:
            raise ValueError(
                f"plan format version {data['version']} is not supported "
                f"(this budget reads version {PLAN_FORMAT_VERSION})"
            )
        data["decisions"] = [Decision(**d) for d in data.get("decisions", [])]
        try:
            return cls(**data)
        except TypeError as e:
            raise ValueError(f"not a budget plan: {e}") from None

    def __str__(self) -> str:
        gap = "" if self.gap in (None, 0.0) else f", gap {self.gap:.2%}"
        head = [
            f"budget plan for graph {self.graph_hash} (budget {self.budget})",
            f"  target     {format_bytes(self.target_bytes):>12}   "
            f"(range {format_bytes(self.min_bytes)} .. {format_bytes(self.max_bytes)})",
            f"  saved      {format_bytes(self.saved_bytes):>12}",
            f"  recompute  {_fmt_cost(self.recompute_cost, self.cost_unit):>12}   "
            f"({self.recompute_flops / 1e9:.3f} GFLOP)",
            f"  solver     {self.solver} ({self.status}{gap}), estimator {self.estimator}",
            "  timings    " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in self.timings.items()),
        ]
        rows = [d for d in self.decisions if d.decision != "input"]
        rows.sort(key=lambda d: (-d.bytes if d.decision == "save" else -d.cost, d.name))
        table = [f"  {'decision':<10} {'bytes':>11} {'cost':>11}  {'node':<24} op"]
        for d in rows[:20]:
            table.append(
                f"  {d.decision:<10} {format_bytes(d.bytes):>11} "
                f"{_fmt_cost(d.cost, self.cost_unit):>11}  {d.name[:24]:<24} {d.op[:30]}"
            )
        if len(rows) > 20:
            table.append(f"  ... {len(rows) - 20} more")
        return "\n".join(head + table)


def _fmt_cost(cost: float, unit: str) -> str:
    if unit == "flop":
        return f"{cost / 1e9:.3f} GF"
    if unit == "s":
        return f"{cost * 1e3:.3f} ms"
    return f"{cost:g} {unit}"
