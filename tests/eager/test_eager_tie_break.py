"""budget.apply's peak tie-break (budget.eager.search: plan_predicted), measured.

The oracle is the step itself: each plan is applied to the model and its peak measured
(torch.profiler's memory events), and the cheapest plan of the budget is the one the
planner makes with the tie-break switched off (no candidates beside it: ``_off``).
"""

from __future__ import annotations

import copy

import pytest
import torch
from helpers.small import small_gpt
from helpers.steps import grads_of
from torch.utils.flop_counter import FlopCounterMode

import budget
from budget.eager import search
from budget.runtime.measure import measure_peak

CANDIDATES = search.TIE_CANDIDATES


def _off(monkeypatch) -> None:
    """The tie-break switched off: no candidate beside the cheapest plan."""
    monkeypatch.setattr(search, "TIE_CANDIDATES", 0)
    monkeypatch.setattr(search, "ordered_saved_sets", lambda *_: [])


def _applied(monkeypatch, candidates: int, b: float):
    monkeypatch.undo()
    if candidates == 0:
        _off(monkeypatch)
    ex = small_gpt()
    plan = budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=b)
    return ex, plan, measure_peak(ex.step, *ex.args)


def test_a_plan_as_cheap_that_peaks_lower_is_kept_and_its_peak_is_measured(monkeypatch):
    """On the small GPT at 0.9, the cheapest plan saves a value a plan of a smaller
    budget recomputes for next to nothing: that plan is kept, and the step measures its
    predicted peak, below the cheapest plan's measured peak."""
    _, cheapest, cheapest_peak = _applied(monkeypatch, 0, 0.9)
    ex, chosen, chosen_peak = _applied(monkeypatch, CANDIDATES, 0.9)
    assert cheapest.tie_break == ""
    assert chosen.tie_break.startswith("the plan at budget ")
    assert chosen_peak == chosen.peak_bytes  # the eager path predicts its peak exactly
    assert chosen_peak < cheapest_peak == cheapest.peak_bytes
    assert chosen.saved_bytes <= chosen.target_bytes == cheapest.target_bytes
    assert chosen.budget == 0.9  # the budget asked for, whichever fraction's plan it is
    # never at the price of more recompute than the tolerance: 0.5% of recomputing the
    # whole forward (the flops estimator prices FLOPs, pointwise ops at 0), counted by torch
    with FlopCounterMode(display=False) as counter:
        small_gpt().step(*ex.args)
    extra = chosen.recompute_flops - cheapest.recompute_flops
    assert chosen.total_recompute_cost >= cheapest.total_recompute_cost
    assert 0 <= extra <= 0.005 * counter.get_total_flops()
    # and the model computes what it did
    ref = small_gpt()
    ref.model.load_state_dict(copy.deepcopy(ex.model.state_dict()))
    want_out, want = grads_of(ref.step, list(ref.model.parameters()), *ref.args, seed=3)
    got_out, got = grads_of(ex.step, list(ex.model.parameters()), *ex.args, seed=3)
    torch.testing.assert_close(got_out, want_out, rtol=0, atol=0)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-7)


# 0.3: candidates within the tolerance, none peaking lower than the cheapest plan
@pytest.mark.parametrize("b", [1.0, 0.3])
def test_budget_1_and_budgets_whose_cheapest_plan_peaks_lowest_keep_it(monkeypatch, b):
    _, cheapest, _ = _applied(monkeypatch, 0, b)
    _, chosen, _ = _applied(monkeypatch, CANDIDATES, b)
    assert (chosen.saved, chosen.checkpointed) == (cheapest.saved, cheapest.checkpointed)
    assert not chosen.tie_broken
    assert (chosen.tie_break == "") == (b == 1.0)  # b=1: the model as it is, no tie-break


def test_a_size_budget_weighs_only_plans_within_its_size(monkeypatch):
    """A size budget falls between fractions: the fractions' plans that save more than it
    are no candidates (and take none of the candidates' places)."""
    _, at_fraction, _ = _applied(monkeypatch, CANDIDATES, 0.9)
    size = f"{at_fraction.target_bytes}B"
    _off(monkeypatch)
    ex = small_gpt()
    cheapest = budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=size)
    monkeypatch.undo()
    ex = small_gpt()
    chosen = budget.apply(ex.model, *ex.args, step=ex.step, memory_budget=size)
    assert chosen.saved_bytes <= chosen.target_bytes == at_fraction.target_bytes
    assert chosen.tie_break.startswith("the plan at budget ")
    assert chosen.peak_bytes == measure_peak(ex.step, *ex.args) < cheapest.peak_bytes


def test_among_equally_cheap_plans_bert_gets_one_recomputing_in_order_and_measures_it(
    monkeypatch,
):
    """BERT's identical layers give many plans as cheap as the optimum at 0.5; the
    solver's pick holds more at once in the backward than the cheapest plan recomputing
    earliest in the forward (the same modules checkpointed), which the tie-break keeps:
    within the tolerance of the recompute, no more bytes saved, and the step measures its
    predicted peak, below the solver's pick's measured peak."""
    from helpers.real_models import make

    def applied():
        m = make("bert")
        m.model.config.use_cache = False
        plan = budget.apply(m.model, *m.args, step=m.step, memory_budget=0.5)
        return m, plan, measure_peak(m.step, *m.args)

    _off(monkeypatch)
    _, cheapest, cheapest_peak = applied()
    monkeypatch.undo()
    m, chosen, chosen_peak = applied()
    assert chosen.tie_break.startswith("the cheapest plan recomputing "), chosen.tie_break
    assert chosen.checkpointed == cheapest.checkpointed
    assert chosen.saved_bytes <= chosen.target_bytes == cheapest.target_bytes
    with FlopCounterMode(display=False) as counter, torch.no_grad():  # the forward, by torch
        m.step(*m.args)
    extra = chosen.recompute_flops - cheapest.recompute_flops
    assert 0 <= extra <= 0.005 * counter.get_total_flops()
    assert chosen_peak == chosen.peak_bytes < cheapest_peak == cheapest.peak_bytes
