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
# Then, in the same processes, each plans a GPT of its own shape ("different").
RANK = """
import json, os, sys
import torch
import torch.distributed as dist
import budget
from budget.models import get_builtin

rank = int(os.environ["RANK"])
dist.init_process_group("gloo", init_method="env://")
opts = json.loads(sys.argv[1])
settings = opts["settings"][rank]
found = {}
for phase, gpts in opts["phases"].items():
    torch._dynamo.reset()
    ex = get_builtin("gpt", **gpts[rank])
    try:
        (plan,) = budget.plans(ex.step, *ex.args, memory_budget=0.3, compiler="eager", **settings)
        found[phase] = {"saved": plan.saved, "hash": plan.graph_hash, "solver": plan.solver}
    except Exception as e:
        found[phase] = {"error": f"{type(e).__name__}: {e}"}
print(json.dumps(found))
dist.destroy_process_group()
"""

SETTINGS = [{"estimator": "flops", "time_limit": 60}, {"estimator": "unit", "time_limit": 5}]


@pytest.mark.slow
def test_every_rank_applies_rank_0s_plan_and_ranks_compiling_different_graphs_are_refused():
    """One pair of processes (their start-up is most of the time): the same GPT on both
    ranks, then GPTs of different batch sizes."""
    ex = get_builtin("gpt", **GPT)
    alone = [
        budget.plan(ex.step, *ex.args, memory_budget=0.3, compiler="eager", **s).saved
        for s in SETTINGS
    ]
    assert alone[0] != alone[1]  # planned alone, the two ranks would save different sets
    phases = {"same": [GPT, GPT], "different": [GPT, {**GPT, "batch": 4}]}
    r0, r1 = run_ranks(RANK, json.dumps({"phases": phases, "settings": SETTINGS}))
    same = r0["same"], r1["same"]
    assert all("error" not in r for r in same), same
    assert same[0]["saved"] == same[1]["saved"] == alone[0]
    assert same[0]["hash"] == same[1]["hash"]
    for r in (r0["different"], r1["different"]):
        assert "PlanMismatchError" in r["error"] and "different graphs" in r["error"], r
