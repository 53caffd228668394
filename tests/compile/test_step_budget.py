"""budget.compile.step_budget on hand-made settings and plans: a graph's share of the
step's peak budget or memory budget size, how far a graph's step is over it, and the
refusals' words; then a step with a graph break planned under a size."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from helpers.plans import KiB, make_plan

import budget
from budget.compile.step_budget import (
    divide,
    excess,
    joint_division,
    over_budget,
    refusal,
    share,
)
from budget.core.settings import PlanSettings
from budget.core.sizes import parse_budget
from budget.errors import BudgetTooSmallError, StepBudgetError
from budget.runtime.measure import saved_bytes


def _settings(peak: int | None) -> PlanSettings:
    return PlanSettings(parse_budget(1.0), "auto", "flops", 60.0, peak_bytes=peak)


def test_a_graph_gets_the_budget_less_what_the_step_holds_outside_it():
    settings = _settings(1024 * KiB)
    assert share(settings, 0, 0) is settings  # the first graph: the whole budget
    assert share(_settings(None), 512 * KiB, 1).peak_bytes is None  # no peak budget
    assert share(settings, 256 * KiB, 1).peak_bytes == 768 * KiB
    searched = replace(settings, search_peak_bytes=1)
    assert share(searched, 1, 1).search_peak_bytes is None  # the share is searched afresh
    with pytest.raises(BudgetTooSmallError, match="step's peak.*graph 2 runs.*1.00 MiB") as e:
        share(settings, 1024 * KiB, 1)
    assert e.value.lowest_peak_bytes == 1024 * KiB


def test_the_step_peak_over_the_budget_and_the_kept_inputs():
    """A plan's step peak is what the step holds outside it, its kept inputs and its own
    peak (the compiled one where known): 100 + 50 + 900 KiB against 1000."""
    plan = make_plan(held_bytes=100 * KiB, kept_input_bytes=50 * KiB, peak_bytes=900 * KiB)
    assert excess(_settings(1000 * KiB), [plan]) == (50 * KiB, 50 * KiB, False)
    assert excess(_settings(1100 * KiB), [plan]) == (0, 50 * KiB, False)  # within: 0
    compiled = make_plan(
        held_bytes=100 * KiB, kept_input_bytes=50 * KiB, peak_bytes=900 * KiB,
        compiled_peak_bytes=800 * KiB,
    )  # fmt: skip
    assert excess(_settings(950 * KiB), [compiled])[0] == 0  # 950 KiB on the code's peak
    assert excess(_settings(None), [plan]) == (0, 50 * KiB, False)
    unknown = make_plan(held_bytes=None, kept_input_bytes=50 * KiB, peak_bytes=900 * KiB)
    assert excess(_settings(10 * KiB), [unknown]) == (0, 50 * KiB, False)


def test_refusals_speak_of_the_step():
    settings = _settings(1000 * KiB)
    inner = BudgetTooSmallError("peak memory budget 700.00 KiB is below ...", None, 800 * KiB)
    told = refusal(settings, 300 * KiB, 1, inner, True)
    assert told.lowest_peak_bytes == 1100 * KiB  # the graph's lowest, with what is outside
    assert told.graph == 1 and told.short_bytes == 100 * KiB  # 1100 KiB against 1000
    text = str(told)
    assert (
        "graph 2 of the step gets 700.00 KiB" in text
        and "lowest peak with this graph: 1.07 MiB" in text
    )
    assert "below ..." in text  # the graph's own refusal is kept
    assert "plan=" not in text  # a preview divides the budget itself
    # training: a preview divides the budget; under Inductor, one checked on its code
    inductor = replace(settings, compiler="inductor")
    assert "budget solve --compile" in str(refusal(inductor, 300 * KiB, 1, inner, False))
    eager = str(refusal(replace(settings, compiler="eager"), 300 * KiB, 1, inner, False))
    assert "plan= the plans of budget.plans(...)" in eager and "--compile" not in eager
    over = over_budget(settings, 20 * KiB, 2, True)
    assert over.lowest_peak_bytes == 1020 * KiB and "graph 3" in str(over)
    assert over.graph == 2 and over.short_bytes == 20 * KiB


def test_a_cap_on_what_a_graph_saves_comes_with_a_step_budget_only():
    assert share(_settings(1000 * KiB), 0, 0, 300 * KiB).saved_cap_bytes == 300 * KiB
    assert share(_settings(1000 * KiB), 100 * KiB, 1, 300 * KiB).saved_cap_bytes == 300 * KiB
    assert share(_settings(None), 0, 0, 300 * KiB).saved_cap_bytes is None
    sized = share(_sized(1000 * KiB), 0, 0, 300 * KiB)  # a size: the cap is its share
    assert sized.saved_cap_bytes == 300 * KiB and sized.budget.nbytes == 300 * KiB


def test_the_runs_of_a_graph_run_again_are_held_before_the_graph_after_them():
    """Blocks (graph 2, run twice) before a head (graph 3): the head's share must leave
    the second block run's saves and kept inputs (50 + 10 KiB) too, which the graphs
    compiled before it, counted once each, do not show; every graph is capped."""
    stem = [_graph(100 * KiB, 200 * KiB, 0.0)]
    block = [_graph(50 * KiB, 300 * KiB, 0.0), _graph(0, 300 * KiB, 1.0)]
    head = [_graph(0, 400 * KiB, 0.0)]
    plans = [stem[0], _graph(50 * KiB, 300 * KiB, 0.0, kept_input_bytes=10 * KiB), head[0]]
    runs, eager = [0, 1, 1, 2], [0, 0, 0, 0, 0]
    assert joint_division(1000 * KiB, [stem, block, head], plans, runs, eager) == (
        {0: 100 * KiB, 1: 50 * KiB, 2: 0},
        {2: 60 * KiB},
    )
    # eager code's 400 KiB after the last run count against a size: 619 KiB leaves the
    # graphs 219, one short of the blocks' free plan (100 + 2 * 60): they give it up
    sized = joint_division(
        None, [stem, block, head], plans, runs, [0, 0, 0, 0, 400 * KiB], 619 * KiB
    )
    assert sized == ({0: 100 * KiB, 1: 0, 2: 0}, {2: 10 * KiB})


def _sized(size: int) -> PlanSettings:
    return PlanSettings(parse_budget(f"{size}B"), "auto", "flops", 60.0)


def test_a_memory_budget_given_as_a_size_is_the_steps():
    """What the step keeps for the backward outside a graph (the graphs before it, eager
    code's saves) comes off a size memory budget, not off a fraction (each graph's own
    range), nor in a sweep (each graph alone); more than the size is refused."""
    assert share(_sized(1000 * KiB), 300 * KiB, 1).budget.nbytes == 700 * KiB
    assert share(_sized(1000 * KiB), 0, 0).budget.nbytes == 1000 * KiB
    assert share(_settings(None), 300 * KiB, 1).budget.fraction == 1.0
    swept = replace(_sized(1000 * KiB), sweep=(parse_budget(0.5),))
    assert share(swept, 300 * KiB, 1).budget.nbytes == 1000 * KiB
    assert share(_sized(1000 * KiB), 400 * KiB, 1, 500 * KiB).budget.nbytes == 500 * KiB
    with pytest.raises(StepBudgetError, match="saved activation memory.*graph 2.*1.07 MiB") as e:
        share(_sized(1000 * KiB), 1100 * KiB, 1)
    assert e.value.short_bytes == 100 * KiB and "plan=" not in str(e.value)
    with pytest.raises(StepBudgetError, match="plan= the plans of budget.plans"):
        share(_sized(1000 * KiB), 1100 * KiB, 1, preview=False)
    # a graph's own saves and kept inputs count, with what is kept outside it
    plan = make_plan(held_bytes=300 * KiB, kept_input_bytes=50 * KiB, saved_bytes=700 * KiB)
    assert excess(_sized(1000 * KiB), [plan]) == (50 * KiB, 50 * KiB, True)
    assert excess(_sized(1050 * KiB), [plan]) == (0, 50 * KiB, False)
    # a graph refused its share: told as the step's, with how much less outside would do
    inner = BudgetTooSmallError("memory budget 200.00 KiB is below ...: 250.00 KiB", 250 * KiB)
    told = refusal(_sized(1000 * KiB), 800 * KiB, 1, inner, True)
    assert "graph 2 of the step gets 200.00 KiB of the step's memory_budget" in str(told)
    assert told.graph == 1 and told.short_bytes == 50 * KiB


def _short(graph: int, short: int | None) -> StepBudgetError:
    return StepBudgetError("refused", graph=graph, short_bytes=short)


def test_the_graphs_before_a_refused_one_give_up_what_it_is_short_in_proportion():
    """Graphs saving 300 and 100 KiB before graph 3, which is 40 KiB short: they give up
    30 and 10 KiB; the caps only ever fall, and a later graph is never capped."""
    plans = [make_plan(saved_bytes=300 * KiB), make_plan(saved_bytes=100 * KiB), make_plan()]
    caps = divide({}, plans, _short(2, 40 * KiB))
    assert caps == {0: 270 * KiB, 1: 90 * KiB}
    assert sum(caps.values()) <= 400 * KiB - 40 * KiB
    odd = divide({}, plans, _short(2, 7))  # rounded up: the two cover at least 7 bytes
    assert odd is not None and 400 * KiB - sum(odd.values()) >= 7
    assert divide({0: 100 * KiB}, plans, _short(1, 10 * KiB)) == {0: 100 * KiB}
    assert divide({}, plans, _short(1, 10 * 1024 * KiB)) == {0: 0}  # never below nothing
    assert divide({}, plans, _short(0, 10)) is None  # the first graph: nothing before it
    assert divide({}, plans, _short(2, None)) is None  # short by an unknown amount
    assert divide({}, [make_plan(saved_bytes=0)] * 2, _short(1, 10)) is None


def _graph(saved: int, peak: int, cost: float, **kw):
    return make_plan(saved_bytes=saved, peak_bytes=peak, recompute_cost=cost, **kw)


def test_the_joint_division_holds_eager_codes_saves_beside_the_graphs_they_precede():
    """Two graphs, a 1000 KiB budget. Eager code saves 100 KiB before the second graph,
    which keeps 50 KiB of its inputs. The first graph's candidates save 300 (free) or 100
    (cost 1); the second peaks at 600 (free) or 400 (cost 5). Keeping 300 leaves 1000 -
    300 - 100 - 50 = 550: only the 400 peak (5 in all); saving 100 leaves 750: the free
    600 (1 in all). The cap is the first graph's 100 KiB, and eager code's 100 KiB is held
    before the second graph."""
    first = [_graph(300 * KiB, 500 * KiB, 0.0), _graph(100 * KiB, 500 * KiB, 1.0)]
    second = [_graph(0, 600 * KiB, 0.0), _graph(0, 400 * KiB, 5.0)]
    plans = [
        _graph(300 * KiB, 500 * KiB, 0.0),
        _graph(0, 600 * KiB, 0.0, kept_input_bytes=50 * KiB),
    ]
    sweeps, eager = [first, second], [0, 100 * KiB, 0]
    assert joint_division(1000 * KiB, sweeps, plans, [0, 1], eager) == (
        {0: 100 * KiB},
        {1: 100 * KiB},
    )
    # 849 KiB: the first graph's 100 and the second's 400-peak plan (100+100+50+400 = 650)
    # fit, its 600-peak plan does not (850)
    assert joint_division(849 * KiB, sweeps, plans, [0, 1], eager) == (
        {0: 100 * KiB},
        {1: 100 * KiB},
    )
    # the first graph alone is over: no caps, but eager code's saves are still known
    assert joint_division(499 * KiB, sweeps, plans, [0, 1], eager) == (None, {1: 100 * KiB})
    unknown = [first, [_graph(0, None, 0.0)]]
    assert joint_division(1000 * KiB, unknown, plans, [0, 1], eager) == (None, {1: 100 * KiB})
    # a graph without a backward between them: eager code's saves around it add up
    assert joint_division(1000 * KiB, sweeps, plans, [0, None, 1], [0, 60 * KiB, 40 * KiB, 0]) == (
        {0: 100 * KiB},
        {1: 100 * KiB},
    )
    # one graph run once, or runs not known: not divided
    assert joint_division(1000 * KiB, sweeps[:1], plans[:1], [0], [0, 0]) is None
    assert joint_division(1000 * KiB, sweeps, plans, [0, 1], [0]) is None


def test_a_graph_run_once_per_block_is_capped_for_all_its_runs():
    """The second graph runs twice (a block compiled on its own), keeping 50 KiB of its
    inputs each time: its second run holds the first graph's saves, eager code's 100 and
    its first run's 50. Saving 300 puts the first run at 300+150+600 = 1050: over; saving
    100 (cost 1) fits both runs (850, then 900) with the free 600 peak. Both graphs are
    capped: the second, though its run is the last, runs twice and compiles once."""
    first = [_graph(300 * KiB, 500 * KiB, 0.0), _graph(100 * KiB, 500 * KiB, 1.0)]
    second = [_graph(0, 600 * KiB, 0.0), _graph(0, 400 * KiB, 5.0)]
    plans = [
        _graph(300 * KiB, 500 * KiB, 0.0),
        _graph(0, 600 * KiB, 0.0, kept_input_bytes=50 * KiB),
    ]
    runs, eager = [0, 1, 1], [0, 100 * KiB, 0, 0]
    assert joint_division(1000 * KiB, [first, second], plans, runs, eager) == (
        {0: 100 * KiB, 1: 0},
        {1: 100 * KiB},
    )
    # at 899 KiB the second run needs the 400 peak (cost 5 a run): 11 in all
    assert joint_division(899 * KiB, [first, second], plans, runs, eager) == (
        {0: 100 * KiB, 1: 0},
        {1: 100 * KiB},
    )
    one = [[_graph(30 * KiB, 100 * KiB, 0.0), _graph(10 * KiB, 100 * KiB, 2.0)]]
    assert joint_division(130 * KiB, one, one[0][:1], [0, 0], [0, 0, 0]) == ({0: 30 * KiB}, {})
    assert joint_division(129 * KiB, one, one[0][:1], [0, 0], [0, 0, 0]) == ({0: 10 * KiB}, {})


def _two_graphs():
    """A graph break between two graphs of plain weights: the second keeps the first's
    output (64 KiB) and its dropout mask (16 KiB) whatever the plan; the first saves its
    64 KiB matmul at b=1, or nothing and recomputes it."""
    torch.manual_seed(0)
    w1, w2 = (torch.randn(128, 128, requires_grad=True) for _ in range(2))

    def step(x):
        h = torch.mm(x, w1).cos().cos()
        torch._dynamo.graph_break()
        return torch.nn.functional.dropout(torch.mm(h, w2).cos(), 0.5).sum()

    return step, [w1, w2], torch.randn(128, 128)


def test_a_memory_budget_given_as_a_size_holds_over_the_step_across_a_graph_break():
    """Under "100KB", planned graph by graph the first graph keeps its 64 KiB and leaves
    the second too little beside its kept 64 KiB: training refuses, naming the preview.
    The preview gives the first graph's saves up: the step keeps 80 KiB, as measured in
    training on its plans. Under 70 KB nothing fits; a fraction stays each graph's own."""
    step, weights, x = _two_graphs()
    plans = budget.plans(step, x, memory_budget="100KB", compiler="eager")
    keeps = sum(p.saved_bytes + p.kept_input_bytes for p in plans)
    assert [p.kept_input_bytes for p in plans] == [0, 64 * KiB] and keeps == 80 * KiB
    torch._dynamo.reset()
    be = budget.backend(plan=plans, compiler="eager")
    assert saved_bytes(torch.compile(step, backend=be), x, exclude=weights).saved_bytes == keeps
    torch._dynamo.reset()
    with pytest.raises(Exception, match="memory_budget 97.66 KiB.*plan= the plans") as e:
        torch.compile(step, backend=budget.backend("100KB", compiler="eager"))(x)
    assert isinstance(getattr(e.value, "inner_exception", e.value), StepBudgetError)
    torch._dynamo.reset()
    with pytest.raises(StepBudgetError, match="16.00 KiB"):  # the second graph's least
        budget.plans(step, x, memory_budget="70KB", compiler="eager")
    whole = budget.plans(step, x, memory_budget=1.0, compiler="eager")
    assert [p.saved_bytes for p in whole] == [64 * KiB, 80 * KiB]
