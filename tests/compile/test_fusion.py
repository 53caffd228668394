"""budget.compile.fusion: Inductor fuses no nodes far apart in its order, in budget's
compiles, asks the choices handler in place about every other fusion, and unrolls no small
reduction into its readers."""

from __future__ import annotations

import copy
import re
from types import SimpleNamespace

import torch
from torch._inductor import config as inductor_config
from torch._inductor.utils import run_and_get_code
from torch._inductor.virtualized import V

import budget
from budget.compile import inductor_compile
from budget.compile.fusion import _NearFusion, distance, fusion_within


def _node(first: int, last: int) -> SimpleNamespace:
    return SimpleNamespace(min_order=first, max_order=last)


def test_distance_is_from_the_end_of_one_span_to_the_start_of_the_other():
    assert distance(_node(0, 0), _node(1, 1)) == 1  # neighbours
    assert distance(_node(7, 9), _node(2, 3)) == 4  # either way round
    assert distance(_node(0, 5), _node(3, 8)) <= 0  # overlapping spans


class _Handler:
    """A choices handler that fuses everything and records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, int]] = []
        self.other = "the handler's own"

    def can_fuse(self, scheduler, node1, node2, shared_data_score):
        self.asked.append((node1.min_order, node2.min_order))
        return True


def test_far_nodes_are_refused_and_every_other_question_goes_to_the_handler_in_place():
    inner = _Handler()
    near = _NearFusion(inner, 3)
    assert near.can_fuse(None, _node(0, 0), _node(3, 3), 1)
    assert not near.can_fuse(None, _node(0, 0), _node(4, 4), 1)
    assert not near.can_fuse(None, _node(9, 12), _node(0, 5), 1)
    assert inner.asked == [(0, 3)]  # refused ones never reach it
    assert near.other == "the handler's own"
    assert copy.copy(near).can_fuse(None, _node(0, 0), _node(9, 9), 1) is False  # no recursion


def _sin_matmul_cos(x, y):
    return x.sin(), y @ y, x.cos()  # sin and cos read x; the matmul between cannot fuse


def _kernels(limit: int | None) -> int:
    torch._dynamo.reset()
    x, y = torch.randn(64, 64), torch.randn(64, 64)
    with inductor_config.patch(fx_graph_cache=False), fusion_within(limit):
        _, (code,) = run_and_get_code(torch.compile(_sin_matmul_cos, backend="inductor"), x, y)
    return len(re.findall(r"^\s+cpp_fused\w*\(", code, re.M))


def test_inductor_fuses_nodes_two_places_apart_only_within_a_limit_of_two():
    before = V.choices
    assert _kernels(None) == 1  # Inductor's rule: sin and cos in one kernel, across the matmul
    assert _kernels(2) == 1
    assert _kernels(1) == 2  # neighbours only
    assert V.choices is before  # the handler in place is back


def test_training_compiles_under_the_configured_distance(monkeypatch):
    limits = []

    def recorded(limit):
        limits.append(limit)
        return fusion_within(limit)

    monkeypatch.setattr(inductor_compile, "fusion_within", recorded)
    lin = torch.nn.Linear(8, 8)
    x = torch.randn(4, 8)
    for distance_set in (5, None):
        limits.clear()
        torch._dynamo.reset()
        with budget.config.patch(fusion_distance=distance_set):
            be = budget.backend(0.5)
        torch.compile(lambda x: lin(x).relu().sum(), backend=be)(x).backward()
        assert limits and set(limits) == {distance_set}  # each compile of each attempt


def _batch_sum_read_late(x, w1, w):
    t = x @ w1  # (2, 4096): a buffer the sum over the batch reads
    s = t.sum(0)  # a sum of two elements: Inductor's own rule unrolls it into its reader
    return (w @ w).cos() + s[:64]  # read after another matmul


def _sum_buffers(limit: int | None) -> list[str]:
    """The generated code's allocations of the sum's output, shape (4096,)."""
    torch._dynamo.reset()
    x, w1, w = torch.randn(2, 64), torch.randn(64, 4096), torch.randn(64, 64)
    with inductor_config.patch(fx_graph_cache=False), fusion_within(limit):
        _, (code,) = run_and_get_code(torch.compile(_batch_sum_read_late), x, w1, w)
    return re.findall(r"empty_strided_cpu\(\(4096, \)", code)


def test_within_a_limit_a_small_reduction_is_not_unrolled_into_its_reader():
    before = inductor_config.unroll_reductions_threshold
    assert _sum_buffers(None) == []  # Inductor's rule: inlined, its input held to the reader
    assert len(_sum_buffers(32)) == 1  # a reduction of its own, its output a buffer
    assert inductor_config.unroll_reductions_threshold == before  # restored
