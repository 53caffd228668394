"""budget.compile.divided: a preview's division of a step peak budget, on hand-made
runs: each run plans the step with the caps given, or refuses as a graph would. The
joint division is given by hand (``joint``), or none (the proportional one alone)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from helpers.plans import KiB, make_plan

from budget.compile.divided import divided
from budget.core.sizes import parse_budget
from budget.errors import BudgetTooSmallError, StepBudgetError


def _backend(plans: list, peak: int | None, **more: object) -> SimpleNamespace:
    """What divided reads of a backend: its plans, settings and runs (each graph once)."""
    settings = SimpleNamespace(peak_bytes=peak, budget=parse_budget(1.0), sweep=())
    runs = list(range(len(plans)))
    return SimpleNamespace(
        plans=plans,
        settings=settings,
        preview_runs=runs,
        preview_eager=[0] * (len(runs) + 1),
        **more,
    )


class Runs:
    """A step of graphs saving ``saved`` bytes each, planned within the caps given; graph
    ``k`` is refused while the graphs before it keep more than ``room[k]``."""

    def __init__(self, saved: list[int], room: dict[int, int], floor: int = 0) -> None:
        self.saved, self.room, self.floor = saved, room, floor
        self.caps: list[dict[int, int]] = []  # the caps of each run, in order
        self.eager: list[dict[int, int]] = []  # eager code's saves held in each run
        self.backend = self._backend()

    @staticmethod
    def _backend() -> SimpleNamespace:  # no peak budget of its own: no step peak checked
        return _backend([], None)

    def __call__(self, caps: dict[int, int], eager: dict[int, int]) -> tuple[object, str]:
        self.caps.append(dict(caps))
        self.eager.append(dict(eager))
        self.backend = self._backend()
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


def _no_joint(_: object) -> None:
    return None


def test_a_refused_later_graph_is_given_room_by_capping_the_ones_before_it():
    runs = Runs([300 * KiB, 100 * KiB, 50 * KiB], room={2: 360 * KiB})
    be, _ = divided(runs, runs.last, _no_joint)
    assert runs.caps == [{}, {0: 270 * KiB, 1: 90 * KiB}]
    assert [p.saved_bytes for p in be.plans] == [270 * KiB, 90 * KiB, 50 * KiB]


def test_where_a_capped_graph_cannot_fit_its_cap_the_first_refusal_stands():
    runs = Runs([300 * KiB, 100 * KiB], room={1: 100 * KiB}, floor=150 * KiB)
    with pytest.raises(StepBudgetError, match="refused") as e:
        divided(runs, runs.last, _no_joint)
    assert e.value.graph == 1 and e.value.short_bytes == 200 * KiB  # the first, uncapped
    assert len(runs.caps) == 2


def test_a_refusal_of_the_first_graph_is_its_own():
    runs = Runs([300 * KiB], room={}, floor=400 * KiB)
    with pytest.raises(BudgetTooSmallError, match="graph 1 cannot save"):
        divided(runs, runs.last, _no_joint)
    assert runs.caps == [{}]


def test_the_division_stops_where_the_caps_stop_changing():
    """A refusal the caps cannot answer (nothing saved before it to give up) is raised
    after one run."""
    runs = Runs([0, 100 * KiB], room={1: -1})
    with pytest.raises(StepBudgetError):
        divided(runs, runs.last, _no_joint)
    assert runs.caps == [{}]


def test_the_joint_division_comes_first_and_the_proportional_one_where_it_does_not_hold():
    """The joint caps (here: all of the first graph's room given up by the first) are
    tried before any proportional ones; where the step is refused on them, the
    proportional division of the first refusal follows."""
    runs = Runs([300 * KiB, 100 * KiB, 50 * KiB], room={2: 360 * KiB})
    be, _ = divided(runs, runs.last, lambda _: ({0: 260 * KiB}, {}))
    assert runs.caps == [{}, {0: 260 * KiB}]
    assert [p.saved_bytes for p in be.plans] == [260 * KiB, 100 * KiB, 50 * KiB]
    runs = Runs([300 * KiB, 100 * KiB, 50 * KiB], room={2: 360 * KiB})
    be, _ = divided(runs, runs.last, lambda _: ({1: 90 * KiB}, {}))
    assert runs.caps[1] == {1: 90 * KiB}  # 390 KiB kept: refused again
    assert runs.caps[2:] == [{0: 270 * KiB, 1: 90 * KiB}]  # the first refusal's shares
    assert [p.saved_bytes for p in be.plans] == [270 * KiB, 90 * KiB, 50 * KiB]


def test_the_proportional_division_holds_eager_codes_saves_as_the_joint_one_does():
    """Eager code's saves are the step's whatever the caps: where the joint division's caps
    are refused, or it found none, the proportional runs hold the saves it found."""
    saves = {2: 10 * KiB}
    runs = Runs([300 * KiB, 100 * KiB, 50 * KiB], room={2: 360 * KiB})
    divided(runs, runs.last, lambda _: ({1: 90 * KiB}, saves))
    assert runs.caps == [{}, {1: 90 * KiB}, {0: 270 * KiB, 1: 90 * KiB}]
    assert runs.eager == [{}, saves, saves]
    runs = Runs([300 * KiB, 100 * KiB, 50 * KiB], room={2: 360 * KiB})
    divided(runs, runs.last, lambda _: (None, saves))  # no caps: the proportional ones
    assert runs.caps == [{}, {0: 270 * KiB, 1: 90 * KiB}]
    assert runs.eager == [{}, saves]


def test_a_step_planned_within_its_budget_until_eager_codes_saves_are_counted_is_divided():
    """The first run plans each graph within its share, but eager code's 100 KiB saved
    before the second graph (known once the step ran: its ``held_bytes``) puts the step's
    predicted peak 1 KiB over: the joint division's run follows, and stands."""
    made: list[SimpleNamespace] = []

    def run(caps: dict[int, int], eager: dict[int, int]) -> tuple[object, str]:
        first = caps.get(0, 300 * KiB)
        plans = [
            make_plan(saved_bytes=first, peak_bytes=500 * KiB, held_bytes=0),
            make_plan(saved_bytes=0, peak_bytes=601 * KiB, held_bytes=first + 100 * KiB),
        ]
        made.append(_backend(plans, 1000 * KiB, caps=caps, eager=eager))
        return made[-1], "fake tensors"

    be, _ = divided(run, lambda: made[-1], lambda _: ({0: 200 * KiB}, {1: 100 * KiB}))
    assert [(b.caps, b.eager) for b in made] == [({}, {}), ({0: 200 * KiB}, {1: 100 * KiB})]
    assert be is made[-1]
    made.clear()  # without it, the graph before gives up the 1 KiB the step is over
    be, _ = divided(run, lambda: made[-1], _no_joint)
    assert [b.caps for b in made] == [{}, {0: 299 * KiB}]
