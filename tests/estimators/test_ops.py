"""Op classification (budget.estimators.ops): alias, mutating, collective, random, and the
reasons the graph builder and the profiler derive from them."""

from __future__ import annotations

import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils.checkpoint import CheckpointPolicy

from budget.compile import graph as G
from budget.estimators import ops
from budget.estimators import profile as P
from budget.estimators.memory import bytes_moved

aten = torch.ops.aten
CPU = torch.device("cpu")
RANDOM = "random op (recomputing would draw a new sample)"


def traced(fn, *args) -> dict[str, fx.Node]:
    """``fn`` traced to aten ops on fake tensors (values in ``meta["val"]``), by node name."""
    gm = make_fx(fn, tracing_mode="fake")(*args)
    return {n.name: n for n in gm.graph.nodes}


def call(target, inputs: int, *args, **kwargs) -> fx.Node:
    """A call of ``target`` on ``inputs`` placeholders then ``args``, in a fresh graph and
    never run: for what needs no values (random, collective, higher-order), and for ops
    that cannot run here."""
    g = fx.Graph()
    placeholders = tuple(g.placeholder(f"p{i}") for i in range(inputs))
    return g.call_function(target, placeholders + args, kwargs)


def test_views_and_getitem_are_aliases_and_move_nothing():
    def f(x):
        parts = x.split(2)
        return x.view(-1), x.t(), parts[0], x.clone(), x + 1

    nodes = traced(f, torch.randn(4, 4))
    for name in ("view", "t", "split", "getitem"):
        assert ops.is_alias(nodes[name]), name
        assert bytes_moved(nodes[name]) == 0
    for name in ("clone", "add"):
        assert not ops.is_alias(nodes[name]), name
        assert bytes_moved(nodes[name]) > 0
    assert not ops.is_alias(nodes["x_1"])  # a placeholder is no op


def test_mutating_ops_follow_the_schema():
    nodes = traced(lambda x: x.clone().add_(1) + x, torch.randn(4))
    assert ops.is_mutating(nodes["add_"])
    assert not ops.is_alias(nodes["add_"])  # an in-place op returns its input, but writes it
    assert ops.forbidden_recompute(nodes["add_"]) == "mutates its inputs"
    assert P.not_runnable(nodes["add_"], CPU) == "mutates its inputs"
    for name in ("clone", "add"):
        assert not ops.is_mutating(nodes[name])
        assert ops.forbidden_recompute(nodes[name]) == ""


def test_collective_namespaces_are_one_list():
    assert (
        frozenset({"_c10d_functional", "c10d_functional", "_dtensor", "c10d"})
        == ops.COLLECTIVE_NAMESPACES
    )
    # the graph builder and the profiler read the same classification
    assert G.forbidden_recompute is ops.forbidden_recompute


def test_functional_collectives_are_collective():
    node = call(torch.ops._c10d_functional.all_reduce.default, 1, "sum", "0")
    assert ops.is_collective(node)
    assert ops.forbidden_recompute(node) == "collective"
    assert P.not_runnable(node, CPU) == "collective"


@pytest.mark.skipif(not hasattr(torch.ops, "c10d"), reason="torch built without c10d")
def test_c10d_ops_are_collective():
    """c10d's own ops (``torch.ops.c10d``, no process group needed to name them) were
    collective to the profiler but recomputable to the graph builder: now both agree."""
    op = torch.ops.c10d.allreduce_.default
    assert op.namespace == "c10d" and not op._schema.is_mutable
    node = call(op, 2)
    assert ops.is_collective(node)
    assert not ops.is_mutating(node) and not ops.is_random(node)
    assert ops.forbidden_recompute(node) == "collective"
    assert P.not_runnable(node, CPU) == "collective"


def test_random_ops():
    def f(x):
        return torch.rand_like(x) + F.dropout(x, 0.5, training=True)

    nodes = traced(f, torch.randn(4, 4))
    for name in ("rand_like", "bernoulli_"):
        assert ops.is_random(nodes[name]), name
        assert ops.forbidden_recompute(nodes[name]) == RANDOM
    for name in ("add", "mul", "empty_like"):
        assert not ops.is_random(nodes[name]), name


def test_cpu_attention_is_random_only_with_dropout():
    """The hazard of DESIGN.md ("Tags are not semantics"): CPU flash attention carries
    ``nondeterministic_seeded`` even with ``dropout_p=0``, where it is deterministic."""
    op = aten._scaled_dot_product_flash_attention_for_cpu.default
    assert torch.Tag.nondeterministic_seeded in op.tags

    def f(x):
        return F.scaled_dot_product_attention(x, x, x, dropout_p=0.0, is_causal=True)

    nodes = traced(f, torch.randn(2, 4, 8, 16))
    attention = nodes["_scaled_dot_product_flash_attention_for_cpu"]
    assert attention.target is op and attention.args[3] == 0.0
    assert not ops.is_random(attention)
    assert ops.forbidden_recompute(attention) == ""

    # With dropout (positional or keyword), recomputing would draw a new mask.
    for node in (call(op, 3, 0.1), call(op, 3, dropout_p=0.1)):
        assert ops.is_random(node)
        assert ops.forbidden_recompute(node) == RANDOM
    assert not ops.is_random(call(op, 3))  # dropout_p defaults to 0
    sdpa = aten.scaled_dot_product_attention.default
    assert ops.is_random(call(sdpa, 3, None, 0.5))
    assert not ops.is_random(call(sdpa, 3, None, 0.0))


def test_recompute_tags_and_higher_order_ops():
    nodes = traced(lambda x: torch.rand_like(x) * 2, torch.randn(4))
    rand = nodes["rand_like"]
    rand.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE  # the user's choice wins
    assert ops.forbidden_recompute(rand) == ""
    mul = nodes["mul"]
    mul.meta["recompute"] = CheckpointPolicy.MUST_SAVE
    assert ops.forbidden_recompute(mul) == "tagged MUST_SAVE"

    from torch._higher_order_ops.cond import cond_op

    hop = call(cond_op, 3, ())
    assert ops.forbidden_recompute(hop) == "higher-order op cond"
    assert not ops.is_alias(hop) and not ops.is_mutating(hop) and not ops.is_collective(hop)
    assert P.not_runnable(hop, CPU) == "higher-order op cond"
