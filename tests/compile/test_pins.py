"""The orderings budget adds to Inductor's code (budget.compile.pins): an extra
recomputation's mark (schedule.pin_order) made an ordering edge by Inductor's post-grad
pass in the graph it lowers, and the graph handed over still one Inductor's FX graph
cache keys (control_deps in it made the cache bypass it)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from budget.compile import pins
from budget.compile.compiled_peak import CodeCapture
from budget.compile.schedule import PIN_AFTER, pin_order


def _backward_like() -> tuple[torch.fx.GraphModule, list[torch.Tensor]]:
    def f(x, w):
        a = (x @ w).relu()
        b = (x.sin() @ w).relu()  # recomputed again, say: made to wait for the first matmul
        return (a + b,)

    x, w = torch.randn(64, 64), torch.randn(64, 64)
    return make_fx(f, tracing_mode="fake")(x, w), [x, w]


def _ops(gm: torch.fx.GraphModule, op: str) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and op in str(n.target)]


def _mark(node: torch.fx.Node, *names: str) -> None:
    node.meta[PIN_AFTER] = names


def _control_deps(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    return [n for n in graph.nodes if getattr(n.target, "__name__", "") == "control_deps"]


def test_pin_order_marks_what_each_extra_recomputation_may_wait_for_and_changes_no_code():
    gm, _ = _backward_like()
    first_mm, second_mm = _ops(gm, "mm")
    first_relu = _ops(gm, "relu")[0]
    sin = _ops(gm, "sin")[0]
    code = gm.code
    assert pin_order(gm, {sin.name, second_mm.name}) == 2
    # the nodes before each that make a tensor of their own, nearest first; a pinned
    # node is none of them
    assert pins.marks(sin) == (first_relu.name, first_mm.name)
    assert pins.marks(second_mm) == (first_relu.name, first_mm.name)
    assert gm.code == code and not _control_deps(gm.graph)


def test_each_mark_waits_for_the_nearest_node_it_names_that_the_rewrites_kept():
    gm, _ = _backward_like()
    first_mm, second_mm = _ops(gm, "mm")
    _mark(second_mm, "addmm_gone", first_mm.name)  # the nearest was rewritten
    _mark(_ops(gm, "sin")[0], "gone")  # nothing left to wait for: unpinned
    assert pins.pin_marked(gm.graph) == 1
    (dep,) = _control_deps(gm.graph)
    assert first_mm in dep.all_input_nodes


@pytest.mark.parametrize("bias", [False, True])
def test_inductors_post_grad_pass_pins_a_marked_graph(bias):
    # with a bias, Inductor rewrites the marked matmul and its add into one addmm, which
    # carries none of the matmul's meta: that mark is lost, unpinned (a limit of pinning
    # after Inductor's rewrites; before them, the cache bypassed the graph)
    def f(x, w, b):
        a = (x @ w).relu()
        c = x.sin() @ w
        return (a + (c + b if bias else c.relu()),)

    x, w, b = torch.randn(64, 64), torch.randn(64, 64), torch.randn(64)
    gm = make_fx(f, tracing_mode="fake")(x, w, b)
    first_relu = _ops(gm, "relu")[0]
    _mark(_ops(gm, "mm")[1], first_relu.name)
    lowered: list[list[str]] = []
    real = pins.pin_marked

    def spy(graph):  # type: ignore[no-untyped-def]
        pinned = real(graph)
        lowered.append([getattr(n.target, "__name__", str(n.target)) for n in graph.nodes])
        return pinned

    with pytest.MonkeyPatch.context() as m:
        m.setattr(pins, "pin_marked", spy)
        CodeCapture()(gm, [x, w, b])
    (targets,) = lowered
    assert ("addmm.default" in targets) == bias
    assert targets.count("control_deps") == (0 if bias else 1)


def test_a_marked_graph_is_one_inductors_fx_cache_keys_as_control_deps_were_not():
    from torch._inductor.codecache import BypassFxGraphCache, FxGraphCache, compiled_fx_graph_hash

    gm, inputs = _backward_like()
    first_mm, second_mm = _ops(gm, "mm")
    _mark(second_mm, first_mm.name)
    with pins.pinning(gm):  # the post-grad pass installed: a uuid, so part of the key
        FxGraphCache._check_can_cache(gm, inputs, {}, require_shape_env=False)
        key, _ = compiled_fx_graph_hash(gm, inputs, {}, [])
        assert key
    edged = copy.deepcopy(gm)
    assert pins.pin_marked(edged.graph) == 1  # what handing the pins over made of the graph
    with pytest.raises(BypassFxGraphCache, match="HigherOrderOperator"):
        FxGraphCache._check_can_cache(edged, inputs, {}, require_shape_env=False)
