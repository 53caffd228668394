"""The generator states torch saves for the random ops a user's checkpoint recomputes.

Where the model checkpoints a region itself (``torch.utils.checkpoint``, transformers'
``gradient_checkpointing_enable``, timm's ``set_grad_checkpointing``) and the region holds
a random op (dropout, or attention, whose kernel takes a dropout probability), the joint
graph marks the op must-recompute, and torch's partitioner makes the recomputation draw the
same numbers: the forward saves the generator's state before the op
(``run_and_save_rng_state``) and the backward runs the op again from it. On the CPU that
state is the Mersenne Twister's (about 5 KB per op); on CUDA, where torch threads the
generator's seed and offset through the graphs instead (its partitioner's
``graphsafe_rng_functionalization``, on by default), no state tensor is saved.

Every plan saves them, outside its decisions: the planner charges a bound to every plan
(``Problem.fixed_bytes``, beside the layout copies) and partitioning replaces it with what
the forward saves (``Plan.rng_state_bytes``).
"""

from __future__ import annotations

import torch
import torch.fx as fx

from ..runtime import _torch_private as T
from ..runtime.values import generator_state_bytes, node_device, rng_state_output


def rng_states_bound(graph: fx.Graph, node_info: T.NodeInfo) -> int:
    """Bytes of the generator states any plan of this joint graph saves, at most: one per
    forward random op marked must-recompute."""
    return sum(
        generator_state_bytes(node_device(n).type)
        for n in graph.nodes
        if n.op == "call_function"
        and node_info.is_required_fw(n)
        and T.must_recompute(n)
        and torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ())
    )


def rng_states(fw: fx.GraphModule) -> int:
    """Bytes of the generator states the partitioned forward ``fw`` hands its backward."""
    (out,) = fw.graph.find_nodes(op="output")
    handed = {a for a in out.args[0] if isinstance(a, fx.Node)}
    return sum(
        generator_state_bytes(n.meta["val"].device.type) for n in handed if rng_state_output(n)
    )
