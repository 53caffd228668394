"""A preview under a step budget (a peak, a size) run again with the budget divided among
the step's graphs, where planning graph by graph does not hold it
(:func:`divided`; the division itself: :mod:`budget.compile.step_budget`).
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.plan import step_peak
from ..errors import BudgetTooSmallError, StepBudgetError
from . import step_budget
from .backend import BudgetBackend

DIVIDE_ROUNDS = 4  # previews of a step budget: the step planned at most this often


Run = Callable[[dict[int, int], dict[int, int]], tuple[BudgetBackend, str]]


def divided(
    run: Run,
    last: Callable[[], BudgetBackend],
    joint: Callable[[BudgetBackend], tuple[dict[int, int] | None, dict[int, int]] | None],
) -> tuple[BudgetBackend, str]:
    """``run(caps, eager)`` (``last()``: the backend it planned with) with no caps, and
    where a later graph cannot fit a step budget (a peak, a size) beside what the graphs
    before it keep, or the step's predicted peak or what it keeps, eager code's saves
    counted (known once it has run), is over it: again at the joint division
    ``joint(backend)`` gives (caps on what the graphs save, or None where it found none;
    what the step keeps before each graph beyond the graphs before it), then, where
    that does not hold, with the graphs before the refused one capped in proportion to
    what they save (:func:`budget.compile.step_budget.divide`) and eager code's saves
    held as in the joint division, up to ``DIVIDE_ROUNDS`` runs in all (the joint
    division's own preview aside).
    Where nothing holds, the first refusal stands: it names what planning graph by graph
    reached."""
    try:
        done = run({}, {})
        first = step_over(last())
        if first is None:
            return done
    except StepBudgetError as e:
        first = e
    planned = last()
    division = joint(planned)
    eager = division[1] if division is not None else {}
    if division is not None and division[0] is not None:
        try:
            done = run(division[0], eager)
            if step_over(last()) is None:
                return done
        except BudgetTooSmallError:
            pass  # a graph's search found no plan within its cap: divide in proportion
    caps, e, plans = {}, first, planned.plans
    for _ in range(DIVIDE_ROUNDS - 2):
        new = step_budget.divide(caps, plans, e)
        if new is None or new == caps or (caps and e.graph <= max(caps)):
            break
        caps = new
        try:
            done = run(caps, eager)
            over = step_over(last())
            if over is None:
                return done
            e, plans = over, last().plans
        except StepBudgetError as err:
            e, plans = err, last().plans
        except BudgetTooSmallError:
            break
    raise first from None


def step_over(be: BudgetBackend) -> StepBudgetError | None:
    """The error for a step whose graphs' runs save more than a size memory budget, or
    whose predicted peak, eager code's saves counted, is over its peak budget (None:
    within them, or no budget)."""
    size = step_budget.size_over(be.settings, be.plans, be.preview_runs, be.preview_eager)
    if size is not None or be.settings.peak_bytes is None:
        return size
    found = step_peak(be.plans)
    if found is None or found[0] <= be.settings.peak_bytes:
        return None
    return step_budget.over_budget(be.settings, found[0] - be.settings.peak_bytes, found[1], True)
