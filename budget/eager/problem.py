"""A traced eager step -> :class:`~budget.core.problem.Problem`, for a set of checkpointed regions.

What eager autograd keeps for the backward is fixed by where checkpointing applies, so the
problem is built for a set ``checkpointed`` of candidate regions (indices into
``trace.regions``):

- outside checkpointed regions autograd keeps what it saves, as it is: those values are
  needed and cannot be recomputed (nothing there is recomputed), and so are the RNG
  states the model's own checkpointing keeps (nodes of their own, priced as below);
- a checkpointed region keeps the tensors it was given (its inputs), the RNG state it
  restores (``preserve_rng_state``; a node of its own, priced at the state's size on CPU
  and at 0 on an accelerator) and what the selective-checkpoint policy caches; its
  autograd saves are dropped and rebuilt in backward by running the region again up to
  its last save (torch's early stop). Every op call up to there is either cached (save) or
  run again (recompute): all of them are needed, and their recompute cost is what eager
  pays;
- an op with several outputs is cached whole: its outputs share one storage group, so
  saving any of them counts them all;
- in a checkpointed region, random ops are always recomputed (the restored RNG state
  replays their draws; a cached random op would shift the draws of the random ops after
  it), values written in place later are never cached (torch refuses to return a mutated
  cache entry), and ops that write a tensor from outside the region are never
  recomputed (the write would happen twice). BatchNorm may be: its recomputation updates
  copies of the running statistics (:mod:`budget.eager.policy`), and its outputs in
  training depend on the batch alone.

With offload planned (``CostCache.link``), the values :func:`budget.eager.offload.movable`
allows carry offload terms.

Counted this way, a plan's saved bytes are the bytes the eager step keeps alive after its
forward (the loss aside), which is what :func:`budget.eager.measure.retained_bytes` measures.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection
from dataclasses import replace

import torch
import torch.fx as fx
from torch.utils.checkpoint import SAC_IGNORED_OPS

from ..core.builder import ProblemBuilder
from ..core.problem import Problem
from ..estimators import Estimator, NodeCost
from ..estimators.ops import forbidden_recompute, is_mutating, is_random
from ..planning.offload import price_offload
from ..runtime.graph_hash import graph_hash
from ..runtime.values import on_host, storage_of
from .offload import movable
from .traced import Trace, op_of

RNG_OP = "checkpoint.rng_state"
# why a value is kept whatever the plan, in the reasons torch's checkpointing keeps it for
# too (a checkpointed module's inputs, what runs outside the modules, the step's inputs,
# what no op makes); a value kept for another reason torch would run again
# (budget.eager.torch_plan)
CONSTANT = "made outside the dispatcher (no op to run again)"
GRAPH_INPUT = "graph input"
HELD = "kept anyway (a region input, or saved outside a region)"
OUTSIDE = "outside checkpointed regions: autograd keeps what it saves"
RNG_STATE = "checkpointing keeps the RNG state to replay random ops"
OWN_RNG_STATE = "the model's own checkpointing keeps the RNG state"
TORCH_KEEPS_TOO = frozenset({CONSTANT, GRAPH_INPUT, HELD, OUTSIDE, RNG_STATE, OWN_RNG_STATE})


class CostCache:
    """Each node priced once, whatever set of regions a problem is built for; and each
    problem built once per set of checkpointed regions (``problems``: the planner's memo,
    shared by the plans of one trace)."""

    def __init__(self, estimator: Estimator, link: float | None = None) -> None:
        self.estimator = estimator
        self.link = link  # host link bytes/s when offload is planned, else None
        self.costs: dict[fx.Node, NodeCost] = {}
        self.problems: dict[tuple[int, ...], tuple[Problem, list[fx.Node | None]]] = {}
        self.min_bytes: int | None = None  # the least saved memory, once solved

    def without_offload(self) -> CostCache:
        """A cache for the plans without offload of the same trace: the node prices
        shared, the problems (which carry offload's terms) its own."""
        plain = CostCache(self.estimator)
        plain.costs = self.costs
        return plain

    def __call__(self, node: fx.Node) -> NodeCost:
        if node not in self.costs:
            self.costs[node] = self.estimator.estimate(node)
        return self.costs[node]


def _on(node: fx.Node, device: torch.device) -> bool:
    """Whether ``node``'s value lives on the step's device: a GPU step's memory is the
    GPU's, and the host scalars some of its kernels return (efficient attention's RNG seed
    and offset on CUDA, ``on_host``) take none of it."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return True
    return val.device.type == device.type and not on_host(node)


def build_problem(
    trace: Trace, checkpointed: Collection[int], costs: CostCache
) -> tuple[Problem, list[fx.Node | None]]:
    """The Problem of ``trace`` with the regions ``checkpointed`` checkpointed, and the fx
    node behind each problem index (None for the RNG-state nodes)."""
    ckpt = set(checkpointed)
    held = held_values(trace, ckpt)
    values = [n for n in trace.graph.nodes if n.op == "call_function"]
    nodes: list[fx.Node | None] = [*trace.inputs, *values]
    index = {n: i for i, n in enumerate(nodes) if n is not None}
    rows = ProblemBuilder()
    storage = _storages(trace, ckpt, rows, held)
    for n in nodes:
        assert n is not None
        _add_node(rows, n, storage(n), trace, ckpt, held, costs)
    for r in sorted(ckpt):  # one node per checkpointed region call: the RNG state it keeps
        nodes.append(None)
        rows.add_kept(
            f"rng_state_{r}",
            op=RNG_OP,
            module=trace.regions[r].path,
            storage=rows.new_storage(trace.rng_state_bytes),
            needed=True,
            reason=RNG_STATE,
        )
    for i in range(trace.own_rng_states):  # those the model's own checkpointing keeps
        nodes.append(None)
        rows.add_kept(
            f"model_rng_state_{i}",
            op=RNG_OP,
            storage=rows.new_storage(trace.rng_state_bytes),
            needed=True,
            reason=OWN_RNG_STATE,
        )
    edges = [(index[a], index[n]) for n in values for a in n.all_input_nodes if a in index]
    problem = rows.build(edges, cost_unit=costs.estimator.unit, graph_hash=graph_hash(trace.graph))
    if costs.link is not None:
        terms = price_offload(problem, movable(trace, ckpt, nodes), costs.link)
        problem = replace(problem, offload=terms)
    return problem, nodes


def storage_key(n: fx.Node) -> int | None:
    """The storage of ``n``'s value (None: not a tensor)."""
    st = storage_of(n.meta.get("val"))
    return None if st is None else st[0]


def held_storages(trace: Trace, ckpt: set[int], held: set[fx.Node] | None = None) -> set[int]:
    """The storages of the values held whatever the plan (:func:`held_values`; views of
    one share it), with ``ckpt`` checkpointed."""
    keys = {storage_key(n) for n in (held_values(trace, ckpt) if held is None else held)}
    return {k for k in keys if k is not None}


def held_values(trace: Trace, ckpt: set[int]) -> set[fx.Node]:
    """What is kept whatever the plan: saves outside checkpointed regions, region inputs,
    what the model's own selective checkpointing caches."""
    held = {s.value for s in trace.saves if s.region is None or s.region not in ckpt}
    held.update(trace.own_cached)
    for r in ckpt:
        held.update(trace.regions[r].args)
    return held


def _storages(
    trace: Trace, ckpt: set[int], rows: ProblemBuilder, held: set[fx.Node]
) -> Callable[[object], int]:
    """A value's storage group in ``rows`` (-1: none): per real storage, but an op with
    several outputs in a checkpointed region is cached whole, so its new output storages
    form one group, less the outputs ``held`` whatever the plan (a post-norm block's last
    layer norm: its output, the next block's input, is kept without its statistics, which
    only a cache of the op would keep); not an op whose output is written in place later,
    which is never cached (:func:`_cacheable`): its outputs count alone (a ResNet block's
    output, BatchNorm's written by the in-place ReLU and kept as the next block's input,
    without BatchNorm's statistics). Storages of the step's inputs, and off the step's
    device, count 0."""
    group: dict[int, int] = {}
    kept = held_storages(trace, ckpt, held)
    for op in trace.ops:
        outs = op.meta.get("val")
        r = trace.region_of.get(op)
        if not isinstance(outs, (tuple, list)) or r is None or r not in ckpt:
            continue
        if op in trace.mutated_after:
            continue
        ins = {storage_of(a.meta.get("val")) for a in op.all_input_nodes}
        keys = [
            st[0]
            for o in outs
            if (st := storage_of(o)) is not None and st not in ins and st[0] not in kept
        ]
        for k in keys[1:]:
            group[k] = keys[0]
    made = set(trace.constants)
    free = {
        st[0]
        for n in trace.inputs
        if n not in made and (st := storage_of(n.meta.get("val"))) is not None
    }

    def storage(n: fx.Node) -> int:
        st = storage_of(n.meta.get("val"))
        if st is None:
            return -1
        counted = st[0] not in free and _on(n, trace.device)
        return rows.storage(group.get(st[0], st[0]), st[1] if counted else 0, member=st[0])

    return storage


def _add_node(
    rows: ProblemBuilder,
    n: fx.Node,
    storage: int,
    trace: Trace,
    ckpt: set[int],
    held: set[fx.Node],
    costs: CostCache,
) -> None:
    """``n``'s row: a constant or an input (kept), or a value whose decisions depend on
    whether its region is checkpointed (cached or run again up to the region's last save)."""
    if n in trace.constants:  # made by the step without an op: kept, never recomputed
        rows.add_kept(n.name, op="constant", storage=storage, needed=n in held, reason=CONSTANT)
        return
    if n.op == "placeholder":
        rows.add_kept(
            n.name,
            op="placeholder",
            storage=storage,
            needed=n in held,
            reason=GRAPH_INPUT,
            is_input=True,
        )
        return
    val = n.meta.get("val")
    op = op_of(n)
    r = trace.region_of.get(op)
    last = trace.regions[r].last_save if r is not None and r in ckpt else None
    # an op with several outputs is needed through its getitems (it holds no tensor)
    prefix = last is not None and trace.order[op] < last and not isinstance(val, (tuple, list))
    is_tensor = isinstance(val, torch.Tensor)
    save_ok, why_not_save = is_tensor, "" if is_tensor else "not a tensor"
    if r is not None and r in ckpt:
        # held: kept whatever the plan, as torch's checkpointing keeps it (its reason names
        # that, not why it could not be recomputed: budget.eager.torch_plan reads it)
        why_not = HELD if n in held else _why_not_recompute(n, op, trace, r)
        if save_ok and n not in held:
            save_ok, why_not_save = _cacheable(op, trace)
    else:
        why_not = OUTSIDE
    rows.add_value(
        n.name,
        op=str(n.target) if n.target is not operator.getitem else "getitem",
        module=trace.module_of.get(op, ""),
        storage=storage,
        needed=n in held or prefix,
        can_save=save_ok,
        can_recompute=not why_not,
        reason=why_not or why_not_save,
        priced=costs(n) if n.target is not operator.getitem else NodeCost(0.0),
    )


def _cacheable(op: fx.Node, trace: Trace) -> tuple[bool, str]:
    """Whether the selective-checkpoint policy may cache ``op``'s outputs, and why not.
    A cached op is not run when its region is recomputed: an in-place op that writes a
    tensor the region makes must run, or the tensor made again goes unwritten (code that
    reads it, not the op's result, as timm's DropPath reads its mask after ``div_``)."""
    if op.target in SAC_IGNORED_OPS:
        return False, "checkpointing never caches this op"
    if op in trace.mutated_after:
        return False, "written in place later (a cache entry must not change)"
    if is_random(op):
        return False, "random: recomputed with the forward's RNG state"
    region = trace.region_of.get(op)
    if is_mutating(op) and any(
        _writes(op, a) and not _outside(a, trace, region) for a in op.all_input_nodes
    ):
        return False, "writes in place to a tensor the region makes (run again with it)"
    return True, ""


def _outside(value: fx.Node, trace: Trace, region: int | None) -> bool:
    """Whether ``value`` comes from outside ``region``: a step input, or another region's."""
    return value.op == "placeholder" or trace.region_of.get(op_of(value)) != region


def _why_not_recompute(node: fx.Node, op: fx.Node, trace: Trace, region: int) -> str:
    """Why ``node`` (of op ``op``, in checkpointed ``region``) must not be run again."""
    if is_mutating(op):
        for a in op.all_input_nodes:
            if _outside(a, trace, region) and _writes(op, a):
                return "writes in place to a tensor from outside the region"
        return ""
    if is_random(op):
        return ""  # the restored RNG state replays it
    return forbidden_recompute(op)


def _writes(op: fx.Node, value: fx.Node) -> bool:
    schema = getattr(op.target, "_schema", None)
    if schema is None:
        return True
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        given = op.args[i] if i < len(op.args) else op.kwargs.get(arg.name)
        if given is value or (isinstance(given, (list, tuple)) and value in given):
            return True
    return False
