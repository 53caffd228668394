"""budget.core.tables: a plan's per-module table and largest decisions, on hand-made plans."""

from __future__ import annotations

import pytest
from helpers.plans import KiB, MiB, make_plan

from budget.core.sizes import format_bytes
from budget.core.tables import NO_MODULE, largest_decisions, module_rows, module_table


def test_module_rows_aggregate_by_depth_in_graph_order():
    plan = make_plan()
    rows = {r.module: r for r in module_rows(plan, depth=2)}
    assert list(rows) == ["model.blocks.0", "model.blocks.1", "model", NO_MODULE]
    b0, b1 = rows["model.blocks.0"], rows["model.blocks.1"]
    assert (b0.saved_bytes, b0.recomputed_bytes, b0.recompute_cost) == (4 * MiB, 4 * MiB, 1e-4)
    assert (b1.saved_bytes, b1.recomputed_bytes, b1.recompute_cost) == (0, 2 * MiB, 3e-3)
    assert (b1.saves, b1.recomputes) == (1, 1)
    assert rows[NO_MODULE].recomputed_bytes == 512 * KiB
    # totals over the rows are the plan's: nothing is lost or counted twice
    assert sum(r.saved_bytes for r in rows.values()) == plan.saved_bytes
    shallow = [r.module for r in module_rows(plan, depth=1)]
    assert shallow == ["model.blocks", "model", NO_MODULE]
    deep = [r.module for r in module_rows(plan, depth=3)]
    assert "model.blocks.0.attn" in deep and "model.blocks.1.mlp" in deep
    with pytest.raises(ValueError, match="depth"):
        module_rows(plan, depth=0)


def test_offloaded_values_have_their_own_column_not_the_recomputed_one():
    plan = make_plan()
    assert "offloaded" not in module_table(plan)
    moved = next(d for d in plan.decisions if d.decision == "save" and d.bytes)
    moved.decision = "offload"
    rows = {r.module: r for r in module_rows(plan, depth=2)}
    before = {r.module: r for r in module_rows(make_plan(), depth=2)}
    key = next(k for k in rows if moved.module.startswith(k))
    assert rows[key].offloaded_bytes == moved.bytes
    assert rows[key].saved_bytes == before[key].saved_bytes - moved.bytes
    assert rows[key].recomputed_bytes == before[key].recomputed_bytes
    table = module_table(plan)
    head, total = table.splitlines()[1], table.splitlines()[-1]
    assert head.split() == ["module", "saved", "offloaded", "recomputed", "recompute", "cost"]
    assert total.split()[3:5] == [*format_bytes(moved.bytes).split()]
    assert max(len(line) for line in table.splitlines()) <= 80


def test_module_rows_without_a_shared_root():
    plan = make_plan()
    modules = ["", "enc.0.a", "enc.1", "dec.0", "dec.0", "", ""]
    for d, module in zip(plan.decisions, modules, strict=True):
        d.module = module
    assert [r.module for r in module_rows(plan, depth=1)] == ["enc", "dec", NO_MODULE]
    assert [r.module for r in module_rows(plan, depth=2)] == ["enc.0", "enc.1", "dec.0", NO_MODULE]


def test_largest_decisions_sorted_and_limited():
    text = largest_decisions(make_plan(), top=1)
    saves, recomputes = text.split("largest recomputes")
    assert "largest saves (1 of 3, by bytes)" in saves and "4.00 MiB  mm " in saves
    assert "(1 of 3, by cost)" in recomputes and "3.000 ms  mm_1" in recomputes
    assert "gelu" not in text


def test_recomputes_that_cost_nothing_are_listed_by_bytes_and_said_to_be_free():
    # a flops count prices pointwise ops at 0: a list "by cost" of zeros says nothing
    plan = make_plan()
    for d in plan.decisions:
        d.cost = 0.0
    recomputes = largest_decisions(plan, top=2).split("largest recomputes")[1]
    rows = [d for d in plan.decisions if d.decision == "recompute"]
    top = max(rows, key=lambda d: d.bytes)
    assert "(2 of 3, by bytes, each free)" in recomputes
    assert recomputes.splitlines()[1].split()[0] == "bytes"
    assert f"{format_bytes(top.bytes)}  {top.name} " in recomputes


def test_module_table_has_a_total_row():
    text = module_table(make_plan(), depth=2)
    total = text.splitlines()[-1].split()
    assert total[:3] == ["total", "5.00", "MiB"]
