"""Inductor's layout copies: graph inputs a compiled forward saves in another layout.

With layout optimisation (``torch._inductor.config.layout_optimization``, on by default;
always taken on CPU with oneDNN, by a FLOP heuristic on CUDA), Inductor runs
convolutions channels-last, and with them every node it prefers channels-last (its
rule, :func:`budget.runtime._torch_private.nodes_prefer_channels_last`: the ancestors of
a convolution, through any op but ``bmm``). A 4-D graph input among them (the image
batch, every conv weight, and under autocast the float32 weights and images the bfloat16
casts read) is copied to channels-last in the forward, and when the backward needs it
too (``convolution_backward`` reads both; a recomputed cast reads the float32 weight),
the forward hands the backward the *copy*, not the input: memory that stays allocated
from the forward to the backward although the plan saves no activation for it
(ResNet-style models: about the size of all their conv weights). Measured in
bench/layout_copies.py.

budget counts these copies in every plan so that what it promises holds as measured:

- :func:`copied_inputs_bound`, on the joint graph before solving: the bytes of every
  4-D graph input Inductor prefers channels-last, that the backward reads or that a
  forward value the backward may recompute reads, and that is not already channels-last,
  when layout optimisation is enabled at all. The planner charges them to every plan (``Problem.fixed_bytes``) so a target is
  met with the copies in it.
- :func:`copied_inputs`, on each partitioned forward graph: the copies Inductor will make,
  with Inductor's own decision for that graph (``GraphLowering.decide_layout_opt``); the
  plan's ``copied_input_bytes``. Never above the bound.

To free the copies, turn layout optimisation off:
``torch._inductor.config.layout_optimization = False`` (measured saved bytes then equal
the plan's activations exactly; the convolutions run in the inputs' layout).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence, Set
from typing import Any

import torch
import torch.fx as fx

from ..runtime import _torch_private as T

CONVOLUTION = torch.ops.aten.convolution.default
CONVOLUTION_BACKWARD = torch.ops.aten.convolution_backward.default


def _copied(placeholder: fx.Node, preferred: Set[fx.Node]) -> bool:
    """Whether Inductor copies ``placeholder`` to channels-last (``preferred``: the nodes
    it lays out channels-last)."""
    val = placeholder.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dim() != 4:
        return False
    if val.is_contiguous(memory_format=torch.channels_last):
        return False  # already channels-last (or of a shape where both layouts agree)
    return placeholder in preferred


def _nbytes(node: fx.Node) -> int:
    val = node.meta["val"]
    return int(val.numel() * val.element_size())


def has_convolution(gm: fx.GraphModule) -> bool:
    """Whether ``gm`` runs a convolution (Inductor then lays it out channels-last)."""
    return any(n.target is CONVOLUTION for n in gm.graph.nodes)


def copied_inputs_bound(graph: fx.Graph, node_info: T.NodeInfo, compiler: str) -> int:
    """Bytes of the layout copies any plan of this joint graph can save (an upper bound of
    :func:`copied_inputs` over the plans; 0 for the eager compiler or with layout
    optimisation off)."""
    if compiler != "inductor" or not T.inductor_config.layout_optimization:
        return 0
    if not any(n.target is CONVOLUTION and node_info.is_required_fw(n) for n in graph.nodes):
        return 0
    preferred = T.nodes_prefer_channels_last(graph)
    bw = node_info.required_bw_nodes
    total = 0
    for p in node_info.inputs:
        # read by the backward, or by a forward value a plan may have it recompute
        read = any(u.op != "output" and (u in bw or node_info.is_required_fw(u)) for u in p.users)
        if read and _copied(p, preferred):
            total += _nbytes(p)
    return total


def runs_channels_last(gm: fx.GraphModule, compiler: str) -> bool:
    """Whether Inductor will run ``gm``'s convolutions channels-last (its own decision,
    ``GraphLowering.decide_layout_opt``; False for the eager compiler, with layout
    optimisation off, or with no convolution)."""
    if compiler != "inductor" or not T.inductor_config.layout_optimization:
        return False
    return has_convolution(gm) and bool(T.GraphLowering.decide_layout_opt(gm, is_inference=False))


def backward_keeps_layouts(inner_compile: Callable[..., Any]) -> Callable[..., Any]:
    """An Inductor ``inner_compile`` that compiles a CPU backward graph without layout
    optimisation (the forward, and any CUDA graph, as configured): the backward runs on
    the layouts the forward hands it, whatever the plan recomputes.

    ``decide_layout_opt`` runs per graph, on ``aten.convolution`` nodes: a backward that
    recomputes a convolution took layout optimisation for itself, one that recomputes
    none (b=1's) did not, so recomputing changed how every ``convolution_backward`` ran.
    Lowered channels-last, oneDNN's depthwise backward on an AVX-512 CPU copies its weight
    many times over, and depthwise convnets peaked above b=1 wherever a plan recomputed a
    convolution (``python bench/peak.py --model mobilenetv3``). Kept as handed over, every
    plan's backward runs its convolutions as b=1's does. CUDA graphs keep torch's choice:
    cuDNN's channels-last kernels are its fast path, and no CUDA step has shown the
    problem."""

    def compile_graph(gm: fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Any:
        on_cuda = any(isinstance(t, torch.Tensor) and t.is_cuda for t in example_inputs)
        if not kwargs.get("is_backward") or on_cuda:
            return inner_compile(gm, example_inputs, **kwargs)
        with T.inductor_config.patch(layout_optimization=False):
            return inner_compile(gm, example_inputs, **kwargs)

    return compile_graph


def handed_channels_last(
    fw: fx.GraphModule, copied: Set[str], channels_last: bool
) -> frozenset[str] | None:
    """The forward's values Inductor hands the backward channels-last where the backward
    keeps the layouts it is handed (:func:`backward_keeps_layouts`: a CPU graph whose
    forward runs channels-last): the 4-D values it prefers channels-last and the layout
    copies (``copied``). None where the backward lays out its convolutions as the forward
    does (``channels_last``: both or neither channels-last; a CUDA graph)."""
    if not channels_last or _on_cuda(fw):
        return None
    preferred = T.nodes_prefer_channels_last(fw.graph)
    return frozenset(
        n.name
        for n in fw.graph.nodes
        if n.name in copied or (n in preferred and _dense_4d(n.meta.get("val")))
    )


def backward_layouts(bw: fx.GraphModule, handed: Set[str]) -> dict[fx.Node, bool]:
    """The layout each of the backward's convolutions (recomputed, and
    ``convolution_backward``) runs in when the backward keeps the layouts it is handed
    (``handed``: :func:`handed_channels_last`): True channels-last, False contiguous;
    a convolution not named runs on the layouts of its graph's values.

    oneDNN runs a convolution channels-last where its input or its weight is, and one the
    backward recomputes on a channels-last input makes its output channels-last. Inductor
    lays a depthwise ``convolution_backward``'s input out anew, not channels-last (read
    off its code: a transposing copy before the call), and oneDNN then runs it
    without the channels-last depthwise path's weight copies."""
    last: set[fx.Node] = {n for n in bw.graph.nodes if n.op == "placeholder" and n.name in handed}
    layouts: dict[fx.Node, bool] = {}
    for n in bw.graph.nodes:
        if n.target is CONVOLUTION:
            x, w = n.args[0], n.args[1]
        elif n.target is CONVOLUTION_BACKWARD:
            x, w = n.args[1], n.args[2]
            if _depthwise(n):
                layouts[n] = False
                continue
        else:
            continue
        if x in last or w in last:
            layouts[n] = True
            if n.target is CONVOLUTION:
                last.add(n)
    return layouts


def _depthwise(n: fx.Node) -> bool:
    x = n.args[1].meta.get("val") if isinstance(n.args[1], fx.Node) else None
    groups = n.args[9] if len(n.args) > 9 else 1
    return isinstance(x, torch.Tensor) and x.dim() == 4 and groups > 1 and groups == x.shape[1]


def _dense_4d(val: object) -> bool:
    return isinstance(val, torch.Tensor) and val.dim() == 4


def _on_cuda(gm: fx.GraphModule) -> bool:
    return any(
        isinstance(v := n.meta.get("val"), torch.Tensor) and v.is_cuda for n in gm.graph.nodes
    )


def copied_inputs(fw: fx.GraphModule, num_fwd_outputs: int, compiler: str) -> dict[str, int]:
    """The forward's inputs Inductor will hand the backward as layout copies: name ->
    bytes of the copy (empty for the eager compiler or where Inductor keeps layouts)."""
    if not runs_channels_last(fw, compiler):
        return {}
    preferred = T.nodes_prefer_channels_last(fw.graph)
    output = next(n for n in reversed(fw.graph.nodes) if n.op == "output")
    saved = output.args[0][num_fwd_outputs:]
    return {
        p.name: _nbytes(p)
        for p in dict.fromkeys(saved)
        if isinstance(p, fx.Node) and p.op == "placeholder" and _copied(p, preferred)
    }
