"""A hand-made plan whose every number is known, for the report tests."""

from __future__ import annotations

from budget.core.plan import Decision, Plan

KiB, MiB = 2**10, 2**20


def make_plan(cost_unit: str = "s", budget: float | str = 0.5, **kw) -> Plan:
    decisions = [
        Decision("x", "placeholder", 0, 0.0, 0.0, "input", ""),
        Decision("mm", "aten.mm.default", 4 * MiB, 2e-3, 2e9, "save", "model.blocks.0.attn.qkv"),
        Decision(
            "gelu", "aten.gelu.default", 4 * MiB, 1e-4, 0.0, "recompute", "model.blocks.0.mlp"
        ),
        Decision("mm_1", "aten.mm.default", 2 * MiB, 3e-3, 3e9, "recompute", "model.blocks.1.mlp"),
        Decision("view", "aten.view.default", 0, 0.0, 0.0, "save", "model.blocks.1.mlp"),
        Decision("add", "aten.add.Tensor", 1 * MiB, 0.0, 0.0, "save", "model"),
        Decision("exp", "aten.exp.default", 512 * KiB, 0.0, 0.0, "recompute", ""),
    ]
    fields = dict(
        budget=budget,
        target_bytes=6 * MiB,
        saved_bytes=5 * MiB,
        min_bytes=1 * MiB,
        max_bytes=11 * MiB,
        recompute_cost=3.1e-3,
        recompute_flops=3e9,
        cost_unit=cost_unit,
        status="optimal",
        gap=0.0,
        solver="auto",
        estimator="flops",
        torch_version="2.13.0",
        graph_hash="0123456789abcdef",
        decisions=decisions,
        timings={"classify": 0.01, "estimate": 0.002, "solve": 0.3},
        compiler="inductor",
    )
    fields.update(kw)
    return Plan(**fields)
