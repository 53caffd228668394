"""What a traced eager step holds (:mod:`budget.eager.trace` records it): one fx graph
of the step's op calls, its candidate regions and autograd's saves."""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
import torch.fx as fx


@dataclass
class Region:
    """One candidate region: one call of a module's forward that checkpointing may wrap
    (a module run several times a step, as a layer shared across depth, has a region per
    call)."""

    name: str  # qualified name in the model ("blocks.0"; "" for the model itself)
    path: str  # as ModTracker names it ("GPT.blocks.0")
    calls: int = 0  # times the module's forward ran in the traced step (with gradients)
    call: int = 0  # which of those calls this region is (0 for the first)
    nested: str = ""  # the candidate module it also ran inside, where it did (else "")
    ops: list[str] = field(default_factory=list)  # the op calls the policy is asked about
    nodes: list[fx.Node] = field(default_factory=list)  # the op node behind each of ``ops``
    start: int = 0  # op count when the region started
    end: int = 0  # op count when it returned
    last_save: int | None = None  # op count at its last autograd save (recompute stops there)
    args: list[fx.Node] = field(default_factory=list)  # tensors it was given
    positional: list[fx.Node] = field(default_factory=list)  # its positional tensor args
    saves_at: int = 0  # saves recorded before it started (its index in Trace.saves)
    in_model: bool = False  # called during the model's own forward
    cache: str = ""  # the transformers cache it was given (state its recompute would reread)

    @property
    def key(self) -> tuple[str, int]:
        """The module and call this region is, as a plan's :class:`RegionChoice` names it."""
        return (self.name, self.call)


class Save(NamedTuple):
    """One tensor autograd saved in the traced step, in save order."""

    value: fx.Node
    region: int | None  # the candidate region it was saved in (None: outside all)
    count: int  # op calls made when it was saved
    in_model: bool  # saved during the model's own forward (not the loss or step code)


class Read(NamedTuple):
    """A value the traced step read from tensor data (``.item()``, a branch), or an output
    whose size depends on values (``nonzero``), as the real step has it."""

    op: str  # the op overload whose fake call could not answer
    value: Any
    region: int | None  # the candidate region it was read in (None: outside all)
    # its position among the region's op calls (Region.ops), whose policy says whether a
    # recomputation runs it again; None where checkpointing never caches the call (torch's
    # SAC_IGNORED_OPS), so a recomputation always runs it again
    call: int | None


def op_of(node: fx.Node) -> fx.Node:
    """The op call behind ``node`` (a getitem's tuple-valued op)."""
    return node.args[0] if node.target is operator.getitem else node  # type: ignore[return-value]


@dataclass
class Trace:
    """One traced step: its graph and what checkpointing needs to know about each node."""

    graph: fx.Graph
    inputs: list[fx.Node]  # placeholders: parameters, buffers, user inputs, constants
    constants: list[fx.Node]  # the placeholders the step itself made (activations)
    ops: list[fx.Node]  # op nodes, in call order (getitems not included)
    regions: list[Region]
    order: dict[fx.Node, int]  # op node -> its position in the call order
    region_of: dict[fx.Node, int]  # op node -> the region it ran in (absent outside)
    module_of: dict[fx.Node, str]  # op node -> module path
    saves: list[Save]
    mutated_after: dict[fx.Node, int]  # op node -> last op that writes its output's storage
    rng_state_bytes: int  # bytes of the RNG state checkpointing keeps per region call
    device: torch.device
    reads: list[Read] = field(default_factory=list)  # values read from tensor data, in order
    outputs: list[fx.Node] = field(default_factory=list)  # what the model's forward returned
    backward_in_step: bool = False  # the step ran a backward itself (torch.autograd.grad)
    # generator states the model's own checkpointing keeps (torch.utils.checkpoint calls
    # in its forward), each of rng_state_bytes, whatever the plan
    own_rng_states: int = 0
    # values its selective policies cache for the recomputation (torch's caching mode
    # keeps them, not autograd's saved tensors), whatever the plan
    own_cached: list[fx.Node] = field(default_factory=list)
    model_calls: int = 1  # times the step ran the model's own forward

    def region_of_value(self, node: fx.Node | None) -> int | None:
        """The region the op making ``node`` ran in (an item of a tuple: its op's)."""
        return None if node is None else self.region_of.get(op_of(node))

    def outputs_of(self, node: fx.Node) -> list[fx.Node]:
        """The value nodes of an op: itself, or its getitems when it has several outputs."""
        items = [u for u in node.users if u.target is operator.getitem]
        return items if isinstance(node.meta.get("val"), (tuple, list)) else [node]


def every_call(
    made: list[Region], candidates: list[tuple[str, str]], calls: list[int], nested: dict[int, str]
) -> list[Region]:
    """The regions of a trace: those ``made`` (one per call of a candidate, in call order),
    each told its module's ``calls`` and the candidate it also ran ``nested`` in; then one
    for each of ``candidates`` (name, ModTracker path) whose forward did not run with
    gradients on."""
    regions = list(made)
    for index, (name, path) in enumerate(candidates):
        mine = [r for r in regions if r.path == path]
        for r in mine:
            r.calls, r.nested = calls[index], nested.get(index, "")
        if not mine:
            regions.append(Region(name, path, nested=nested.get(index, "")))
    return regions
