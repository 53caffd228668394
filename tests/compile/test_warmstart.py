"""Warm starts: torch's compile caches and budget's plan cache (budget/compile/plan_cache.py).

A second process compiling the same step with the same settings and cache directories
hits torch's AOTAutograd and FX graph caches (torch's own counters say so) and gets the
plans of the first from the plan cache, without solving; a changed setting misses and
plans; a stale entry (another budget version, an edited file) is never used. The
processes share the Inductor cache, so only the first compiles C++ kernels.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers.plans import make_plan

import budget
from budget.compile import plan_cache
from budget.compile.inductor_hooks import InductorPartitioner

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, sys
import torch
from torch import nn
from torch._dynamo.utils import counters
import budget
from budget.compile import plan_cache

torch.manual_seed(0)
# deep enough that its plans at 0.5 and 0.6 are predicted well under b=1's peak: one
# compile each (a plan near b=1's has the b=1 plan compiled too: hold_b1_peak)
layers = [m for _ in range(6) for m in (nn.Tanh(), nn.Linear(64, 64))]
model = nn.Sequential(nn.Linear(16, 64), *layers, nn.Tanh(), nn.Linear(64, 4))
x = torch.randn(256, 16)
seen = []
be = budget.backend(float(sys.argv[1]), solver=sys.argv[2], on_plan=seen.append)
torch.compile(lambda x: model(x).square().sum(), backend=be)(x).backward()
print("RESULT " + json.dumps({
    "aot": dict(counters["aot_autograd"]),
    "fx": {k: v for k, v in counters["inductor"].items() if k.startswith("fxgraph_cache")},
    "stats": plan_cache.stats,
    "on_plan": len(seen),
    "plans": [
        {"saved": p.saved, "hash": p.graph_hash, "budget": p.budget, "solver": p.solver,
         "saved_bytes": p.saved_bytes, "timings": sorted(p.timings),
         "compiled_peak": p.compiled_peak_bytes}
        for p in be.plans
    ],
}))
"""


def _child(tmp_path: Path, memory_budget: float, solver: str = "auto", **env: str) -> dict:
    environ = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
        "BUDGET_CACHE_DIR": str(tmp_path / "budget"),
        **env,
    }
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(memory_budget), solver],
        env=environ,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise AssertionError(f"child failed:\n{done.stdout}\n{done.stderr[-4000:]}")


def _entries(tmp_path: Path) -> dict[float | str, Path]:
    """The plan cache's entries, by the budget of their plan."""
    found = {}
    for path in (tmp_path / "budget" / "plans").glob("plans-*.json"):
        found[json.loads(path.read_text())["plans"][0]["budget"]] = path
    return found


def _aot(result: dict) -> tuple[int, int]:
    """(hits, misses) of AOTAutograd's cache in a child."""
    return result["aot"].get("autograd_cache_hit", 0), result["aot"].get("autograd_cache_miss", 0)


def _same_plans(a: dict, b: dict) -> bool:
    keys = ("saved", "hash", "budget", "solver", "saved_bytes")
    return [[p[k] for k in keys] for p in a["plans"]] == [[p[k] for k in keys] for p in b["plans"]]


@pytest.mark.slow
def test_a_second_process_hits_torchs_caches_and_reads_its_plans(tmp_path):
    cold = _child(tmp_path, 0.5)
    assert _aot(cold) == (0, 1)
    assert cold["stats"] == {"hits": 0, "misses": 1, "writes": 1, "replans": 0}
    assert len(cold["plans"]) == 1 and "solve" in cold["plans"][0]["timings"]
    assert cold["plans"][0]["compiled_peak"] > 0  # the peak of the code Inductor generated

    warm = _child(tmp_path, 0.5)
    assert _aot(warm) == (1, 0)
    assert warm["fx"].get("fxgraph_cache_hit") == 2  # the forward and the backward
    assert warm["stats"] == {"hits": 1, "misses": 0, "writes": 0, "replans": 0}
    assert _same_plans(warm, cold) and warm["on_plan"] == 1
    assert warm["plans"][0]["timings"] == ["plan cache"]  # nothing solved
    assert warm["plans"][0]["compiled_peak"] == cold["plans"][0]["compiled_peak"]  # cached


# A child process each (about 10 s in CI): in process, a changed setting is a new key
# (test_the_graph_key_follows_the_graph_its_inputs_and_the_settings) and a stale entry is
# never read (test_a_stale_or_edited_entry_is_never_read)
@pytest.mark.full
def test_another_process_plans_again_for_another_setting_or_a_stale_entry(tmp_path):
    cold = _child(tmp_path, 0.5)
    # A setting that changes the plan misses torch's caches and budget's: a fresh plan.
    other = _child(tmp_path, 0.6)
    assert _aot(other) == (0, 1) and other["stats"]["hits"] == 0
    (plan,) = other["plans"]
    assert plan["budget"] == 0.6 and "solve" in plan["timings"]
    assert plan["saved"] != cold["plans"][0]["saved"]

    # A stale entry (written by another budget version) is not read: torch still hits, so
    # budget plans and compiles again (the FX graph cache holds the code: none generated),
    # for the plan and the peak of its code, and rewrites the entry.
    entry = _entries(tmp_path)[0.5]
    data = json.loads(entry.read_text())
    entry.write_text(json.dumps({**data, "budget": "0.0.0-stale"}))
    stale = _child(tmp_path, 0.5)
    assert _aot(stale) == (1, 0)
    assert stale["stats"] == {"hits": 0, "misses": 1, "writes": 1, "replans": 1}
    assert _same_plans(stale, cold) and "solve" in stale["plans"][0]["timings"]
    assert stale["plans"][0]["compiled_peak"] == cold["plans"][0]["compiled_peak"]
    assert json.loads(entry.read_text())["budget"] == budget.__version__
    # With the plan cache off, AOTAutograd's cache is off too and the FX graph cache left
    # as configured: test_autograd_cache_only_where_its_hits_keep_their_plans, in process.


# ------------------------------------------------------------- the plan cache, in process


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("BUDGET_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_ranks_compare_cached_plans_by_all_that_decides_a_return():
    """Ranks agree on the plan cache by its digest; a plan compiled before is one that
    saves, offloads and recomputes again alike (budget.compile.attempts.same_plan), so
    plans differing in any of these have different digests."""
    from dataclasses import replace

    plan = make_plan()
    moved = [replace(d, decision="offload") if d.name == "gelu" else d for d in plan.decisions]
    variants = [plan, replace(plan, recomputed_again=["mul"]), replace(plan, decisions=moved)]
    assert len({plan_cache.plans_digest([p]) for p in variants}) == 3
    assert plan_cache.plans_digest([make_plan()]) == plan_cache.plans_digest([plan])
    assert plan_cache.plans_digest(None) is None


def test_an_entry_is_read_back_marked_as_cached(cache_dir):
    plan = make_plan()
    plan_cache.store("k" * 64, [plan])
    (got,) = plan_cache.load("k" * 64)
    assert got.saved == plan.saved and got.graph_hash == plan.graph_hash
    assert list(got.timings) == ["plan cache"]
    assert plan_cache.load("j" * 64) is None  # another key


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: {**d, "budget": "0.0.0"},  # another budget version
        lambda d: {**d, "torch": "1.0"},  # another torch version
        lambda d: {**d, "key": "j" * 64},  # a file named for this key, holding another
        lambda d: {**d, "format": 0},
        # an edited plan: saves something else than what the checksum covers
        lambda d: {**d, "plans": [{**d["plans"][0], "saved_bytes": 1}]},
        lambda d: {**d, "plans": "nope"},
    ],
)
def test_a_stale_or_edited_entry_is_never_read(cache_dir, edit):
    key = "k" * 64
    plan_cache.store(key, [make_plan()])
    path = plan_cache.entry_path(key)
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))
    assert plan_cache.load(key) is None


@pytest.mark.parametrize("text", ["", "{", "[]", "null", '{"format": 1}', "\x00\xff"])
def test_a_corrupt_entry_is_ignored_not_an_error(cache_dir, text):
    key = "k" * 64
    plan_cache.store(key, [make_plan()])
    plan_cache.entry_path(key).write_text(text)
    assert plan_cache.load(key) is None


def test_an_empty_cache_dir_setting_turns_the_plan_cache_off(monkeypatch):
    monkeypatch.setenv("BUDGET_CACHE_DIR", "")
    assert not plan_cache.enabled() and plan_cache.entry_path("k") is None
    plan_cache.store("k", [make_plan()])  # nothing, and no error
    assert plan_cache.load("k") is None


def test_the_partitioner_pickles_as_its_uuid_alone():
    """torch's cache keys pickle Inductor's config, the partitioner in it: two backends with
    the same settings give the same bytes whatever plans and observers they hold."""
    a, b = budget.backend(0.5), budget.backend(0.5, on_plan=print)
    b.log.plans.append(make_plan())
    pa, pb = InductorPartitioner(a), InductorPartitioner(b)
    assert pickle.dumps(pa) == pickle.dumps(pb)
    assert pickle.loads(pickle.dumps(pa)).uuid() == pa.uuid()
    assert pickle.dumps(pa) != pickle.dumps(InductorPartitioner(budget.backend(0.3)))


def test_the_settings_key_names_the_version_the_code_and_the_host():
    key = InductorPartitioner(budget.backend(0.5, estimator="roofline")).uuid()
    assert key.startswith(f"budget-{budget.__version__}-{plan_cache.code_hash()}-")
    assert f"{torch.get_num_threads()} threads" in key  # a device-less estimator: this host
    named = InductorPartitioner(budget.backend(0.5, estimator="roofline:h100")).uuid()
    assert f"{torch.get_num_threads()} threads|measure" in named  # convolutions measured here
    with budget.config.patch(conv_workspace="rule"):
        named = InductorPartitioner(budget.backend(0.5, estimator="roofline:h100")).uuid()
    assert "threads" not in named and named.endswith("rule")
    for kw in ({"solver": "cpsat"}, {"estimator": "flops"}, {"time_limit": 5}):
        assert InductorPartitioner(budget.backend(0.5, **kw)).uuid() != key
    offload = InductorPartitioner(budget.backend(0.5, estimator="roofline", offload=True))
    assert offload.uuid() != key  # a plan that may offload is another plan
    with budget.config.patch(buffer_reuse=True):  # other code, another compiled peak
        reuse = InductorPartitioner(budget.backend(0.5, estimator="roofline"))
    assert reuse.uuid() != key and "reuse=True" in reuse.uuid()
    with budget.config.patch(fusion_distance=None):  # Inductor's fusions: other code
        fused = InductorPartitioner(budget.backend(0.5, estimator="roofline"))
    assert fused.uuid() != key and "fusion=None" in fused.uuid() and "fusion=32" in key
    import budget.compile.offload as copies

    before, copies.SIDE_STREAM = copies.SIDE_STREAM, False
    try:  # copies on the compute stream: priced and run otherwise
        in_stream = InductorPartitioner(budget.backend(0.5, estimator="roofline")).uuid()
    finally:
        copies.SIDE_STREAM = before
    assert in_stream != key and "side=False" in in_stream and "side=True" in key


def test_the_code_hash_covers_every_module_a_training_compile_imports():
    """A change to any code a training compile runs must miss the plan cache: every budget
    module that importing the backend loads (in a fresh process) is in PLANNING_CODE."""
    code = (
        "import sys, budget.compile.backend; "
        "print(' '.join(m for m in sys.modules if m.startswith('budget.')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    root = Path(budget.__file__).parent
    hashed = {root / name for name in plan_cache.PLANNING_CODE}
    for name in loaded:
        path = root.joinpath(*name.split(".")[1:])
        if name == "budget._version":
            continue  # the version is in the key itself
        assert any(path in (h, h.with_suffix("")) or h in path.parents for h in hashed), name


def test_each_peak_target_of_a_compiled_peak_search_has_its_own_key():
    """The compiled-peak check (compile/peak_check.py) compiles one graph for several
    graphs' targets under one peak budget: each attempt's plans differ, so torch's caches
    must not hand one attempt another's compile."""
    import dataclasses

    from budget.compile.backend import BudgetBackend

    be = budget.backend(peak_memory_budget="64MiB")
    keys = {
        InductorPartitioner(
            BudgetBackend(dataclasses.replace(be.settings, search_peak_bytes=target), be.log)
        ).uuid()
        for target in (None, 0, 50 << 20, 60 << 20)
    }
    assert len(keys) == 4


def test_the_graph_key_follows_the_graph_its_inputs_and_the_settings():
    def f(x, w):
        return (x @ w).relu().sum()

    gm = torch.fx.symbolic_trace(f)
    x, w = torch.randn(4, 8), torch.randn(8, 8, requires_grad=True)

    def key(*inputs, settings="s"):
        return plan_cache.graph_key(gm, inputs, settings)

    assert key(x, w) == key(torch.randn(4, 8), torch.randn(8, 8, requires_grad=True))
    assert key(x, w) != key(torch.randn(4, 9), w)  # shape
    assert key(x, w) != key(x, w.detach())  # requires_grad
    assert key(x, w) != key(x.double(), w)  # dtype
    assert key(x, w) != key(x, w, settings="t")  # settings
    square = torch.randn(8, 8)
    assert key(square, square) != key(square, square.clone())  # inputs sharing storage
    with torch.no_grad():
        no_grad = key(x, w)
    assert key(x, w) != no_grad  # grad mode
    other = torch.fx.symbolic_trace(lambda x, w: (x @ w).tanh().sum())
    assert plan_cache.graph_key(other, (x, w), "s") != key(x, w)  # the graph's code


@pytest.mark.parametrize(
    ("world", "cache", "autograd_cache"),
    [
        ((0, 1), "dir", True),  # one process, plan cache on: AOTAutograd's cache as torch has it
        ((0, 1), "", False),  # plan cache off: a hit would leave no plan
        # several ranks that do not all hold cached plans (none here): each must run the
        # partitioner's collectives; the plans are cached for the next start
        ((1, 2), "dir", False),
    ],
)
def test_autograd_cache_only_where_its_hits_keep_their_plans(
    tmp_path, monkeypatch, world, cache, autograd_cache
):
    from budget.compile import inductor_compile as B
    from budget.runtime import _torch_private as T

    seen = {}

    def fake_compile_fx(gm, example_inputs, config_patches=None, **kw):
        seen["autograd_cache"] = T.functorch_config.enable_autograd_cache
        seen["partitioner"] = config_patches["custom_partitioner_fn"]
        seen["fx_graph_cache"] = config_patches.get("fx_graph_cache", "as configured")
        return gm

    monkeypatch.setattr(T, "compile_fx", fake_compile_fx)
    monkeypatch.setattr(B.ranks, "world", lambda: world)
    # the other ranks hold what this one holds (a real job: tests/compile/test_ranks.py)
    monkeypatch.setattr(B.ranks, "all_hold", lambda digest: digest is not None)
    monkeypatch.setenv("BUDGET_CACHE_DIR", str(tmp_path) if cache else "")
    gm = torch.fx.symbolic_trace(lambda x: x.sin().sum())
    budget.backend(0.5)(gm, [torch.randn(3, requires_grad=True)])
    # True: left as configured (torch's default is on)
    configured = T.functorch_config.enable_autograd_cache
    assert seen["autograd_cache"] is (configured if autograd_cache else False)
    assert seen["fx_graph_cache"] == "as configured"  # on by default, in every case
    assert seen["partitioner"].uuid().startswith("budget-")
    written = list((tmp_path / "plans").glob("*.json")) if cache else []
    assert len(written) == (1 if cache else 0)  # the (empty) plans of the compile


def test_previews_use_no_compile_cache(monkeypatch):
    from budget.runtime import _torch_private as T

    seen = {}

    def fake_compile_fx(gm, example_inputs, config_patches=None, **kw):
        seen["autograd_cache"] = T.functorch_config.enable_autograd_cache
        seen["fx_graph_cache"] = config_patches["fx_graph_cache"]
        return gm

    monkeypatch.setattr(T, "compile_fx", fake_compile_fx)
    be = budget.backend(0.5)
    be.preview = True
    be(torch.fx.symbolic_trace(lambda x: x.sin().sum()), [torch.randn(3)])
    assert seen == {"autograd_cache": False, "fx_graph_cache": False}


RANK_CHILD = r"""
import json, os, sys
opts = json.loads(sys.argv[1])
os.environ["TORCHINDUCTOR_CACHE_DIR"] = opts["inductor"]
os.environ["BUDGET_CACHE_DIR"] = opts["budget"]
import torch
import torch.distributed as dist
from torch import nn
from torch._dynamo.utils import counters
import budget

rank = int(os.environ["RANK"])
dist.init_process_group("gloo", init_method="env://")
torch.manual_seed(0)
# deep enough that its plans at 0.5 and 0.6 are predicted well under b=1's peak: one
# compile each (a plan near b=1's has the b=1 plan compiled too: hold_b1_peak)
layers = [m for _ in range(6) for m in (nn.Tanh(), nn.Linear(64, 64))]
model = nn.Sequential(nn.Linear(16, 64), *layers, nn.Tanh(), nn.Linear(64, 4))
x = torch.randn(256, 16)
# the ranks plan with different estimators: only rank 0's plan can be on both
be = budget.backend(0.3, estimator=["flops", "unit"][rank])
torch.compile(lambda x: model(x).square().sum(), backend=be)(x).backward()
print(json.dumps({
    "hits": counters["aot_autograd"]["autograd_cache_hit"],
    "plans": [[p.graph_hash, p.saved] for p in be.plans],
    "timings": [sorted(p.timings) for p in be.plans],
}), flush=True)
dist.barrier()
dist.destroy_process_group()
"""


# about 60 s in CI: with -m full. Each part runs by default apart: a second process's warm
# start (above) and every rank applying rank 0's plans (tests/compile/test_ranks.py)
@pytest.mark.full
def test_ranks_start_warm_through_torchs_cache_with_rank_0s_plans(tmp_path):
    """Two gloo ranks sharing cache directories, started three times. First: they plan
    together (rank 0 solves), torch's AOTAutograd cache off, plans cached. Second: every
    rank holds the same cached plans, so torch's cache is on; it has no entries yet, and
    each rank applies the cached plans (no solve). Third: torch's cache hits on both ranks.
    Every start, both ranks have rank 0's plans of the first."""
    from helpers.ranks import run_ranks

    arg = json.dumps({"inductor": str(tmp_path / "inductor"), "budget": str(tmp_path / "b")})
    starts = [run_ranks(RANK_CHILD, arg) for _ in range(3)]
    first = starts[0][0]["plans"]
    assert first and all(r["plans"] == first for start in starts for r in start)
    assert [r["hits"] for r in starts[0]] == [0, 0]
    assert all("solve" in t for t in starts[0][0]["timings"])  # rank 0 solved
    assert [r["hits"] for r in starts[1]] == [0, 0]
    assert all("solve" not in t and "apply" in t for r in starts[1] for t in r["timings"])
    assert all(r["hits"] >= 1 for r in starts[2]), starts[2]
