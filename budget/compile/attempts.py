"""The plan-and-compile attempts of one graph under Inductor, each plan compiled once.

A peak budget, or a memory budget's plan held to the b=1 plan's code
(:mod:`budget.compile.peak_check`), plans and compiles a graph again for other targets of
the graphs' search; the search can hand back a plan compiled before (the same saved set
and the same values recomputed again), whose code and its peak are known. Compiling it
again costs Inductor's lowering and code generation for nothing, so an attempt's log
stops the compile as partitioning makes such a plan (``PlanLog.compiling``), and the
attempt compiled before hands back its code and its code's peak with the new plan (whose
budget and target are this attempt's): the search counts it as a return, as it did when
it was compiled again. The plan cache keeps a stopped attempt's plans under its key,
so that a warm start's return stops before partitioning too (:func:`stop_if_compiled`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.plan import Plan
from ..core.settings import PlanLog, PlanSettings


@dataclass
class Attempt:
    """One plan-and-compile: the compiled graphs and the log its plans went to."""

    compiled: Any
    log: PlanLog
    # the generated modules whose kernels are not built yet (compile/kernels.py): built
    # for the attempt kept only
    unbuilt: list[dict[str, Any]] = field(default_factory=list)

    @property
    def plan(self) -> Plan | None:
        """The graph's plan (None when the compile made no plan, or several)."""
        return self.log.plans[0] if len(self.log.plans) == 1 else None


def same_plan(a: Plan, b: Plan) -> bool:
    """Whether two plans of one graph partition it alike: what they save, offload and
    recompute again."""
    return (a.saved, a.offloaded, a.recomputed_again) == (
        b.saved,
        b.offloaded,
        b.recomputed_again,
    )


class CompiledBefore(Exception):  # noqa: N818 - a signal, not an error
    """Raised by an attempt's ``PlanLog.compiling`` to stop the compile of a plan compiled
    before (:func:`compiling_once` catches it)."""

    def __init__(self, attempt: Attempt, log: PlanLog) -> None:
        super().__init__("a plan compiled before")
        self.attempt, self.log = attempt, log


def stop_if_compiled(log: PlanLog, plans: Sequence[Plan]) -> None:
    """Raise :class:`CompiledBefore` where ``plans`` (the plan cache's for this attempt:
    what its partitioning would make) are a plan compiled before, as partitioning would,
    so that a warm start's return neither searches nor compiles; else leave ``log`` as
    it was."""
    if log.compiling is None:
        return
    mark = log.mark()
    for plan in plans:
        log.add_plan(plan)  # the hook raises for a plan compiled before
    log.rewind(mark)


def compiling_once(
    compile_fresh: Callable[[PlanSettings, Callable[[PlanLog, Plan], None]], Attempt],
) -> Callable[[PlanSettings], Attempt]:
    """A compile for :mod:`budget.compile.peak_check` from ``compile_fresh(settings,
    compiling)``, which plans and compiles with ``compiling`` as its log's
    ``PlanLog.compiling``: a plan partitioned again is not compiled again; its attempt
    gets the code, the unbuilt kernels and the code's peak of the attempt that compiled
    it."""
    compiled: list[Attempt] = []

    def compiling(log: PlanLog, plan: Plan) -> None:
        for attempt in compiled:
            if attempt.plan is not None and same_plan(attempt.plan, plan):
                raise CompiledBefore(attempt, log)

    def compile_with(settings: PlanSettings) -> Attempt:
        try:
            attempt = compile_fresh(settings, compiling)
        except CompiledBefore as e:
            before, log = e.attempt, e.log
            assert before.plan is not None
            log.update(len(log.plans) - 1, compiled_peak_bytes=before.plan.compiled_peak_bytes)
            return Attempt(before.compiled, log, before.unbuilt)
        compiled.append(attempt)
        return attempt

    return compile_with
