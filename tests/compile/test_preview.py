"""budget.compile.preview's division of a step peak budget (``_divided``), on hand-made
runs: each run plans the step with the caps given, or refuses as a graph would."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from helpers.plans import KiB, make_plan

from budget.compile.preview import _divided
from budget.errors import BudgetTooSmallError, StepBudgetError


class Runs:
    """A step of graphs saving ``saved`` bytes each, planned within the caps given; graph
    ``k`` is refused while the graphs before it keep more than ``room[k]``."""

    def __init__(self, saved: list[int], room: dict[int, int], floor: int = 0) -> None:
        self.saved, self.room, self.floor = saved, room, floor
        self.caps: list[dict[int, int]] = []  # the caps of each run, in order
        self.backend = SimpleNamespace(plans=[])

    def __call__(self, caps: dict[int, int]) -> tuple[object, str]:
        self.caps.append(dict(caps))
        self.backend = SimpleNamespace(plans=[])
        held = 0
        for i, s in enumerate(self.saved):
            if i in self.room and held > self.room[i]:
                raise StepBudgetError("refused", graph=i, short_bytes=held - self.room[i])
            s = min(s, caps.get(i, s))
            if s < self.floor:
                raise BudgetTooSmallError(f"graph {i + 1} cannot save under {self.floor}")
            self.backend.plans.append(make_plan(saved_bytes=s))
            held += s
        return self.backend, "fake tensors"

    def last(self) -> object:
        return self.backend


def test_a_refused_later_graph_is_given_room_by_capping_the_ones_before_it():
    runs = Runs([300 * KiB, 100 * KiB, 50 * KiB], room={2: 360 * KiB})
    be, _ = _divided(runs, runs.last)
    assert runs.caps == [{}, {0: 270 * KiB, 1: 90 * KiB}]
    assert [p.saved_bytes for p in be.plans] == [270 * KiB, 90 * KiB, 50 * KiB]


def test_where_a_capped_graph_cannot_fit_its_cap_the_first_refusal_stands():
    runs = Runs([300 * KiB, 100 * KiB], room={1: 100 * KiB}, floor=150 * KiB)
    with pytest.raises(StepBudgetError, match="refused") as e:
        _divided(runs, runs.last)
    assert e.value.graph == 1 and e.value.short_bytes == 200 * KiB  # the first, uncapped
    assert len(runs.caps) == 2


def test_a_refusal_of_the_first_graph_is_its_own():
    runs = Runs([300 * KiB], room={}, floor=400 * KiB)
    with pytest.raises(BudgetTooSmallError, match="graph 1 cannot save"):
        _divided(runs, runs.last)
    assert runs.caps == [{}]


def test_the_division_stops_where_the_caps_stop_changing():
    """A refusal the caps cannot answer (nothing saved before it to give up) is raised
    after one run."""
    runs = Runs([0, 100 * KiB], room={1: -1})
    with pytest.raises(StepBudgetError):
        _divided(runs, runs.last)
    assert runs.caps == [{}]
