"""budget.compile.attempts: the attempts of one graph compile each plan once."""

from __future__ import annotations

from dataclasses import replace

from helpers.plans import make_plan

from budget.compile.attempts import Attempt, compiling_once, same_plan, stop_if_compiled
from budget.core.settings import PlanLog, PlanSettings
from budget.core.sizes import MemoryBudget


def _settings(peak: int) -> PlanSettings:
    return PlanSettings(MemoryBudget(fraction=1.0), "auto", "flops", 60.0, peak_bytes=peak)


def test_a_plan_partitioned_again_is_not_compiled_again_it_gets_the_code_compiled_before():
    # the graphs' search: targets 100 and 90 give one plan, 80 another
    again = {100: [], 90: [], 80: ["mul"]}
    lowered = []  # what reached "Inductor"

    def compile_fresh(settings, compiling):
        log = PlanLog(compiling=compiling)
        log.add_plan(
            make_plan(recomputed_again=again[settings.peak_bytes], budget=settings.peak_bytes)
        )
        lowered.append(settings.peak_bytes)  # not reached for a plan compiled before
        log.update(0, compiled_peak_bytes=1000 + settings.peak_bytes)  # its code's peak
        return Attempt(f"code for {settings.peak_bytes}", log, [settings.peak_bytes])

    compile_with = compiling_once(compile_fresh)
    first = compile_with(_settings(100))
    back = compile_with(_settings(90))
    assert (back.compiled, back.unbuilt, back.plan.compiled_peak_bytes) == (
        "code for 100",
        [100],
        1100,
    )
    assert back.plan.budget == 90  # the plan is this attempt's, with its own budget
    other = compile_with(_settings(80))
    assert other.compiled == "code for 80" and other.plan.compiled_peak_bytes == 1080
    assert compile_with(_settings(90)).compiled == "code for 100"
    assert lowered == [100, 80]
    assert first.plan.budget == 100


def test_a_plan_that_offloads_what_another_recomputes_is_not_the_same():
    plan = make_plan()
    moved = [replace(d, decision="offload") if d.name == "gelu" else d for d in plan.decisions]
    offloading = replace(plan, decisions=moved)
    # gelu offloaded where the plan recomputes it: the same saved set
    assert offloading.offloaded == ["gelu"] and offloading.saved == plan.saved
    assert not same_plan(plan, offloading)
    assert same_plan(plan, make_plan())


def test_cached_plans_of_a_plan_compiled_before_stop_the_attempt_before_it_partitions():
    """A warm start: the plan cache's plans for an attempt are checked before it compiles."""

    again = {100: [], 90: [], 80: ["mul"]}
    cached = {t: [make_plan(recomputed_again=again[t], budget=t)] for t in again}
    partitioned = []

    def compile_fresh(settings, compiling):
        log = PlanLog(compiling=compiling)
        stop_if_compiled(log, cached[settings.peak_bytes])  # the cache, before partitioning
        assert log.plans == []  # not a plan compiled before: the log as it was
        partitioned.append(settings.peak_bytes)
        log.add_plan(cached[settings.peak_bytes][0])
        log.update(0, compiled_peak_bytes=1000 + settings.peak_bytes)
        return Attempt(f"code for {settings.peak_bytes}", log)

    compile_with = compiling_once(compile_fresh)
    compile_with(_settings(100))
    back = compile_with(_settings(90))
    assert partitioned == [100]  # the return stopped on its cached plan
    assert (back.compiled, back.plan.budget, back.plan.compiled_peak_bytes) == (
        "code for 100",
        90,
        1100,
    )
    assert compile_with(_settings(80)).compiled == "code for 80"
    assert partitioned == [100, 80]
