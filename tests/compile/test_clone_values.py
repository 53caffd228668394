"""budget.compile.clone_values: a rescheduler's clone made from its value's metadata is
what running its op on fake tensors makes, on a storage of its own.

Oracle: the op itself, run on the graph's fake values with torch's fake cache off.
"""

from __future__ import annotations

import operator

import torch

from budget.compile.clone_values import remade, viewed_again
from budget.models import get_builtin
from budget.runtime import _torch_private as T
from budget.runtime.values import storage_of, tensors
from tests.helpers.partitions import ONCE, capture

SMALL_GPT = dict(layers=2, d=64, heads=2, seq=64, batch=2, vocab=256)


def test_a_clone_made_again_has_the_value_its_op_makes_on_a_storage_of_its_own():
    """The rescheduler makes a clone's value from its metadata, not by running its op, where
    the op's outputs are storages of their own: each is what running the op on fake tensors
    makes (sizes, strides, offset, dtype, device, storage bytes, not a view), on a storage
    no node of the graphs holds; a view is not (:func:`viewed_again` makes it)."""
    got = capture(get_builtin("gpt", **SMALL_GPT), "eager")
    fw, bw, _ = got.partitions.graphs(got.plan([], limit=ONCE), limit=ONCE)
    nodes = [*fw.graph.nodes, *bw.graph.nodes]
    held = {s[0] for n in nodes for t in tensors(n.meta.get("val")) if (s := storage_of(t))}
    made_again, views = 0, 0
    for node in nodes:
        if node.op != "call_function":
            continue
        new = remade(node)
        if node.target is torch.ops.aten.view.default:
            views += 1
            assert new is None, node.name
        if new is None:
            continue
        made_again += 1
        made, want = tensors(new), _ran(node, node)
        assert len(made) == len(want), node.name
        for m, w in zip(made, want, strict=True):
            assert _layout(m) == _layout(w), node.name
            assert storage_of(m)[0] not in held, node.name
    assert made_again > 20 and views > 0, (made_again, views)


def test_a_view_of_a_clone_made_again_is_on_the_clones_storage_as_its_op_makes_it():
    """A view (view, permute, split, ...) whose input the rescheduler clones is made from its
    metadata on the clone's storage: each output has the sizes, strides, offset, dtype,
    device and storage bytes running the op on the clone's value gives, on the very storage
    that run gives it. An op whose outputs are storages of their own is no view."""
    got = capture(get_builtin("gpt", **SMALL_GPT), "eager")
    _, bw, _ = got.partitions.graphs(got.plan([], limit=ONCE), limit=ONCE)
    graph, viewed, owners = bw.graph, set(), 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        bases = [
            a for a in node.all_input_nodes if a.op == "call_function" and remade(a) is not None
        ]
        if not bases:
            continue
        env = {}
        with graph.inserting_before(node):
            for a in bases:
                env[a] = graph.node_copy(a)
                env[a].meta = {**a.meta, "val": remade(a)}
            clone = graph.node_copy(node, lambda a, env=env: env.get(a, a))
        new = viewed_again(node, clone)
        if remade(node) is not None:
            owners += 1
            assert new is None, node.name
        if new is not None:
            viewed.add(node.target)
            made, want = tensors(new), _ran(node, clone)
            assert len(made) == len(want), node.name
            for m, w in zip(made, want, strict=True):
                assert _layout(m)[:-1] == _layout(w)[:-1], node.name
                assert storage_of(m) == storage_of(w), node.name
        for n in [clone, *env.values()]:
            graph.erase_node(n)
    aten = torch.ops.aten
    assert {aten.view.default, aten.permute.default} <= viewed, viewed
    assert owners > 10, owners


def _ran(node: torch.fx.Node, call: torch.fx.Node) -> list[torch.Tensor]:
    """The oracle: ``node``'s op run on the values of ``call``'s arguments (``node``'s own,
    or a clone's), under their fake mode with torch's fake cache off."""
    args, kwargs = torch.fx.node.map_arg((call.args, call.kwargs), lambda a: a.meta["val"])
    mode = tensors(node.meta["val"])[0].fake_mode
    with T.disable_fake_tensor_cache(mode), mode:
        return tensors(node.target(*args, **kwargs))


def _layout(t: torch.Tensor) -> tuple:
    nbytes = t.untyped_storage().nbytes()
    return (t.shape, t.stride(), t.storage_offset(), t.dtype, t.device, nbytes, t._is_view())
