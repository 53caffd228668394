"""budget.compile.attempts: the attempts of one graph compile each plan once."""

from __future__ import annotations

from helpers.plans import make_plan

from budget.compile.attempts import Attempt, compiling_once, same_plan
from budget.core.settings import PlanLog, PlanSettings
from budget.core.sizes import MemoryBudget


def _settings(peak: int) -> PlanSettings:
    return PlanSettings(MemoryBudget(fraction=1.0), "auto", "flops", 60.0, peak_bytes=peak)


def test_a_plan_partitioned_again_is_not_compiled_again_its_first_attempt_comes_back():
    # the graphs' search: targets 100 and 90 give one plan, 80 another
    again = {100: [], 90: [], 80: ["mul"]}
    lowered = []  # what reached "Inductor"

    def compile_fresh(settings, compiling):
        log = PlanLog(compiling=compiling)
        log.add_plan(make_plan(recomputed_again=again[settings.peak_bytes]))
        lowered.append(settings.peak_bytes)  # not reached for a plan compiled before
        return Attempt(object(), log)

    compile_with = compiling_once(compile_fresh)
    first = compile_with(_settings(100))
    assert compile_with(_settings(90)) is first
    other = compile_with(_settings(80))
    assert other is not first and not same_plan(other.plan, first.plan)
    assert compile_with(_settings(90)) is first
    assert lowered == [100, 80]


def test_a_log_without_the_hook_adds_plans_as_before():
    log = PlanLog()
    log.add_plan(make_plan())
    log.add_plan(make_plan())
    assert len(log.plans) == 2
