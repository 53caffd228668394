"""Joint fx graph -> :class:`~budget.core.problem.Problem`.

Turns torch's node classification (``classify_nodes``) into pure data: which forward
values the backward reads, what each costs to keep (per storage, so a view costs its
base once and a view of a parameter costs nothing), what each costs to recompute, and
which decisions are forbidden (random ops, side effects, mutation, user tags: the op
classification of :mod:`budget.estimators.ops`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.fx as fx

from ..core.problem import Problem
from ..estimators import Estimator, NodeCost
from ..estimators.ops import forbidden_recompute
from ..runtime import _torch_private as T
from ..runtime.graph_hash import graph_hash
from ..runtime.values import storage_of


def _read_by_backward(node: fx.Node, bw: object) -> bool:
    # The output node sits in torch's required_bw_nodes; being a forward output is not a read.
    return any(u in bw and u.op != "output" for u in node.users)


def module_path(node: fx.Node) -> str:
    """The node's module as ModTracker names it: the root module's class, then attributes
    (``GPT.blocks.0.attn``), from dynamo's ``nn_module_stack``; "" outside any module."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return ""
    entries = list(stack.values())
    root, leaf = str(entries[0][0]), str(entries[-1][0])
    below = leaf[len(root) :] if leaf.startswith(root) else "." + _source_name(leaf)
    return _class_name(entries[0][1]) + below


def _source_name(path: str) -> str:
    # dynamo sources of locals and globals: L['model'].body.0 -> model.body.0
    return path.replace("L['", "").replace("G['", "").replace("']", "")


def _class_name(cls: object) -> str:
    name = cls if isinstance(cls, str) else getattr(cls, "__qualname__", str(cls))
    return str(name).rsplit(".", 1)[-1]


def build_problem(
    graph: fx.Graph,
    node_info: T.NodeInfo,
    estimator: Estimator,
    reference_saved: Sequence[fx.Node] = (),
) -> tuple[Problem, list[fx.Node]]:
    """The Problem for a prepared joint graph, and the fx node behind each problem index."""
    inputs = list(node_info.inputs)
    input_set = set(inputs)
    bw = node_info.required_bw_nodes
    candidates = [
        n
        for n in graph.nodes
        if n.op != "output" and n not in bw and n not in input_set and n.op != "placeholder"
    ]
    cand_set = set(candidates)
    unclaimed = set(node_info.unclaimed_nodes)
    nodes = inputs + candidates
    index = {n: i for i, n in enumerate(nodes)}

    storage_key: dict[int, int] = {}
    storage_bytes: list[int] = []
    free_storages: set[int] = set()
    for n in inputs:
        st = storage_of(n.meta.get("val"))
        if st is not None:
            free_storages.add(st[0])

    names, ops, storage, cost, flops, moved, notes = [], [], [], [], [], [], []
    modules, reason = [], []
    is_input, needed, can_save, can_recompute = [], [], [], []
    for n in nodes:
        val = n.meta.get("val")
        names.append(n.name)
        ops.append(str(n.target) if n.op == "call_function" else n.op)
        modules.append(module_path(n))
        st = storage_of(val)
        if st is None:
            storage.append(-1)
        else:
            key, nbytes = st
            if key not in storage_key:
                storage_key[key] = len(storage_bytes)
                storage_bytes.append(0 if key in free_storages else nbytes)
            storage.append(storage_key[key])
        if n in input_set:
            is_input.append(True)
            needed.append(_read_by_backward(n, bw))
            can_save.append(True)
            can_recompute.append(False)
            cost.append(0.0)
            flops.append(0.0)
            moved.append(0.0)
            notes.append("")
            reason.append("graph input")
            continue
        is_input.append(False)
        needed.append(_read_by_backward(n, bw))
        savable = isinstance(val, torch.Tensor) or T.is_sym_node(n)
        why_not_save = "" if savable else "not a tensor (saved through its getitems)"
        if T.must_recompute(n):
            savable, why_not_save = False, "tagged MUST_RECOMPUTE"
        why_not_recompute = forbidden_recompute(n)
        can_save.append(savable)
        can_recompute.append(not why_not_recompute)
        reason.append(why_not_recompute or why_not_save)
        # An unclaimed node runs once either way (in forward if saved, else in backward):
        # recomputing it costs nothing, and it is not priced (nor profiled).
        est = NodeCost(0.0) if n in unclaimed else estimator.estimate(n)
        cost.append(est.cost)
        flops.append(est.flops)
        moved.append(est.bytes_moved)
        notes.append(est.note)

    edges = [
        (index[a], index[n])
        for n in candidates
        for a in n.all_input_nodes
        if a in index and (a in cand_set or a in input_set)
    ]
    reference = sorted({index[n] for n in reference_saved if n in index})
    problem = Problem(
        names=names,
        ops=ops,
        is_input=is_input,
        needed=needed,
        can_save=can_save,
        can_recompute=can_recompute,
        storage=storage,
        storage_bytes=storage_bytes,
        cost=cost,
        flops=flops,
        edges=edges,
        cost_unit=estimator.unit,
        moved=moved,
        cost_notes=notes,
        modules=modules,
        reason=reason,
        reference_saved=reference,
        graph_hash=graph_hash(graph),
    )
    return problem, nodes


def kept_inputs(fw: fx.GraphModule, num_fwd_outputs: int, static: set[str]) -> int:
    """Bytes of the forward's inputs, parameters and buffers (``static``) aside, that it
    hands the backward: the step's inputs, or, in a graph after a graph break, activations
    of the code before it, kept alive for the backward whatever the plan."""
    inputs = {}  # storage -> bytes of the non-static inputs (a saved view keeps its base)
    for node in fw.graph.nodes:
        if node.op == "placeholder" and node.name not in static:
            s = storage_of(node.meta.get("val"))
            if s is not None:
                inputs[s[0]] = s[1]
    output = next(n for n in reversed(fw.graph.nodes) if n.op == "output")
    kept = {}
    for node in output.args[0][num_fwd_outputs:]:
        s = storage_of(node.meta.get("val")) if isinstance(node, fx.Node) else None
        if s is not None and s[0] in inputs:
            kept[s[0]] = inputs[s[0]]
    return sum(kept.values())
