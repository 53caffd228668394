"""A peak memory budget is the step's, and so is a memory budget given as a size: each
graph gets what the step leaves it.

After a graph break the step holds, while a later graph runs, what the graphs run before
it save and keep for their backward (``Plan.held_bytes``), and the later graph's own
inputs its backward keeps (``Plan.kept_input_bytes``). Its peak within the step is those
plus its own (``Plan.step_peak_bytes``), so it is planned for the budget less what the
graphs before it hold (:func:`share`), and where its kept inputs then put the step over
the budget, once more for that less its kept inputs too (:func:`excess`, the backend's
retry). A graph that cannot fit its share is refused with the share explained
(:func:`refusal`, a :class:`~budget.errors.StepBudgetError` saying how much less the
graphs before it would have to keep). A size is the step's saved activation memory: what
the step keeps for the backward outside a graph and the graph's own kept inputs come off
it alike (:func:`step_size`; a fraction is each graph's own). Eager code's saves between
graphs are not seen in training; a preview counts them, and in its joint division holds
them in the share.

Planned one graph at a time, an earlier graph takes the cheapest plan that fits the whole
budget, and may keep so much that a later graph no longer fits beside it. A preview sees
every graph, so where a later graph is refused (or eager code's saves, known once the step
has run, put it over) it plans the step again with the graphs before it capped
(``PlanSettings.saved_cap_bytes``): first at the joint split of every graph's plans at
the peak grid's memory budgets (:func:`joint_division`, the least recompute over the step
among them, :mod:`budget.planning.step_split`), with eager code's saves held beside the
graphs they come before; where that does not hold, each earlier graph gives up a share of
the shortfall in proportion to what it saves (:func:`divide`). So does ``budget solve
--compile``, on training's own compiles. Training, which meets its graphs one at a time,
applies such plans (``plan=``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..core.plan import Plan
from ..core.settings import PlanSettings
from ..core.sizes import MemoryBudget, format_bytes
from ..errors import BudgetTooSmallError, StepBudgetError
from ..planning.step_split import Candidate, split


def held_before(plans: Sequence[Plan]) -> int:
    """What the graphs compiled so far save and keep for their backward, each once."""
    return sum(p.saved_bytes + p.kept_input_bytes for p in plans)


def step_size(settings: PlanSettings) -> int | None:
    """A memory budget given as a size, which is the step's (None: a fraction, each graph's
    own; or a sweep, which plans each graph alone)."""
    return None if settings.sweep else settings.budget.nbytes


def share(
    settings: PlanSettings,
    outside: int,
    graph: int,
    cap: int | None = None,
    preview: bool = True,
) -> PlanSettings:
    """``settings`` for a graph while the step holds ``outside`` bytes outside it (what the
    graphs run before it save and keep, eager code's saves): its peak budget is the step's
    less those; a memory budget given as a size is the step's saved activation memory, and
    less those too (a fraction is of each graph's own range; a sweep plans each graph
    alone); what it saves is at most ``cap`` (a preview's division, :func:`divide`). A
    step budget ``outside`` already fills is refused (in training, naming the preview
    that may divide it otherwise)."""
    hint = "" if preview else ahead(settings)
    size = step_size(settings)
    if cap is not None and (size is not None or settings.peak_bytes is not None):
        settings = replace(settings, saved_cap_bytes=cap)
        if size is not None and cap < size - max(outside, 0):  # the cap is the size's share
            settings = replace(settings, budget=MemoryBudget(nbytes=cap))
            size = None
    if outside <= 0:
        return settings
    if size is not None:
        if outside > size:
            raise StepBudgetError(
                f"memory_budget {format_bytes(size)} is the step's saved activation memory, "
                f"and while graph {graph + 1} runs the step already keeps "
                f"{format_bytes(outside)} for the backward (what the graphs before it save and "
                "keep, and its inputs its backward keeps): ask for more, or fewer graph breaks"
                + hint,
                graph=graph,
                short_bytes=outside - size,
            )
        settings = replace(settings, budget=MemoryBudget(nbytes=size - outside))
    if settings.peak_bytes is None:
        return settings
    left = settings.peak_bytes - outside
    if left <= 0:
        raise StepBudgetError(
            f"peak_memory_budget {format_bytes(settings.peak_bytes)} is the step's peak, and "
            f"while graph {graph + 1} runs the step already holds {format_bytes(outside)} "
            "outside it (what the graphs before it save and keep for their backward, and "
            "its inputs its backward keeps): ask for more, or fewer graph breaks" + hint,
            lowest_peak_bytes=outside,
            graph=graph,
            short_bytes=outside - settings.peak_bytes + 1,
        )
    return replace(settings, peak_bytes=left, search_peak_bytes=None)


def excess(settings: PlanSettings, plans: Sequence[Plan]) -> tuple[int, int, bool]:
    """How far the step is over its budgets while one graph runs (its ``plans``): the
    step's peak over the peak budget, or what the step keeps for the backward (``held_bytes``,
    its kept inputs, its saves) over a size memory budget (0: within them, no budget, or
    unknown); that graph's kept inputs; and whether the size memory budget is the one over."""
    over, kept, size_over = 0, 0, 0
    size = step_size(settings)
    for plan in plans:
        kept = max(kept, plan.kept_input_bytes)
        peak = plan.step_peak_bytes
        if settings.peak_bytes is not None and peak is not None:
            over = max(over, peak - settings.peak_bytes)
        keeps = plan.step_keeps_bytes
        if size is not None and keeps is not None:
            size_over = max(size_over, keeps - size)
    return max(over, size_over), kept, size_over > 0


def ahead(settings: PlanSettings) -> str:
    """Where training refuses: the preview that divides the step's budget instead."""
    if settings.compiler == "inductor":  # checked on Inductor's code, as training checks
        found = "budget.plans(..., compile=True) or `budget solve --compile --json FILE`"
    else:
        found = "budget.plans(...)"
    return (
        "; a preview sees every graph and each graph's runs, and divides the step's budget "
        f"across them: train with plan= the plans of {found}"
    )


def refusal(
    settings: PlanSettings, outside: int, graph: int, e: BudgetTooSmallError, preview: bool
) -> BudgetTooSmallError:
    """``e`` (a graph's refusal of its share) told as the step's: the share and what the
    step holds outside the graph, the lowest peak as the step's; in training, where a
    preview may divide the budget otherwise. ``e`` itself where nothing is outside it."""
    size = step_size(settings)
    if outside <= 0:
        return e
    if e.lowest_peak_bytes is None and e.min_bytes is not None and size is not None:
        short = max(1, e.min_bytes - (size - outside))
        told = (
            f"graph {graph + 1} of the step gets {format_bytes(size - outside)} of the step's "
            f"memory_budget {format_bytes(size)} (the step keeps {format_bytes(outside)} "
            f"outside it for the backward): {e}"
        )
        told += "" if preview else ahead(settings)
        return StepBudgetError(told, e.min_bytes, graph=graph, short_bytes=short)
    if settings.peak_bytes is None:
        return e
    lowest = None if e.lowest_peak_bytes is None else e.lowest_peak_bytes + outside
    told = (
        f"graph {graph + 1} of the step gets {format_bytes(settings.peak_bytes - outside)} of "
        f"the step's peak_memory_budget {format_bytes(settings.peak_bytes)} (the step holds "
        f"{format_bytes(outside)} outside it while it runs): {e}"
    )
    if lowest is not None:
        told += f" (the step's lowest peak with this graph: {format_bytes(lowest)})"
    if not preview:
        told += ahead(settings)
    short = None if lowest is None else max(1, lowest - settings.peak_bytes)
    return StepBudgetError(told, e.min_bytes, lowest, graph=graph, short_bytes=short)


def over_budget(
    settings: PlanSettings, over: int, graph: int, preview: bool, size: bool = False
) -> StepBudgetError:
    """The error for a graph whose step peak (``size``: what the step keeps for the
    backward, against a size memory budget) stays ``over`` the budget after its retry."""
    if size:
        assert settings.budget.nbytes is not None
        told = (
            f"memory_budget {format_bytes(settings.budget.nbytes)} is the step's saved "
            f"activation memory, and with graph {graph + 1} the step keeps {format_bytes(over)} "
            "more for the backward (what the graphs before it keep, its kept inputs and its "
            "saves): ask for more"
        )
        return StepBudgetError(
            told + ("" if preview else ahead(settings)), graph=graph, short_bytes=over
        )
    assert settings.peak_bytes is not None
    return StepBudgetError(
        f"peak_memory_budget {format_bytes(settings.peak_bytes)} is the step's peak, and "
        f"with graph {graph + 1} the step's predicted peak is {format_bytes(over)} over it "
        "(what the graphs before it hold, its kept inputs and its own peak): ask for more"
        + ("" if preview else ahead(settings)),
        lowest_peak_bytes=settings.peak_bytes + over,
        graph=graph,
        short_bytes=over,
    )


def size_over(
    settings: PlanSettings, plans: Sequence[Plan], runs: Sequence[int | None], eager: Sequence[int]
) -> StepBudgetError | None:
    """The error for a previewed step that keeps more for the backward than a size memory
    budget: each graph run's saves and kept inputs (``runs``: the plan of each, in run
    order; a graph run once per block keeps each time), and eager code's saves before each
    run and after the last (``eager``); None within it, for a fraction, or in a sweep."""
    size = step_size(settings)
    if size is None:
        return None
    total, first = 0, None
    for k, i in enumerate(runs):
        total += eager[k] if k < len(eager) else 0
        if i is not None:
            total += plans[i].saved_bytes + plans[i].kept_input_bytes
            first = i if first is None and total > size else first
    total += sum(eager[len(runs) :])  # eager code's saves after the last run
    if total <= size:
        return None
    first = first if first is not None else next(i for i in reversed(runs) if i is not None)
    return StepBudgetError(
        f"memory_budget {format_bytes(size)} is the step's saved activation memory, and the "
        f"step keeps {format_bytes(total)} for the backward, {format_bytes(total - size)} "
        f"over it from a run of graph {first + 1} on (a graph compiled once and run again "
        "keeps its saves each time): ask for more",
        graph=first,
        short_bytes=total - size,
    )


def divide(
    caps: dict[int, int], plans: Sequence[Plan], e: StepBudgetError
) -> dict[int, int] | None:
    """New caps on what the graphs before ``e.graph`` save (``plans``: theirs, as planned
    with ``caps``), so that together they keep ``e.short_bytes`` less: each gives up a
    share in proportion to what it saves. Not a joint optimum over the graphs (each is
    solved apart), but each graph is still planned exactly within its cap. None where
    nothing is known short or the graphs before it save nothing to give up."""
    before = plans[: e.graph]
    total = sum(p.saved_bytes for p in before)
    if e.short_bytes is None or e.graph == 0 or total <= 0:
        return None
    new = dict(caps)
    for i, p in enumerate(before):
        give = -(-e.short_bytes * p.saved_bytes // total)  # rounded up: the sum covers it
        new[i] = min(new.get(i, p.saved_bytes), max(0, p.saved_bytes - give))
    return new


def joint_division(
    peak_budget: int | None,
    sweeps: Sequence[Sequence[Plan]],
    plans: Sequence[Plan],
    runs: Sequence[int | None],
    eager: Sequence[int],
    size: int | None = None,
) -> tuple[dict[int, int] | None, dict[int, int]] | None:
    """Caps on what graphs save, and what the step keeps before each graph's first run
    beyond the graphs compiled before it, once each (eager code's saves; with caps, the
    later runs of a graph run again, at their caps), from a preview of the step with no
    peak budget (``plans``, one per graph; ``runs``: the plan of each graph run, in run
    order, None for a graph without a backward; ``eager``: what eager code saves before
    each run, and after the last): the joint split of the sweeps' plans under
    ``peak_budget`` and a ``size`` memory budget (what the step keeps in all; either may
    be None), ``sweeps`` being each graph's plans at the memory budget and the peak grid's
    fractions below it. Capped: every graph but the last run's, and every graph where one
    runs more than once (a module compiled on its own and called once per block), planned
    once for all its runs. The caps are None where a peak is unknown or no split fits; the
    whole is None where the step runs one graph once, or the runs are not known."""
    if len(eager) != len(runs) + 1 or len(sweeps) != len(plans):
        return None
    order, kept, gap, before, held = [], [], 0, 0, {}
    for k, i in enumerate(runs):
        gap += eager[k]  # eager code's saves since the last graph run: held from here on
        if i is None:
            continue
        if i not in order:
            held[i] = before + gap
        before += gap
        order.append(i)
        kept.append(plans[i].kept_input_bytes + gap)
        gap = 0
    if len(order) < 2 or sorted(set(order)) != list(range(len(plans))):
        return None
    graphs = []
    for sweep in sweeps:
        candidates = []
        for p in sweep:
            own = p.compiled_peak_bytes if p.compiled_peak_bytes is not None else p.peak_bytes
            if own is None and peak_budget is not None:
                return None, {i: e for i, e in held.items() if e}
            candidates.append(Candidate(p.saved_bytes, own or 0, p.total_recompute_cost))
        graphs.append(candidates)
    after = gap + eager[len(runs)]  # eager code's saves after the last run: kept too
    keep = None if size is None else size - after
    chosen = (
        None if keep is not None and keep < 0 else split(graphs, kept, peak_budget, order, keep)
    )
    if chosen is None:
        return None, {i: e for i, e in held.items() if e}
    again = 0  # what the later runs of graphs run again keep, by each graph's first run
    for r, i in enumerate(order):
        if i in order[:r]:
            again += graphs[i][chosen[i]].saved_bytes + plans[i].kept_input_bytes
        elif again:
            held[i] += again
    repeats = len(set(order)) < len(order)
    capped = [i for i in range(len(sweeps)) if repeats or i != order[-1]]
    held = {i: e for i, e in held.items() if e}
    return {i: sweeps[i][chosen[i]].saved_bytes for i in capped}, held
