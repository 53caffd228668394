"""ProblemBuilder (budget.core.builder): the one way both front ends build a Problem."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from budget.core.builder import ProblemBuilder


@dataclass
class Cost:
    cost: float
    flops: float = 0.0
    bytes_moved: float = 0.0
    note: str = ""


def test_rows_columns_and_storages():
    rows = ProblemBuilder()
    x = rows.add_kept(
        "x",
        op="placeholder",
        storage=rows.storage("in", 0),
        needed=True,
        reason="graph input",
        is_input=True,
    )
    # two outputs of one op cached whole: one group, each member's bytes counted once
    a_group = rows.storage("op", 100, member="out0")
    assert rows.storage("op", 50, member="out1") == a_group
    assert rows.storage("op", 999, member="out0") == a_group  # seen: not counted again
    a = rows.add_value(
        "a",
        op="mm",
        storage=a_group,
        needed=True,
        can_save=True,
        can_recompute=True,
        reason="",
        priced=Cost(2.0, 8.0, 3.0, "n"),
        module="m",
    )
    rng = rows.add_kept("rng", op="rng", storage=rows.new_storage(16), needed=True, reason="kept")
    p = rows.build([(x, a)], cost_unit="s", reference_saved=[a, a], graph_hash="h")
    assert p.names == ["x", "a", "rng"]
    assert p.storage_bytes.tolist() == [0, 150, 16]
    assert p.storage.tolist() == [0, 1, 2]
    assert p.is_input.tolist() == [True, False, False]
    assert p.can_recompute.tolist() == [False, True, False]
    assert p.cost.tolist() == [0.0, 2.0, 0.0] and p.flops.tolist() == [0.0, 8.0, 0.0]
    assert np.array_equal(p.moved, [0.0, 3.0, 0.0]) and p.cost_notes == ["", "n", ""]
    assert p.modules == ["", "m", ""] and p.reason == ["graph input", "", "kept"]
    assert p.reference_saved == [1] and p.graph_hash == "h" and p.cost_unit == "s"
    assert p.edges.tolist() == [[0, 1]] and rng == 2
