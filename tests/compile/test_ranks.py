"""One plan on every rank: two gloo processes on this CPU, planning with different
settings, end with rank 0's plan on both; ranks compiling different graphs are refused.
"""

from __future__ import annotations

import json

import pytest
from helpers.ranks import run_ranks

import budget
from budget.models import get_builtin

GPT = dict(layers=2, d=64, heads=2, seq=64, batch=2, vocab=256)

# Each rank plans the same GPT with its own estimator and time limit: planned alone, the
# two settings give different plans (checked below), so only sharing makes them agree.
RANK = """
import json, os, sys
import torch.distributed as dist
import budget
from budget.models import get_builtin

rank = int(os.environ["RANK"])
dist.init_process_group("gloo", init_method="env://")
opts = json.loads(sys.argv[1])
ex = get_builtin("gpt", **opts["gpt"][rank])
settings = opts["settings"][rank]
try:
    (plan,) = budget.plans(ex.step, *ex.args, memory_budget=0.3, compiler="eager", **settings)
    print(json.dumps({"saved": plan.saved, "hash": plan.graph_hash, "solver": plan.solver}))
except Exception as e:
    print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
dist.destroy_process_group()
"""

SETTINGS = [{"estimator": "flops", "time_limit": 60}, {"estimator": "unit", "time_limit": 5}]


def _run_ranks(gpts: list[dict]) -> list[dict]:
    return run_ranks(RANK, json.dumps({"gpt": gpts, "settings": SETTINGS}))


@pytest.mark.slow
def test_every_rank_applies_rank_0s_plan():
    ex = get_builtin("gpt", **GPT)
    alone = [
        budget.plan(ex.step, *ex.args, memory_budget=0.3, compiler="eager", **s).saved
        for s in SETTINGS
    ]
    assert alone[0] != alone[1]  # planned alone, the two ranks would save different sets
    r0, r1 = _run_ranks([GPT, GPT])
    assert "error" not in r0 and "error" not in r1, (r0, r1)
    assert r0["saved"] == r1["saved"] == alone[0]
    assert r0["hash"] == r1["hash"]


@pytest.mark.slow
def test_ranks_compiling_different_graphs_are_refused():
    r0, r1 = _run_ranks([GPT, {**GPT, "batch": 4}])
    for r in (r0, r1):
        assert "PlanMismatchError" in r["error"] and "different graphs" in r["error"]
