"""Predict a training step's peak memory from the forward and backward graphs it runs.

The step runs the partitioned forward graph, then (when the loss is backpropagated) the
backward graph; both are boxed (their argument lists are cleared on entry), so a value
lives from the node that makes it to the last node that reads it, and no longer:

- graph inputs of the forward (parameters, user inputs, buffers) are resident before the
  step: they cost nothing here, and neither does a view of them;
- every other tensor costs its storage once (views and ``getitem`` share their base's);
- a forward output stays alive into the backward: the saved values until the backward
  node that last reads them, the user's outputs (the loss) to the end of the step; the
  new values of mutated inputs (BatchNorm's running statistics, where the compiler keeps
  no mutation in the graph: ``compiler="eager"``) only to the forward's end, where
  AOTAutograd copies them into their inputs. A graph that ends at a graph break hands
  its outputs to the code after it, which drops them as the step returns: they live to
  the forward's end only (what a later graph's backward reads of them it counts itself:
  ``Plan.kept_input_bytes``);
- the backward's tangents are allocated as it starts; the loss's gradient lives to its
  end (``backward()`` holds it), any other (a later graph's gradient, zeros for an output
  the loss does not use) until its last reader where the compiled backward frees it
  (:func:`budget.runtime._torch_private.tangent_held`). The backward's outputs (the
  gradients) live to its end.

The peak is the largest sum of live storages after any node has made its outputs and
before anything it was the last reader of is freed. This is what the graphs ask for:
exact for ``compiler="eager"``, which runs them op by op, but for what a kernel allocates
and frees inside itself: CPU convolutions, where that is large, add an estimate of it at
their step (:func:`budget.estimators.memory.workspace_bytes`). Inductor fuses pointwise
ops, whose intermediates then never exist, so it peaks lower than predicted (by how
much: ``python bench/peak.py``). The prediction is an upper bound there on purpose: a model of
Inductor's fusion (a pointwise value with one fusible reader is never materialised) was
tried, missed on both sides, and a peak budget must hold as measured.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import torch
import torch.fx as fx

from ..core.plan import LivePoint
from ..estimators.memory import tensor_bytes, workspace_bytes
from ..runtime._torch_private import input_mutation_outputs, tangent_held
from ..runtime.values import generator_state_bytes, rng_state_output, storage_of, tensors
from .layout import backward_layouts


@dataclass
class PeakPrediction:
    """The predicted peak (bytes above what was resident before the step) and the live
    bytes after each node of the forward, then the backward."""

    peak_bytes: int
    timeline: list[LivePoint]
    # where the peak is: the index of its node in the forward's nodes then the backward's
    # (the first such node where several reach it), and the live bytes after every node
    # in that order (placeholders and outputs included, unlike the timeline)
    peak_step: int = 0
    live: list[int] | None = None


@dataclass
class Memo:
    """What the peak model reads off each node, kept between predictions of graphs whose
    nodes keep their values (the rescheduler predicts the same graphs again and again):
    a node's storages until its value is replaced (the rescheduler gives a rewired view a
    new one), its kernel's workspace (shapes only, which no rewiring changes)."""

    storages: dict[fx.Node, tuple[object, list[tuple[int, int]]]] = field(default_factory=dict)
    workspace: dict[tuple[fx.Node, bool | None], int] = field(default_factory=dict)
    # and by what it is read from (the rescheduler's clones make the same calls again)
    workspace_of: dict[Hashable, int] = field(default_factory=dict)
    # a node's (any tensor on an accelerator, raw storages in host memory), per value
    devices: dict[fx.Node, tuple[object, bool, list[int]]] = field(default_factory=dict)
    # the forward's walk (the rescheduler changes the backward only), while its nodes and
    # their values are the same
    forward: _Walk | None = None


def node_storages(node: fx.Node, memo: Memo | None = None) -> list[tuple[int, int]]:
    """(raw storage, bytes) of each tensor ``node`` makes (kept in ``memo`` when given)."""
    val = node.meta.get("val")
    if memo is not None:
        kept = memo.storages.get(node)
        if kept is not None and kept[0] is val:
            return kept[1]
    out = []
    for t in tensors(val):
        s = storage_of(t)
        if s is not None:
            out.append(s)
    if rng_state_output(node):  # a size of no hint: the generator's state, as it runs
        out = [(raw, generator_state_bytes(val.device.type)) for raw, _ in out]
    if memo is not None:
        memo.storages[node] = (val, out)
    return out


def _devices(node: fx.Node, memo: Memo | None) -> tuple[object, bool, list[int]]:
    """``node``'s value, whether any of its tensors is on an accelerator, and the raw
    storages of those in host memory (kept in ``memo`` when given)."""
    val = node.meta.get("val")
    kept = memo.devices.get(node) if memo is not None else None
    if kept is None or kept[0] is not val:
        ts = tensors(val)
        on_host = [s[0] for t in ts if t.device.type == "cpu" and (s := storage_of(t))]
        kept = (val, any(t.device.type not in ("cpu", "meta") for t in ts), on_host)
        if memo is not None:
            memo.devices[node] = kept
    return kept


Key = tuple[str, int]  # (graph, fake storage): a recomputed value shares its forward twin's
# fake tensor, but is a storage of its own
Step = tuple[fx.Node, str]  # a node and its phase, "forward" or "backward"


@dataclass
class _Walk:
    """What the peak model reads off one graph's nodes, in one pass (:func:`_walk`)."""

    nodes: list[fx.Node]
    vals: list[object]  # each node's value as walked
    keys: dict[fx.Node, list[Key]]  # each node's storages as keys
    sizes: dict[int, int]  # bytes of each raw storage
    accelerated: bool  # a tensor on an accelerator
    host: set[int]  # raw storages in host memory (offloaded copies, on an accelerator)

    def same(self, nodes: list[fx.Node]) -> bool:
        """Whether ``nodes`` are the nodes walked, with the same values."""
        return len(nodes) == len(self.nodes) and all(
            a is b and a.meta.get("val") is v
            for a, b, v in zip(nodes, self.nodes, self.vals, strict=True)
        )


def _walk(nodes: list[fx.Node], graph: str, given: dict[int, Key], memo: Memo | None) -> _Walk:
    """Each node's storages as keys: a value shares a storage with an input when the raw
    storage is the same (a view, a getitem), and takes that input's key (the last input's
    of several); otherwise its storage is new, keyed in ``graph``. Placeholders take
    ``given`` keys (the storages handed over from the forward) or are new. With the sizes
    of the storages and where they are (:func:`_devices`)."""
    keys: dict[fx.Node, list[Key]] = {}
    sizes: dict[int, int] = {}
    accelerated, host = False, set()
    for node in nodes:
        storages = node_storages(node, memo)
        own = []
        for raw, nbytes in storages:
            sizes[raw] = nbytes
            key = given.get(raw, (graph, raw)) if node.op == "placeholder" else (graph, raw)
            if node.op != "placeholder":
                for arg in node.all_input_nodes:
                    for k in keys.get(arg, ()):
                        if k[1] == raw:
                            key = k
            own.append(key)
        keys[node] = own
        _, on_accelerator, on_host = _devices(node, memo)
        accelerated |= on_accelerator
        host.update(on_host)
    vals = [n.meta.get("val") for n in nodes]
    return _Walk(nodes, vals, keys, sizes, accelerated, host)


def predict_peak(
    fw: fx.GraphModule,
    bw: fx.GraphModule | None,
    recomputed: set[str] | frozenset[str] = (),
    *,
    num_user_outputs: int = 1,
    outputs_held: bool = True,
    copied: frozenset[str] = frozenset(),
    channels_last: bool = False,
    handed_channels_last: frozenset[str] | None = None,
    memo: Memo | None = None,
    measure_workspace: bool = True,
    inductor: bool = False,
) -> PeakPrediction:
    """The peak of running ``fw`` then ``bw`` (see the module docstring).

    ``recomputed``: names of the backward's nodes that recompute forward values; their
    timeline points are marked ``recompute``. ``num_user_outputs``: how many of the
    forward's outputs, first in its output list, are the user's (the loss): held to the end
    where ``outputs_held``, else (a graph that ends at a graph break) to the forward's end.
    ``copied``: names of the forward's inputs the compiler copies to another layout as the
    forward starts and hands the backward as copies (:mod:`budget.compile.layout`): not
    resident, allocated at the forward's start, freed after the backward's last read.
    ``channels_last``: the compiler runs every convolution channels-last whatever the
    graph's layouts (Inductor's layout optimisation), which changes their workspace.
    ``handed_channels_last``: where the backward keeps the layouts it is handed (CPU
    Inductor), the forward's values it is handed channels-last
    (:func:`budget.compile.layout.handed_channels_last`); its convolutions then run
    channels-last only where those reach them. ``memo``: what is read off each node, kept between calls (the rescheduler predicts the
    same graphs again and again; a node whose value it replaces is read again: :class:`Memo`).
    ``measure_workspace``: CPU kernels' workspace measured on this host, else by rule.
    ``inductor``: Inductor generates the code (its own prims are lowered into it, with no
    temporaries of their own); else each node runs as its own call.
    """
    fw_nodes = list(fw.graph.nodes)
    bw_nodes = list(bw.graph.nodes) if bw is not None else []
    steps = [(n, "forward") for n in fw_nodes] + [(n, "backward") for n in bw_nodes]
    forward = memo.forward if memo is not None else None
    if forward is None or not forward.same(fw_nodes):
        forward = _walk(fw_nodes, "fw", {}, memo)
        if memo is not None:
            memo.forward = forward
    fw_keys = forward.keys
    # The backward's inputs are forward storages (saved values, parameters) or tangents.
    handed_over = {key[1]: key for keys in fw_keys.values() for key in keys}
    backward = _walk(bw_nodes, "bw", handed_over, memo)
    bw_keys = backward.keys
    sizes = {**forward.sizes, **backward.sizes}
    if forward.accelerated or backward.accelerated:
        for raw in forward.host | backward.host:
            sizes[raw] = 0  # offloaded copies, in host memory: not the device's

    def keys(node: fx.Node, phase: str) -> list[Key]:
        return (fw_keys if phase == "forward" else bw_keys)[node]

    resident = {
        k
        for n in fw_nodes
        if n.op == "placeholder" and n.name not in copied
        for k in keys(n, "forward")
    }
    last = _last_steps(steps, keys, num_user_outputs if outputs_held else 0)
    bw_layouts = (
        None
        if bw is None or handed_channels_last is None
        else backward_layouts(bw, handed_channels_last)
    )

    def layout(node: fx.Node, phase: str) -> bool | None:
        if phase == "forward" or bw_layouts is None:
            return channels_last or None
        return bw_layouts.get(node)

    live: dict[Key, int] = {}
    timeline: list[LivePoint] = []
    current = peak = peak_step = 0
    live_after: list[int] = []
    freed_at: dict[int, list[Key]] = {}
    for k, i in last.items():
        freed_at.setdefault(i, []).append(k)
    for i, (node, phase) in enumerate(steps):
        for k in keys(node, phase):
            if k in resident or k in live:
                continue
            live[k] = sizes[k[1]]
            current += live[k]
        if node.op not in ("placeholder", "output") or (
            phase == "backward" and node.op == "placeholder"
        ):
            kind = "recompute" if phase == "backward" and node.name in recomputed else phase
            timeline.append(LivePoint(node.name, kind, current))  # type: ignore[arg-type]
        live_after.append(current)
        at = current + _workspace(node, layout(node, phase), memo, measure_workspace, inductor)
        if at > peak:
            peak, peak_step = at, i
        for k in freed_at.get(i, []):
            if k in live:
                current -= live.pop(k)
    return PeakPrediction(peak, timeline, peak_step, live_after)


def _last_steps(
    steps: list[Step], keys: Callable[[fx.Node, str], list[Key]], held_outputs: int
) -> dict[Key, int]:
    """Each storage's last step: its last reader's, or the end (``len(steps)``) for the
    backward's outputs (the gradients), the forward's first ``held_outputs`` outputs the
    user holds (the loss) and the tangents autograd holds; saved values until the
    backward's last read. The new values of mutated inputs (first among the forward's
    outputs) are copied into their inputs as the forward returns and dropped."""
    last: dict[Key, int] = {}
    end = len(steps)
    for i, (node, phase) in enumerate(steps):
        for k in keys(node, phase):
            last[k] = max(last.get(k, i), i)
        for arg in node.all_input_nodes:
            for k in keys(arg, phase):
                last[k] = max(last.get(k, i), i)
        if (
            node.op == "placeholder"
            and phase == "backward"
            and node.name.startswith("tangents")
            and tangent_held(node.meta.get("val"))
        ):
            for k in keys(node, phase):
                last[k] = end
        if node.op == "output":
            outputs = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
            dropped = input_mutation_outputs(node) if phase == "forward" else frozenset()
            held = [
                arg
                for j, arg in enumerate(outputs)
                if phase == "backward" or (j < held_outputs and j not in dropped)
            ]
            for arg in held:
                if isinstance(arg, fx.Node):
                    for k in keys(arg, phase):
                        last[k] = end
    return last


def _workspace(
    node: fx.Node,
    layout: bool | None,
    memo: Memo | None = None,
    measure: bool = True,
    inductor: bool = False,
) -> int:
    """What ``node``'s kernel allocates and frees inside itself (CPU convolutions), run
    channels-last (``layout`` True), on its values' own layouts (None), or (False: a
    ``convolution_backward`` whose input Inductor lays out anew,
    :func:`budget.compile.layout.backward_layouts`) contiguous, the copy of its input
    made for the call counted with it."""
    if node.op != "call_function":
        return 0
    if memo is not None and (node, layout) in memo.workspace:
        return memo.workspace[node, layout]
    args = list(fx.node.map_arg(node.args, lambda a: a.meta.get("val")))
    kwargs = dict(fx.node.map_arg(node.kwargs, lambda a: a.meta.get("val")))
    call = _call(node.target, (args, kwargs, node.meta.get("val")), layout, measure, inductor)
    if memo is not None and call is not None and call in memo.workspace_of:
        memo.workspace[node, layout] = memo.workspace_of[call]
        return memo.workspace_of[call]
    device = next((a.device.type for a in args if isinstance(a, torch.Tensor)), None)
    copy = 0
    if layout is False:  # on a contiguous copy of its input, made for the call
        args = [_contiguous(a) for a in args]
        copy = tensor_bytes(args[1]) if isinstance(args[1], torch.Tensor) else 0
    out = copy + workspace_bytes(
        node.target,
        args,
        node.meta.get("val"),
        channels_last=layout or None,
        device=device,
        measure=measure,
        inductor=inductor,
        kwargs=kwargs,
    )
    if memo is not None:
        memo.workspace[node, layout] = out
        if call is not None:
            memo.workspace_of[call] = out
    return out


def _call(target: object, values: object, *flags: object) -> Hashable | None:
    """What a call's workspace is read from: its op, its values' metadata (sizes, strides,
    offset, dtype, device, storage bytes; which of them share a storage) and ``flags``;
    None where one is not hashable (a symbolic size)."""
    storages: dict[int, int] = {}

    def frozen(x: object) -> Hashable:
        if isinstance(x, torch.Tensor):
            s = storage_of(x)
            shared = None if s is None else storages.setdefault(s[0], len(storages))
            meta = (x.shape, x.stride(), x.storage_offset(), x.dtype, x.device)
            return ("tensor", *map(tuple, meta[:2]), *meta[2:], s and s[1], shared)
        if isinstance(x, (list, tuple)):
            return (type(x).__name__, *map(frozen, x))
        if isinstance(x, dict):
            return ("dict", *((k, frozen(v)) for k, v in x.items()))
        return x  # type: ignore[return-value]

    key = (target, frozen(values), flags)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _contiguous(val: object) -> object:
    """A meta tensor of ``val``'s shape and dtype, contiguous (``val`` where no tensor)."""
    if not isinstance(val, torch.Tensor):
        return val
    return torch.empty(val.shape, dtype=val.dtype, device="meta")
