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

from ..core.builder import ProblemBuilder
from ..core.problem import Problem
from ..estimators import Estimator, NodeCost, get_estimator
from ..estimators.ops import forbidden_recompute
from ..estimators.profile import ProfileEstimator
from ..runtime import _torch_private as T
from ..runtime.graph_hash import graph_hash
from ..runtime.values import data_dependent, storage_of


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


def estimator_for(spec: str, compiler: str) -> Estimator:
    """The estimator ``spec`` for the graphs ``compiler`` runs. Inductor fuses the ops it
    generates code for, so under it the profile estimator times only the ops that keep
    their own kernel (:mod:`budget.estimators.profile`)."""
    estimator = get_estimator(spec)
    if compiler == "inductor" and isinstance(estimator, ProfileEstimator):
        return ProfileEstimator(fused=True)
    return estimator


def written_inputs(graph: fx.Graph) -> set[fx.Node]:
    """The graph's inputs whose values the step writes: as the forward returns (AOTAutograd
    copies in the new values its output names: a buffer updated in place, such as
    spectral norm's power iteration) or inside the graph (``copy_``). A recomputation in
    the backward that read one would read its new value, not the one the forward read."""
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    mutated = set(T.input_mutation_outputs(output).values())
    written = {n for n in graph.find_nodes(op="placeholder") if n.meta.get("desc") in mutated}
    copies = graph.find_nodes(op="call_function", target=torch.ops.aten.copy_.default)
    return written | {n.args[0] for n in copies if n.args[0].op == "placeholder"}


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
    free = {st[0] for n in inputs if (st := storage_of(n.meta.get("val"))) is not None}
    written = written_inputs(graph)

    rows = ProblemBuilder()

    def storage(val: object) -> int:
        st = storage_of(val)
        return -1 if st is None else rows.storage(st[0], 0 if st[0] in free else st[1])

    for n in nodes:
        val = n.meta.get("val")
        op = str(n.target) if n.op == "call_function" else n.op
        needed = _read_by_backward(n, bw)
        if n in input_set:
            rows.add_kept(
                n.name,
                op=op,
                module=module_path(n),
                storage=storage(val),
                needed=needed,
                reason="graph input",
                is_input=True,
            )
            continue
        savable = isinstance(val, torch.Tensor) or T.is_sym_node(n)
        why_not_save = "" if savable else "not a tensor (saved through its getitems)"
        if T.must_recompute(n):
            savable, why_not_save = False, "tagged MUST_RECOMPUTE"
        why_not_recompute = forbidden_recompute(n) or next(
            (f"reads {a.name}, which the step writes" for a in n.all_input_nodes if a in written),
            "",
        )
        # An unclaimed node runs once either way (in forward if saved, else in backward):
        # recomputing it costs nothing, and it is not priced (nor profiled).
        rows.add_value(
            n.name,
            op=op,
            module=module_path(n),
            storage=storage(val),
            needed=needed,
            can_save=savable,
            can_recompute=not why_not_recompute,
            reason=why_not_recompute or why_not_save,
            priced=NodeCost(0.0) if n in unclaimed else estimator.estimate(n),
        )
    edges = [
        (index[a], index[n])
        for n in candidates
        for a in n.all_input_nodes
        if a in index and (a in cand_set or a in input_set)
    ]
    problem = rows.build(
        edges,
        cost_unit=estimator.unit,
        reference_saved=[index[n] for n in reference_saved if n in index],
        graph_hash=graph_hash(graph),
        data_dependent={n.name: how for n in nodes if (how := data_dependent(n.meta.get("val")))},
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
