"""budget.compile.inductor_compile: one graph's Inductor compiles, each plan once, warm too.

A graph's attempts (the peak search's) can come back to a plan compiled before: that
attempt is stopped as partitioning makes the plan (test_attempts), and the plan cache
keeps the stopped attempt's plans under its key, so that the attempt of a later start
stops before partitioning at all (no search, no compile).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import budget
from budget.compile import inductor_hooks, plan_cache
from budget.compile.inductor_compile import GraphJob, attempts_of
from budget.errors import BudgetTooSmallError

pytestmark = pytest.mark.slow


def _job() -> GraphJob:
    """dynamo's graph of a small MLP's step, under a peak budget."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    x = torch.randn(64, 16)
    got = []

    def capture(gm, example_inputs):
        got.append((gm, example_inputs))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(lambda x: model(x).square().sum(), backend=capture)(x)
    gm, inputs = got[0]
    settings = budget.backend(peak_memory_budget="1GiB").settings
    return GraphJob(gm, inputs, settings, True, frozenset())


def test_a_return_stores_its_plan_and_a_warm_start_returns_before_partitioning(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("BUDGET_CACHE_DIR", str(tmp_path))
    partitioned = []
    real = inductor_hooks.budget_partition

    def counted(gm, joint_inputs, *, settings, **kw):
        partitioned.append(settings.search_peak_bytes)
        return real(gm, joint_inputs, settings=settings, **kw)

    monkeypatch.setattr(inductor_hooks, "budget_partition", counted)
    job = _job()
    # two graphs' targets far over the step's peak: the same plan (nothing recomputed),
    # each its own key in the caches
    high, higher = (
        dataclasses.replace(job.settings, search_peak_bytes=t) for t in (1 << 29, 1 << 30)
    )

    def entries() -> list[str]:
        return sorted(p.name for p in (tmp_path / "plans").glob("plans-*.json"))

    once = attempts_of(job)
    first = once(high)
    assert len(entries()) == 1
    back = once(higher)  # partitioned, stopped: not compiled again
    assert partitioned == [1 << 29, 1 << 30]
    assert back.compiled is first.compiled
    assert back.plan.saved == first.plan.saved
    assert back.plan.compiled_peak_bytes == first.plan.compiled_peak_bytes > 0
    assert back.plan.peak_target_bytes == higher.graphs_peak_bytes != first.plan.peak_target_bytes
    # the return's plan is cached under its own key, with the peak of its code
    # the attempt's partitioner's uuid: its settings' key (outputs held, no inputs held)
    key = plan_cache.graph_key(job.gm, job.example_inputs, plan_cache.settings_key(higher))
    (stored,) = plan_cache.load(key)
    assert stored.saved == first.plan.saved and stored.peak_target_bytes == 1 << 30
    assert stored.compiled_peak_bytes == first.plan.compiled_peak_bytes
    assert len(entries()) == 2

    # A later start (a fresh search): the return stops on the cached plan, before partitioning.
    partitioned.clear()
    hits, writes = plan_cache.stats["hits"], plan_cache.stats["writes"]
    once = attempts_of(job)
    again = once(high)
    back = once(higher)
    assert back.compiled is again.compiled and back.plan.saved == again.plan.saved
    assert back.plan.compiled_peak_bytes == again.plan.compiled_peak_bytes
    assert higher.graphs_peak_bytes not in partitioned
    assert plan_cache.stats["hits"] == hits + 2
    assert plan_cache.stats["writes"] == writes + (high.graphs_peak_bytes in partitioned)


def test_a_cached_plan_not_compiled_before_is_compiled(tmp_path, monkeypatch):
    """The warm start's check adds nothing to the attempt's log where the cached plan is
    new to this search: the attempt compiles (or hits torch's caches) as before."""
    monkeypatch.setenv("BUDGET_CACHE_DIR", str(tmp_path))
    job = _job()
    target = dataclasses.replace(job.settings, search_peak_bytes=1 << 29)
    cold = attempts_of(job)(target)
    warm = attempts_of(job)(target)
    assert len(warm.log.plans) == 1 and warm.plan.saved == cold.plan.saved
    assert warm.plan.compiled_peak_bytes == cold.plan.compiled_peak_bytes > 0


def test_progress_counts_the_plans_partitioned_over_every_attempt():
    """Each attempt's peak search counts its partitioned plans from 1; the graph's progress
    counts them over all its attempts (a count back at 1 each attempt would look stuck)."""
    job = _job()
    told = []
    once = attempts_of(job, lambda done, total: told.append((done, total)))
    once(dataclasses.replace(job.settings, search_peak_bytes=1 << 29))
    first = len(told)
    with pytest.raises(BudgetTooSmallError):  # a target under every plan: a longer search
        once(dataclasses.replace(job.settings, search_peak_bytes=1))
    assert 0 < first < len(told)
    assert told == [(k, None) for k in range(1, len(told) + 1)]


def test_a_compiled_preview_generates_each_plans_code_and_builds_no_kernel(monkeypatch, tmp_path):
    """``budget.plans(..., compile=True)``: Inductor generates the code of the plans a peak
    budget tries (their peak read), on fake tensors, and no kernel is built (a build
    would call ``_Deferred.start``) nor plan cached (its key would hold fake inputs); the
    plan and its code's peak are training's."""
    from budget.compile.kernels import _Deferred

    def built(self):  # type: ignore[no-untyped-def]
        raise AssertionError(f"a {self.kind} kernel was built")

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8))
    x = torch.randn(128, 32)
    scale = 1.5 + torch.rand(()).item()  # code no earlier compile generated

    def step(x):
        return (model(x) * scale).square().sum()

    torch._dynamo.reset()
    (b1,) = budget.plans(step, x, memory_budget=1.0)
    monkeypatch.setattr(_Deferred, "start", built)
    monkeypatch.setenv("BUDGET_CACHE_DIR", str(tmp_path))
    torch._dynamo.reset()
    told = []
    (plan,) = budget.plans(
        step,
        x,
        peak_memory_budget=f"{b1.peak_bytes - 1}B",
        compile=True,
        progress=lambda *a: told.append(a),
    )
    assert plan.compiled_peak_bytes is not None and plan.compiled_peak_bytes < b1.peak_bytes
    ticks = told[1:-1]
    assert told[0] == (0, 0, 1) and told[-1] == (0, 1, 1) and ticks
    assert ticks == [(0, k, None) for k in range(1, len(ticks) + 1)]
    assert not list(tmp_path.rglob("plans-*.json"))
    monkeypatch.undo()
    torch._dynamo.reset()
    be = budget.backend(peak_memory_budget=f"{b1.peak_bytes - 1}B")
    torch.compile(step, backend=be)(x).backward()
    (kept,) = be.plans
    assert (kept.saved_bytes, kept.compiled_peak_bytes) == (
        plan.saved_bytes,
        plan.compiled_peak_bytes,
    )
    with pytest.raises(ValueError, match="compile=True .* needs compiler='inductor', not 'eager'"):
        budget.plans(step, x, compile=True, compiler="eager")
