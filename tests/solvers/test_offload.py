"""Offload as a third decision (budget.core.offload): the exact solvers that plan it
against the brute-force oracle, and the refusals of those that do not."""

from __future__ import annotations

import dataclasses
import itertools

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


def _chain(after: tuple[float, float, float]) -> object:
    # x -> a -> b -> c, all needed, 100 B each, recomputing costs 10 each; each copy takes
    # 1 s, and ``after`` is the forward's compute after each is issued
    p = make(
        1,
        [{"name": n, "cost": 10} for n in "abc"],
        [(0, 1), (1, 2), (2, 3)],
    )
    terms = OffloadTerms(
        transfer=np.array([np.nan, 1.0, 1.0, 1.0]), after=np.array([np.nan, *after])
    )
    return dataclasses.replace(p, offload=terms)


SPREAD = (3.0, 2.0, 0.25)  # a and b hide behind the compute after them; c, issued late, not
BUNCHED = (1.0, 0.5, 0.25)  # the copies queue: each waits for those before it


@pytest.mark.parametrize("name", PLANNERS)
def test_offload_is_free_while_the_link_hides_it_and_priced_beyond(name):
    # at a target of 0 device bytes every value must be offloaded or recomputed
    hidden = get_solver(name).solve(_chain(SPREAD), 0)
    # c's copy out is 0.75 s past the forward's end, its copy back 0.5 s past the
    # backward's 0.5 s of compute before it
    assert hidden.offloaded == [1, 2, 3] and hidden.objective == pytest.approx(1.25)
    # queued, the 3 copies out end 2 s after the forward (a's issue, 1 s before its end),
    # the 3 back 1 s after their 2 s of backward: 3 s, still cheaper than recomputing
    tight = get_solver(name).solve(_chain(BUNCHED), 0)
    assert tight.offloaded == [1, 2, 3] and tight.objective == pytest.approx(3.0)


@pytest.mark.parametrize("name", PLANNERS)
def test_what_the_link_hides_is_offloaded_for_nothing_even_without_a_target(name):
    # a and b hide behind the compute; c would cost 1.25 s: it stays on the device
    sol = get_solver(name).solve(_chain(SPREAD), None)
    assert sol.offloaded == [1, 2] and sol.objective == 0.0 and sol.saved == [1, 2, 3]


def test_copies_issued_together_queue_on_the_link():
    # two 1 s copies issued with 1 s of forward left: the second ends 1 s past it, though
    # each alone would hide (a sum over the pass against all its compute would say 0)
    terms = OffloadTerms(transfer=np.array([1.0, 1.0]), after=np.array([1.0, 1.0]))
    assert terms.exposures([0]) == (0.0, 0.0)
    assert terms.exposures([0, 1]) == (1.0, 0.0)
    assert terms.price([0, 1]) == 1.0


@pytest.mark.parametrize("seed", range(20))
def test_the_price_is_the_wait_for_the_copies_queue(seed):
    # the closed form (a maximum over issue points) against running the queue
    rng = np.random.default_rng(seed)
    n = 7
    transfer = rng.choice([0.5, 1.0, 2.0, 3.0], n)
    after = np.sort(rng.choice([0.0, 0.5, 1.0, 2.0, 4.0, 6.0], n))[::-1]  # issue order
    terms = OffloadTerms(transfer=transfer, after=after, backward_factor=float(rng.choice([1, 2])))
    for k in range(n + 1):
        for away in itertools.combinations(range(n), k):
            want = oracle.queue_exposures(transfer, after, terms.backward_factor, away)
            assert terms.exposures(away) == pytest.approx(want), (seed, away)


@pytest.mark.parametrize("name", ["greedy", "dp", "mincut"])
def test_solvers_that_do_not_plan_offload_refuse_it(name):
    if name not in available_solvers():
        pytest.skip(f"{name} not installed")
    with pytest.raises(
        ValueError, match="does not plan offload; solvers that do: auto, cpsat, highs, ilp, mip"
    ):
        get_solver(name).solve(_chain(SPREAD), 0)
    assert offload_solvers() == ["auto", "cpsat", "highs", "ilp", "mip"]


def test_a_plan_offloading_what_it_may_not_is_invalid():
    p = _chain(SPREAD)
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
    terms = OffloadTerms(transfer=np.array([np.nan, 1.0, np.nan]), after=np.full(3, 5.0))
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
    assert t.after[[0, 2]].tolist() == [9.0, 4.0] and np.isnan(t.after[3])
    # alone, 0's 5 s copies hide behind 9 s and 18 s; 2's 10 s ones expose 6 s and 2 s
    assert t.exposures([0]) == (0.0, 0.0) and t.exposures([2]) == (6.0, 2.0)
    # together, 0's copy out runs first and 2's at its issue: 15 s queued after 9 s left
    assert t.exposures([0, 2]) == (6.0, 2.0)
    # copied after its last forward use (node 2), value 0's copies hide behind 4 s and 8 s
    late = offload_terms(
        np.array([1.0, 2.0, 3.0, 4.0]),
        np.array([10.0, 0.0, 20.0, 40.0]),
        np.array([True, True, True, False]),
        bandwidth=2.0,
        issued=np.array([2, 1, 2, 3]),
    )
    assert late.after[[0, 2]].tolist() == [4.0, 4.0]
    assert late.exposures([0]) == (1.0, 0.0)  # 5 s against 4 s, and 8 s
    assert late.exposures([0, 2]) == (11.0, 7.0)  # issued together: 15 s against 4 s, 8 s
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


@pytest.mark.parametrize("seed", range(8))
def test_the_mip_rows_price_every_offload_set_as_the_queue_does(seed):
    # the rows left out (no offload makes them a pass's worst) change no price
    from budget.solvers.mip.model import closure_model, offload_units, unit_scale

    p = with_offload(random_problem(seed, n=9), seed)
    units = offload_units(p, closure_model(p))
    assert units is not None
    k, nodes = unit_scale(p), list(units.transfer)
    for r in range(len(nodes) + 1):
        for away in itertools.combinations(nodes, r):
            want = k * sum(oracle.queue_exposures(p.offload.transfer, p.offload.after, 2.0, away))
            assert abs(units.price(away) - want) <= len(nodes) + 1, (seed, away)
