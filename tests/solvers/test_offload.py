"""Offload as a third decision (budget.core.offload): the exact solvers that plan it
against the brute-force oracle, and the refusals of those that do not."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import oracle
from helpers.problems import make, random_problem, rich_problem, with_offload

from budget.core.offload import OffloadTerms, offload_terms
from budget.solvers import InfeasibleError, available_solvers, get_solver
from budget.solvers.base import offload_solvers

PLANNERS = [
    name for name in ("cpsat", "auto", "ilp", "highs", "mip") if name in available_solvers()
]


def _targets(p, k: int = 5) -> list[int | None]:
    device = sorted({b for _, b, _, _ in oracle.offload_plans(p)})
    picks = [device[int(i)] for i in np.linspace(0, len(device) - 1, k)]
    return [None, *sorted(set(picks)), max(0, device[0] - 1)]


def _same(got: tuple[float, int, int], want: tuple[float, int, int]) -> bool:
    return abs(got[0] - want[0]) <= 1e-6 * max(1.0, abs(want[0])) and got[1:] == want[1:]


@pytest.mark.parametrize("name", PLANNERS)
@pytest.mark.parametrize("seed", range(12))
def test_offload_plans_are_optimal_on_every_small_problem(name, seed):
    build = random_problem if seed % 2 else rich_problem
    p = with_offload(build(seed, n=9), seed)
    for target in _targets(p):
        want = oracle.offload_optimum(p, target)
        if want is None:
            with pytest.raises(InfeasibleError):
                get_solver(name).solve(p, target)
            continue
        sol = get_solver(name).solve(p, target)
        device = p.saved_bytes(sol.saved, sol.offloaded)
        got = (sol.objective, device, p.host_bytes(sol.offloaded))
        assert _same(got, want), (seed, target, sol, want)
        assert target is None or device <= target
        assert set(sol.offloaded) <= set(sol.saved)


@pytest.mark.parametrize("name", PLANNERS)
@pytest.mark.parametrize("seed", range(6))
def test_the_fewest_device_bytes_offload_what_can_be(name, seed):
    p = with_offload(random_problem(seed, n=9), seed)
    sol = get_solver(name).solve(p, None, minimize="bytes")
    want = oracle.offload_optimum(p, None, minimize="bytes")
    assert want is not None
    cost = p.recompute_cost(sol.saved) + p.offload_cost(sol.offloaded)
    assert _same((cost, sol.objective, p.host_bytes(sol.offloaded)), want)


@pytest.mark.parametrize("name", PLANNERS)
@pytest.mark.parametrize("seed", range(10))
def test_offload_costs_are_proven_within_the_gap_and_ties_broken_among_no_costlier(name, seed):
    """With a step whose compute dwarfs the costs, the cost's proof gap (0.1% of the
    step's compute) is about a recomputation: a plan may cost up to that above the
    optimum, and among the plans no costlier than it, it has the fewest device bytes and
    then host bytes, exactly."""
    build = random_problem if seed % 2 else rich_problem
    p = with_offload(build(seed, n=9), seed)
    o = p.offload
    p = dataclasses.replace(p, offload=OffloadTerms(o.transfer, o.tail, 300.0, 600.0))
    assert p.offload.gap == pytest.approx(0.9)
    plans = oracle.offload_plans(p)
    priced = {(saved, away): (c, b, oracle.host_bytes(p, away)) for c, b, saved, away in plans}
    for target in _targets(p):
        fits = [x for x in priced.values() if target is None or x[1] <= target]
        if not fits:
            continue
        sol = get_solver(name).solve(p, target)
        c, b, h = priced[(tuple(sol.saved), tuple(sol.offloaded))]
        assert c <= min(x[0] for x in fits) + p.offload.gap + 1e-9, (seed, target)
        assert (b, h) == min((x[1], x[2]) for x in fits if x[0] <= c + 1e-9), (seed, target)


def _wide(seed: int):
    p = with_offload(rich_problem(seed, n=9), seed)
    o = p.offload
    return dataclasses.replace(p, offload=OffloadTerms(o.transfer, o.tail, 300.0, 600.0))


def test_cpsat_solves_the_cost_alone_to_the_offload_gap(monkeypatch):
    """The gap reaches the cost's stage only, in CP-SAT's units (1e9 over the largest
    cost or offload term); the bytes and host bytes are solved exactly (half a unit)."""
    from budget.solvers.mip.cpsat import CpSat

    p, gaps, run = _wide(3), [], CpSat._run

    def spy(self, cp_model, model, time_limit, gap):  # type: ignore[no-untyped-def]
        gaps.append(gap)
        return run(self, cp_model, model, time_limit, gap)

    monkeypatch.setattr(CpSat, "_run", spy)
    o = p.offload
    top = max(p.cost.max(), np.nanmax(o.transfer), np.nanmax(o.tail))
    get_solver("cpsat", reduce=False).solve(p, None)
    assert gaps == [pytest.approx(o.gap * 1e9 / top), 0.5, 0.5]
    gaps.clear()
    get_solver("cpsat", reduce=False).solve(p, None, minimize="bytes")
    assert gaps == [0.5, pytest.approx(o.gap * 1e9 / top), 0.5]
    gaps.clear()
    get_solver("cpsat", reduce=False).solve(dataclasses.replace(p, offload=None), None)
    assert gaps == [0.5, 0.5]
    gaps.clear()  # offload priced, nothing that may be offloaded: exact
    none = np.full(p.n, np.nan)
    get_solver("cpsat", reduce=False).solve(
        dataclasses.replace(p, offload=OffloadTerms(none, none, 2.0, 300.0)), None
    )
    assert gaps == [0.5, 0.5]


@pytest.mark.parametrize("name", [n for n in PLANNERS if n not in ("cpsat", "auto")])
def test_mip_backends_solve_the_cost_alone_to_the_offload_gap(name, monkeypatch):
    from budget.solvers.mip import driver

    p, calls, weights = _wide(3), [], []
    make_weights = driver.mip_weights

    def spy_weights(*args):  # type: ignore[no-untyped-def]
        weights.append(make_weights(*args))
        return weights[-1]

    solver = get_solver(name, reduce=False)
    build = type(solver).build

    def spy_build(self, *args):  # type: ignore[no-untyped-def]
        model, info = build(self, *args)
        minimize = model.minimize

        def spy(objective, time_limit, hint, gap=0.5):  # type: ignore[no-untyped-def]
            calls.append((sorted(objective), gap))
            return minimize(objective, time_limit, hint, gap)

        model.minimize = spy
        return model, info

    monkeypatch.setattr(driver, "mip_weights", spy_weights)
    monkeypatch.setattr(type(solver), "build", spy_build)
    solver.solve(p, None)
    unit = weights[-1].cost_unit
    assert calls == [
        (["cost"], pytest.approx(p.offload.gap / unit)),
        (["bytes"], 0.5),
        (["host"], 0.5),
    ]


def _chain(windows: float) -> object:
    # x -> a -> b -> c, all needed, 100 B each, recomputing costs 10 each
    p = make(
        1,
        [{"name": n, "cost": 10} for n in "abc"],
        [(0, 1), (1, 2), (2, 3)],
    )
    terms = OffloadTerms(
        transfer=np.array([np.nan, 1.0, 1.0, 1.0]),
        tail=np.array([np.nan, 0.0, 0.0, 0.5]),
        forward_window=windows,
        backward_window=2 * windows,
    )
    return dataclasses.replace(p, offload=terms)


@pytest.mark.parametrize("name", PLANNERS)
def test_offload_is_free_while_the_link_hides_it_and_priced_beyond(name):
    # at a target of 0 device bytes every value must be offloaded or recomputed
    hidden = get_solver(name).solve(_chain(5.0), 0)
    assert hidden.offloaded == [1, 2, 3] and hidden.objective == pytest.approx(0.5)
    # a window of 1: the link's 3 s of copies expose 2 s in the forward and 1 s in the
    # backward, plus c's tail: 3.5, still cheaper than any recomputation (10 each)
    tight = get_solver(name).solve(_chain(1.0), 0)
    assert tight.offloaded == [1, 2, 3] and tight.objective == pytest.approx(3.5)


@pytest.mark.parametrize("name", PLANNERS)
def test_what_the_link_hides_is_offloaded_for_nothing_even_without_a_target(name):
    # a and b hide behind the compute; c's tail would cost 0.5: it stays on the device
    sol = get_solver(name).solve(_chain(5.0), None)
    assert sol.offloaded == [1, 2] and sol.objective == 0.0 and sol.saved == [1, 2, 3]


@pytest.mark.parametrize("name", ["greedy", "dp", "mincut"])
def test_solvers_that_do_not_plan_offload_refuse_it(name):
    if name not in available_solvers():
        pytest.skip(f"{name} not installed")
    with pytest.raises(
        ValueError, match="does not plan offload; solvers that do: auto, cpsat, highs, ilp, mip"
    ):
        get_solver(name).solve(_chain(5.0), 0)
    assert offload_solvers() == ["auto", "cpsat", "highs", "ilp", "mip"]


def test_a_plan_offloading_what_it_may_not_is_invalid():
    p = _chain(5.0)
    assert p.check([1, 2, 3], [2]) == []
    assert p.check([1, 3], [2]) == ["b offloaded but not saved"]
    no_c = dataclasses.replace(
        p, offload=dataclasses.replace(p.offload, transfer=np.array([np.nan, 1, 1, np.nan]))
    )
    assert no_c.check([1, 2, 3], [3]) == ["c offloaded but cannot be offloaded"]
    assert p.saved_bytes([1, 2, 3], [2]) == 200 and p.host_bytes([2]) == 100


def test_an_offload_beside_a_saved_view_of_its_storage_is_invalid_and_never_planned():
    # v is a view of a's storage that cannot be recomputed: the storage stays on the
    # device with v, so offloading a frees nothing, even where the link hides it
    p = make(
        1,
        [{"name": "a", "cost": 10}, {"name": "v", "storage": 1, "recompute": False, "cost": 0}],
        [(0, 1), (1, 2)],
    )
    terms = OffloadTerms(
        transfer=np.array([np.nan, 1.0, np.nan]),
        tail=np.zeros(3),
        forward_window=5.0,
        backward_window=10.0,
    )
    p = dataclasses.replace(p, offload=terms)
    assert p.check([1, 2], [1]) == [
        "a offloaded but v, a view of its storage, is saved on the device (the offload "
        "would free the storage under it)"
    ]
    assert {away for *_, away in oracle.offload_plans(p)} == {()}  # v is always saved
    for name in PLANNERS:
        for target in (None, 100):
            sol = get_solver(name).solve(p, target)
            assert sol.saved == [1, 2] and sol.offloaded == [], (name, target)


def test_offload_terms_from_forward_costs():
    # four nodes in forward order costing 1, 2, 3, 4 s; storages of 10, 0, 20, 40 bytes
    t = offload_terms(
        np.array([1.0, 2.0, 3.0, 4.0]),
        np.array([10.0, 0.0, 20.0, 40.0]),
        np.array([True, True, True, False]),
        bandwidth=2.0,
    )
    # transfer = bytes / 2; compute after each node: 9, 7, 4, 0
    assert np.isnan(t.transfer[1]) and np.isnan(t.transfer[3])  # no bytes; not allowed
    assert t.transfer[[0, 2]].tolist() == [5.0, 10.0]
    # tails: max(0, 5 - 9) + max(0, 5 - 18) = 0; max(0, 10 - 4) + max(0, 10 - 8) = 8
    assert t.tail[[0, 2]].tolist() == [0.0, 8.0]
    assert (t.forward_window, t.backward_window) == (10.0, 20.0)
    # copied after its last forward use (node 2), value 0's copies hide behind 4 s and 8 s
    late = offload_terms(
        np.array([1.0, 2.0, 3.0, 4.0]),
        np.array([10.0, 0.0, 20.0, 40.0]),
        np.array([True, True, True, False]),
        bandwidth=2.0,
        issued=np.array([2, 1, 2, 3]),
    )
    assert late.tail[[0, 2]].tolist() == [1.0, 8.0]  # max(0, 5 - 4) + max(0, 5 - 8)
    with pytest.raises(ValueError, match="bandwidth > 0"):
        offload_terms(np.zeros(1), np.zeros(1), np.ones(1, bool), bandwidth=0.0)


def test_copies_on_the_compute_stream_are_priced_in_full():
    cost, sizes, ok = np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 40.0]), np.ones(3, bool)
    hidden = offload_terms(cost, sizes, ok, bandwidth=2.0)
    exposed = offload_terms(cost, sizes, ok, bandwidth=2.0, overlap=False)
    assert exposed.transfer.tolist() == hidden.transfer.tolist() == [5.0, 10.0, 20.0]
    # each value's offload and reload, both in full: 2 * (5 + 20)
    assert exposed.price([0, 2]) == 50.0 and exposed.price([1]) == 20.0
    assert hidden.price([0]) == 0.0  # the forward's 5 s after it hide its 5 s copy
