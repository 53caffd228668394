"""runtime/values.py: which outputs a CUDA kernel leaves in host memory; op tensors."""

import operator

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_leaves

from budget.runtime.values import on_host, op_tensors


def _items(op, device: str, *args) -> list[fx.Node]:
    """getitem nodes of one call of ``op``, their values its fake outputs on ``device``."""
    g = fx.Graph()
    with FakeTensorMode():
        q = torch.empty(2, 4, 64, 32, device=device)
        outs = op(q, q, q, *args)
    call = g.call_function(op, ())
    items = []
    for i, o in enumerate(outs):
        item = g.call_function(operator.getitem, (call, i))
        item.meta["val"] = o
        items.append(item)
    return items


def test_efficient_attentions_seed_and_offset_are_host_memory_on_cuda():
    items = _items(
        torch.ops.aten._scaled_dot_product_efficient_attention.default, "cuda", None, True
    )
    # the fake kernel says they are on the device: on_host knows better
    assert all(i.meta["val"].device.type == "cuda" for i in items)
    assert [on_host(i) for i in items] == [False, False, True, True]


def test_nothing_else_is_host_memory():
    cpu = _items(torch.ops.aten._scaled_dot_product_efficient_attention.default, "cpu", None, True)
    assert not any(on_host(i) for i in cpu)  # on a CPU step everything is host memory
    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(3)
    assert not on_host(x)
    assert not on_host(g.call_function(torch.ops.aten.relu.default, (x,)))


def test_op_tensors_are_pytrees_tensors_in_order():
    a, b, c, d = (torch.empty(i) for i in range(1, 5))
    args = (a, [b, 3, None, (c, torch.float32)], {"out": d, "alpha": 2.0}, "mean")
    assert [id(t) for t in op_tensors(args)] == [id(a), id(b), id(c), id(d)]
    assert [id(t) for t in op_tensors(*args, d)] == [
        id(t) for t in tree_leaves((args, d)) if isinstance(t, torch.Tensor)
    ]
    assert op_tensors((), {}, 1.5) == []
