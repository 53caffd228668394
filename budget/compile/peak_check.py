"""A peak budget under Inductor, held by the code Inductor generates, not by the graphs.

The peak search (:func:`budget.compile.peak_plan.plan_for_peak`) picks plans by the
graphs' predicted peak (:mod:`budget.compile.peak`). Inductor fuses and reorders those
graphs, so the step peaks elsewhere: under the prediction on most models, a little over
it on some (bench/real_model_peaks.py). Each compile therefore reads the peak of its
generated code (:mod:`budget.compile.compiled_peak`, ``plan.compiled_peak_bytes``), and
:func:`fit_compiled_peak` plans and compiles again where that peak misses the budget, or
leaves more than ``PEAK_SLACK`` of it unused (recompute left on the table), at most
``PEAK_ATTEMPTS`` new plans compiled: for the budget scaled by the last plan's ratio of
predicted to compiled peak; once one graphs' target gave a plan whose code fits and a
higher one a plan whose code misses, for the midpoint between (a cheaper plan that fits
can only be predicted there); where a plan compiled before comes back with room to
spare, for the target it came back at raised by that room (a cheaper plan can hide
there). A search that comes back to a compiled plan twice stops: each return costs a
search and a partition (not a compile, and on a warm start neither:
:mod:`budget.compile.attempts`); so does one whose next target is under the lowest
prediction the graphs' search named, once that plan is compiled (the search would refuse
it, naming that plan again). The compiled peak does not follow the prediction
monotonically (a plan predicted lower can compile higher), so where no compile has fit by
the last attempt, the last one is of the plan the graphs predict lowest; where none fits,
the memory budgets' own plans are compiled too (:func:`_fraction_plans`): a budget is
refused only when all their code misses it. It keeps the plan with the least recompute
whose code fits; when none does it raises :class:`BudgetTooSmallError` naming the lowest
compiled peak (and saying whether the plan the graphs predict lowest was among those
compiled). Under a memory budget alone, :func:`hold_b1_peak` holds a convnet's plan to the
b=1 plan's compiled peak. A compile is a callable here, so the search is tested without
Inductor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..core.plan import Plan
from ..core.settings import LOWEST_PEAK, PlanSettings
from ..core.sizes import MemoryBudget, format_bytes
from ..errors import BudgetTooSmallError
from ..planning.planner import PEAK_GRID
from .attempts import Attempt, same_plan

_log = logging.getLogger(__name__)

# how many times at most a graph is planned and compiled for a peak budget
PEAK_ATTEMPTS = 4
# under a memory budget alone, the new plans compiled at most to hold a plan to the b=1
# plan's code (hold_b1_peak: a best effort, the memory budget is the contract), the
# fractions' plans not among them
HOLD_ATTEMPTS = 2
# a fitting plan whose compiled peak is within this fraction of the budget is kept as it is
PEAK_SLACK = 0.02
# where no plan the graphs' search gave fits, the fractions' own plans compiled at most, and
# how many in a row may come back no lower than the lowest so far (_fraction_plans)
FRACTION_ATTEMPTS = 6
FRACTION_RISES = 2
NO_LIMIT = 1 << 62  # a graphs' target every plan meets: the memory budget's own plan
# a memory budget's plan predicted to peak within this share of the b=1 plan's peak has
# its compiled peak checked against the b=1 plan's (hold_b1_peak)
B1_NEAR = 0.85


def fit_compiled_peak(
    settings: PlanSettings,
    compile_with: Callable[[PlanSettings], Attempt],
    *,
    attempts: int = PEAK_ATTEMPTS,
    fractions: bool = True,
) -> Attempt:
    """The attempt to keep for ``settings`` (module docstring). ``compile_with(s)`` plans
    and compiles the graph with settings ``s`` (their ``graphs_peak_bytes`` is the target
    the graphs are searched for; ``peak_bytes``, the budget, stays as given) or raises the
    search's BudgetTooSmallError. Without a peak budget, or when the first compile's peak
    is unknown (C++ wrapper code, a compile cache that skipped code generation), the first
    attempt is kept as it is. ``attempts``: new plans compiled at most; ``fractions``:
    whether the fractions' own plans are compiled where none of those fits."""
    target = settings.peak_bytes
    if target is None:
        return compile_with(settings)
    search = _Search(target, attempts)
    # each pass compiles once or is refused by the graphs' search (which names the lowest
    # prediction, planned for next): at most two passes a compile
    for n in range(2 * attempts):
        if len(search.tried) == attempts:
            break
        asked = settings.graphs_peak_bytes
        try:
            attempt = compile_with(settings)
        except BudgetTooSmallError as e:
            ahead = search.refused_with(e)
            low = "?" if e.lowest_peak_bytes is None else format_bytes(e.lowest_peak_bytes)
            _log.info(
                "peak budget %s: no plan predicted to fit (lowest %s)", format_bytes(target), low
            )
        else:
            plan = attempt.plan
            if plan is None or plan.compiled_peak_bytes is None:
                if n == 0:
                    return attempt  # nothing to check it on: the graphs' search stands
                break  # unchecked after a retry: not kept
            ahead = search.compiled(attempt, asked)
            _log.info(
                "peak budget %s: a plan compiled, its code peaks at %s (%s)",
                format_bytes(target),
                format_bytes(plan.compiled_peak_bytes),
                "fits" if plan.compiled_peak_bytes <= target else "over",
            )
        if ahead is None:
            break
        goal = "the lowest peak" if ahead == LOWEST_PEAK else f"a peak of {format_bytes(ahead)}"
        _log.info("peak budget %s: planning again, the graphs for %s", format_bytes(target), goal)
        settings = replace(settings, search_peak_bytes=ahead)
    return search.kept(settings, compile_with if fractions else None)


@dataclass
class _Search:
    """What :func:`fit_compiled_peak` knows between compiles."""

    target: int  # the peak budget
    attempts: int  # new plans compiled at most
    tried: list[Attempt] = field(default_factory=list)  # each plan compiled, once
    refused: BudgetTooSmallError | None = None  # the graphs' search's last refusal
    lowest_named: int | None = None  # the lowest prediction a refusal by the graphs named
    lowest_asked: bool = False  # the plan the graphs predict lowest asked for
    # the graphs' targets tried so far: the highest whose plan's code fits the budget, the
    # lowest above it whose plan's code misses (between them: bisection)
    fit_at: int | None = None
    miss_at: int | None = None
    revisits: int = 0  # returns to a plan compiled before (a target that found no new one)

    def refused_with(self, e: BudgetTooSmallError) -> int | None:
        """The graphs' search found no plan for the target: plan next for the lowest
        prediction it names, unless that plan was compiled already (None: stop)."""
        self.refused, lowest = e, e.lowest_peak_bytes
        self.lowest_named = lowest if lowest is not None else self.lowest_named
        if lowest is None or lowest in _predicted(self.tried):
            return None
        self.lowest_asked = True  # the search went as low as it could: no need to ask again
        return lowest  # the lowest predicted plan

    def compiled(self, attempt: Attempt, asked: int | None) -> int | None:
        """The graphs' target to plan for after ``attempt`` (asked for at ``asked``), or
        None to stop: its plan fits with little room, or no new plan is likely."""
        plan = attempt.plan
        assert plan is not None and plan.compiled_peak_bytes is not None
        peak = plan.compiled_peak_bytes
        self._bracket(asked, plan.peak_bytes, peak)
        again = any(same_plan(plan, a.plan) for a in self.tried if a.plan is not None)
        self.revisits += again
        if not again:
            self.tried.append(attempt)
            if peak <= self.target and (
                plan.total_recompute_cost == 0 or self.target - peak <= PEAK_SLACK * self.target
            ):
                return None
            if (
                len(self.tried) == self.attempts - 1
                and not self.lowest_asked
                and not _fitting(self.tried, self.target)
            ):
                # the last compile: the plan the graphs predict lowest (a budget of 0 is
                # refused by the graphs' search, naming it)
                self.lowest_asked = True
                return LOWEST_PEAK
        if again and self.revisits > 1:
            return None  # no new plan where one was likeliest: more searches would be wasted
        predicted = plan.peak_bytes or peak
        ahead = _next_target(self.target, asked, predicted, peak, self.fit_at, self.miss_at, again)
        # under the lowest prediction, compiled already, the graphs' search would refuse
        # the target naming it again: a search wasted
        lowest = self.lowest_named
        if lowest is not None and lowest in _predicted(self.tried):
            return None if ahead is not None and ahead < lowest else ahead
        return ahead

    def _bracket(self, asked: int | None, predicted: int | None, peak: int) -> None:
        """The graphs' search gives a plan for every target from its prediction up to
        ``asked``: a cheaper one can only be found above ``asked``, and not above a plan
        that misses (it gives that plan or a dearer one)."""
        if asked is None or asked <= 0:
            return
        if peak <= self.target:
            self.fit_at = max(self.fit_at or 0, asked)
            if self.miss_at is not None and self.miss_at <= self.fit_at:
                self.miss_at = None  # not monotonic: the miss below says nothing above
        elif self.fit_at is None or asked > self.fit_at:
            bound = min(asked, predicted or asked)
            self.miss_at = bound if self.miss_at is None else min(self.miss_at, bound)

    def kept(
        self, settings: PlanSettings, compile_with: Callable[[PlanSettings], Attempt] | None
    ) -> Attempt:
        """The cheapest attempt whose code fits, the fractions' own plans tried where none
        did (given ``compile_with``); else the refusal, naming the lowest compiled peak."""
        if compile_with is not None and self.tried and not _fitting(self.tried, self.target):
            _fraction_plans(settings, compile_with, self.tried)
        fits = _fitting(self.tried, self.target)
        if fits:
            return min(fits, key=_cost)
        if not self.tried:
            assert self.refused is not None
            raise self.refused
        with_lowest = self.lowest_named is not None and self.lowest_named in _predicted(self.tried)
        plans = [a.plan for a in self.tried if a.plan is not None]
        raise _missed(self.target, plans, with_lowest, settings.budget.fraction is not None)


def _fraction_plans(
    settings: PlanSettings, compile_with: Callable[[PlanSettings], Attempt], tried: list[Attempt]
) -> None:
    """Where no plan the graphs' search gave fits, compile the plans of the memory budgets
    of ``PEAK_GRID`` from the lowest fraction up (b=0 aside: it recomputes everything
    again), each the cheapest plan of its fraction, into ``tried``: the graphs' prediction
    ranks plans apart from their code (on the built-in GPT, b=0.1's plan is predicted above
    the lowest prediction and its code peaks lowest of all), so the plans it ranks lowest
    can all miss a budget one of these meets. It stops at the first whose code fits the
    budget, once ``FRACTION_RISES`` in a row come back no lower than the lowest of these
    so far, or after ``FRACTION_ATTEMPTS``. Short of a fit, which fractions it compiles
    does not depend on the budget: every refusal weighs the same fraction plans. Only
    under a memory budget that is a fraction (the fractions are its share of the range)."""
    cap = settings.budget.fraction
    target = settings.peak_bytes
    if cap is None or target is None:
        return
    lowest: int | None = None  # of the fractions' plans: the budget's own attempts aside
    rises = 0
    for f in [f for f in PEAK_GRID if 0 < f <= cap][:FRACTION_ATTEMPTS]:
        budget = MemoryBudget(fraction=f)
        attempt = compile_with(replace(settings, budget=budget, search_peak_bytes=NO_LIMIT))
        plan = attempt.plan
        if plan is None or plan.compiled_peak_bytes is None:
            continue
        if not any(same_plan(plan, a.plan) for a in tried if a.plan is not None):
            tried.append(attempt)
        if plan.compiled_peak_bytes <= target:
            return
        peak = plan.compiled_peak_bytes
        rises = rises + 1 if lowest is not None and peak >= lowest else 0
        lowest = peak if lowest is None else min(lowest, peak)
        if rises == FRACTION_RISES:
            return


def hold_b1_peak(
    settings: PlanSettings, compile_with: Callable[[PlanSettings], Attempt], kept: Attempt
) -> Attempt:
    """Under a memory budget alone, no plan's code may peak above the code of the b=1 plan
    of the same graph (recompute bought with more memory). The graphs' prediction is no
    promise for the code: a graph with convolutions is not rescheduled under Inductor for
    a memory budget (:meth:`budget.compile.split.Partitions.graphs`), and one that is
    rescheduled to b=1's predicted peak can still compile above b=1's code where Inductor
    orders the recomputation otherwise (``python bench/real_model_dominance.py --compiler
    inductor``: GPT-2 at b=0). So where ``kept``'s plan recomputes and its code (or its
    graphs) peaks within ``B1_NEAR`` of b=1's predicted peak, the b=1 plan is compiled too
    (one more compile), and where ``kept``'s code peaks above it, the graph is planned
    again for that peak within the memory budget, which reschedules it
    (:func:`fit_compiled_peak`, at most ``HOLD_ATTEMPTS`` compiles); ``kept`` is kept where
    that fails (nothing within the memory budget gets under it, or its code is not lower
    than ``kept``'s). The plan kept carries the b=1 plan's compiled peak
    (``reference_compiled_peak_bytes``): its report says where it is above. Not for a
    saved plan (``plan=``: its saved set is the file's at every budget) nor at budget 1
    (the b=1 plan itself)."""
    plan = kept.plan
    if plan is None or plan.compiled_peak_bytes is None or not _held_to_b1(settings, plan):
        return kept
    top = compile_with(replace(settings, budget=MemoryBudget(fraction=1.0))).plan
    if top is None or top.compiled_peak_bytes is None:
        return kept
    b1 = top.compiled_peak_bytes
    if plan.compiled_peak_bytes > b1:
        try:
            held = fit_compiled_peak(
                replace(settings, peak_bytes=b1),
                compile_with,
                attempts=HOLD_ATTEMPTS,
                fractions=False,
            )
        except BudgetTooSmallError:
            held = None
        peak = held.plan.compiled_peak_bytes if held and held.plan is not None else None
        if held is not None and peak is not None and peak < plan.compiled_peak_bytes:
            kept = held
    # a plan planned again for b=1's peak is a peak search's (its budget a grid fraction):
    # torch's plan beside it stays the one at the memory budget asked (previews, vs_torch)
    kept.log.update(0, reference_compiled_peak_bytes=b1, torch_plan=plan.torch_plan)
    return kept


def _held_to_b1(settings: PlanSettings, plan: Plan) -> bool:
    """Whether :func:`hold_b1_peak` checks ``plan``'s code against the b=1 plan's."""
    return not (
        settings.peak_bytes is not None
        or settings.book is not None
        or settings.budget.fraction == 1.0
        or plan.status == "reference"
        or plan.peak_bytes is None
        or plan.reference_peak_bytes is None  # set where the plan recomputes anything
        # its code where compiled, else its graphs, well under b=1's graphs: not checked
        or max(plan.peak_bytes, plan.compiled_peak_bytes or 0) < B1_NEAR * plan.reference_peak_bytes
    )


def training_check(settings: PlanSettings, plan: Plan) -> str:
    """What training under Inductor checks of a previewed ``plan`` on the code it
    generates, and may change the plan for ("" where nothing): a peak budget
    (:func:`fit_compiled_peak`), or a memory budget's plan held to the b=1 plan's code
    (:func:`hold_b1_peak`). ``budget solve --compile`` shows the plan training keeps."""
    if settings.book is not None:
        return ""  # a plan file's saved set is applied as it is
    if settings.peak_bytes is not None:
        return (
            "checks the peak budget on the code Inductor generates and plans again "
            "where it misses or leaves recompute unused; --compile shows the plan it keeps"
        )
    if _held_to_b1(settings, plan):
        return (
            "compiles the b=1 plan too and plans again where this plan's code peaks "
            "above it; --compile shows the plan it keeps"
        )
    return ""


def _next_target(
    target: int,
    asked: int | None,
    predicted: int,
    peak: int,
    fit_at: int | None,
    miss_at: int | None,
    again: bool,
) -> int | None:
    """The graphs' target to plan for next, after a plan predicted at ``predicted`` whose
    code peaks at ``peak`` (asked for at ``asked``; ``again``: a plan compiled before), or
    None to stop. Between a graphs' target whose code fits and one whose code misses, the
    midpoint; else the budget scaled by the plan's ratio of predicted to compiled peak
    (the graphs' search then picks the cheapest plan under it). Where that brings back a
    plan compiled before whose code fits with room to spare, the target it was asked for
    is raised by the same room (the next cheaper plan is predicted above it)."""
    if fit_at is not None and miss_at is not None:
        middle = (fit_at + miss_at) // 2
        return middle if fit_at < middle < miss_at else None
    if not again:
        return int(target * predicted / max(peak, 1))
    if asked is None or peak > target:
        return None  # came back to a plan that misses: nothing below it to try
    raised = int(asked * target / max(peak, 1))
    return raised if raised > asked else None


def _predicted(tried: list[Attempt]) -> set[int | None]:
    return {a.plan.peak_bytes for a in tried if a.plan is not None}


def _fitting(tried: list[Attempt], target: int) -> list[Attempt]:
    return [a for a in tried if a.plan is not None and (a.plan.compiled_peak_bytes or 0) <= target]


def _cost(a: Attempt) -> tuple[float, int]:
    assert a.plan is not None
    return a.plan.total_recompute_cost, a.plan.compiled_peak_bytes or 0


def _missed(
    target: int, tried: list[Plan], with_lowest: bool, fractions: bool
) -> BudgetTooSmallError:
    lowest = min(p.compiled_peak_bytes or 0 for p in tried)
    which = ", the plan the graphs predict lowest among them" if with_lowest else ""
    also = ", and the memory budgets' own plans from the lowest fraction up" if fractions else ""
    return BudgetTooSmallError(
        f"peak memory budget {format_bytes(target)} ({target} bytes) is below the peak of "
        f"the code Inductor generated for each of the {len(tried)} plan(s) tried{which} "
        "(planned on the graphs' predicted peak, which Inductor's fusion and reordering "
        f"change{also}); the lowest: {format_bytes(lowest)} ({lowest} bytes)",
        lowest_peak_bytes=lowest,
    )
