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
their step (:mod:`budget.compile.kernel_workspace`). Inductor fuses pointwise
ops, whose intermediates then never exist, so it peaks lower than predicted (by how
much: ``python bench/peak.py``). The prediction is an upper bound there on purpose: a model of
Inductor's fusion (a pointwise value with one fusible reader is never materialised) was
tried, missed on both sides, and a peak budget must hold as measured.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch.fx as fx

from ..core.plan import LivePoint
from ..runtime._torch_private import input_mutation_outputs, tangent_held
from ..runtime.values import generator_state_bytes, rng_state_output, storage_of, tensors
from .kernel_workspace import KernelMemo, node_workspace
from .layout import backward_layouts


class PeakPrediction:
    """The predicted peak (bytes above what was resident before the step) and the live
    bytes after each node of the forward, then the backward.

    ``peak_step``: where the peak is, the index of its node in the forward's nodes then the
    backward's (the first such node where several reach it); ``live``: the live bytes after
    every node in that order (placeholders and outputs included, unlike the timeline). The
    timeline is made when first read: the rescheduler predicts hundreds of backwards and
    reads the timeline of the one it keeps."""

    def __init__(
        self,
        peak_bytes: int,
        timeline: list[LivePoint] | Callable[[], list[LivePoint]],
        peak_step: int = 0,
        live: list[int] | None = None,
    ) -> None:
        self.peak_bytes, self.peak_step, self.live = peak_bytes, peak_step, live
        self._timeline = timeline

    @property
    def timeline(self) -> list[LivePoint]:
        if callable(self._timeline):
            self._timeline = self._timeline()
        return self._timeline

    @timeline.setter
    def timeline(self, points: list[LivePoint]) -> None:
        self._timeline = points


@dataclass
class Memo:
    """What the peak model reads off each node, kept between predictions of graphs whose
    nodes keep their values (the rescheduler predicts the same graphs again and again):
    a node's storages and where they are until its value is replaced (the rescheduler
    gives a rewired view a new one), its kernel's workspace."""

    # node -> (its value, (raw storage, bytes) of each tensor, whether any tensor is on an
    # accelerator, the raw storages of those in host memory)
    records: dict[fx.Node, tuple[object, list[tuple[int, int]], bool, list[int]]] = field(
        default_factory=dict
    )
    kernels: KernelMemo = field(default_factory=KernelMemo)
    # the forward's walk and workspace (the rescheduler changes the backward only), while
    # its nodes and their values are the same
    forward: _Walk | None = None


def _record(
    node: fx.Node, memo: Memo | None
) -> tuple[object, list[tuple[int, int]], bool, list[int]]:
    """``node``'s value, the (raw storage, bytes) of each tensor it makes, whether any of
    them is on an accelerator, and the raw storages of those in host memory (kept in
    ``memo`` when given, while the value is the same)."""
    val = node.meta.get("val")
    if memo is not None:
        kept = memo.records.get(node)
        if kept is not None and kept[0] is val:
            return kept
    ts = tensors(val)
    out = [s for t in ts if (s := storage_of(t)) is not None]
    if rng_state_output(node):  # a size of no hint: the generator's state, as it runs
        out = [(raw, generator_state_bytes(val.device.type)) for raw, _ in out]
    on_host = [s[0] for t in ts if t.device.type == "cpu" and (s := storage_of(t))]
    record = (val, out, any(t.device.type not in ("cpu", "meta") for t in ts), on_host)
    if memo is not None:
        memo.records[node] = record
    return record


def node_storages(node: fx.Node, memo: Memo | None = None) -> list[tuple[int, int]]:
    """(raw storage, bytes) of each tensor ``node`` makes (kept in ``memo`` when given)."""
    return _record(node, memo)[1]


Key = tuple[str, int]  # (graph, fake storage): a recomputed value shares its forward twin's
# fake tensor, but is a storage of its own


@dataclass
class _Walk:
    """What the peak model reads off one graph's nodes, in one pass (:func:`_walk`)."""

    nodes: list[fx.Node]
    vals: list[object]  # each node's value as walked
    keys: dict[fx.Node, list[Key]]  # each node's storages as keys
    sizes: dict[int, int]  # bytes of each raw storage
    accelerated: bool  # a tensor on an accelerator
    host: set[int]  # raw storages in host memory (offloaded copies, on an accelerator)
    first: dict[Key, int]  # the step each storage is made at
    last: dict[Key, int]  # the last step that makes or reads it
    ends: list[fx.Node]  # the placeholders and the output node
    # each node's kernel workspace, and what it was read with (the forward's, kept)
    workspace: list[int] | None = None
    workspace_for: tuple = ()

    def same(self, nodes: list[fx.Node]) -> bool:
        """Whether ``nodes`` are the nodes walked, with the same values."""
        return len(nodes) == len(self.nodes) and all(
            a is b and a.meta.get("val") is v
            for a, b, v in zip(nodes, self.nodes, self.vals, strict=True)
        )


def _walk(
    nodes: list[fx.Node], graph: str, given: dict[int, Key], memo: Memo | None, start: int = 0
) -> _Walk:
    """Each node's storages as keys, and the steps each key is made at and last read at
    (the nodes are steps ``start``, ``start + 1``, ...): a value shares a storage with an
    input when the raw storage is the same (a view, a getitem), and takes that input's
    key (the last input's of several); otherwise its storage is new, keyed in ``graph``.
    Placeholders take ``given`` keys (the storages handed over from the forward) or are
    new. With the sizes of the storages and where they are (:func:`_record`)."""
    keys: dict[fx.Node, list[Key]] = {}
    sizes: dict[int, int] = {}
    first: dict[Key, int] = {}
    last: dict[Key, int] = {}
    accelerated, host, ends = False, set(), []
    for i, node in enumerate(nodes, start):
        _, storages, on_accelerator, on_host = _record(node, memo)
        if node.op == "placeholder":
            own = [given.get(raw, (graph, raw)) for raw, _ in storages]
            ends.append(node)
        else:
            read = [k for arg in node.all_input_nodes for k in keys.get(arg, ())]
            for k in read:
                last[k] = i
            own = []
            for raw, _ in storages:
                key = (graph, raw)
                for k in read:
                    if k[1] == raw:
                        key = k
                own.append(key)
            if node.op == "output":
                ends.append(node)
        for raw, nbytes in storages:
            sizes[raw] = nbytes
        for k in own:
            first.setdefault(k, i)
            last[k] = i
        keys[node] = own
        accelerated |= on_accelerator
        host.update(on_host)
    vals = [n.meta.get("val") for n in nodes]
    return _Walk(nodes, vals, keys, sizes, accelerated, host, first, last, ends)


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
    channels-last only where those reach them. ``memo``: what is read off each node, kept
    between calls (the rescheduler predicts the same graphs again and again; a node whose
    value it replaces is read again: :class:`Memo`). ``measure_workspace``, ``inductor``:
    how kernels' workspace is read (:func:`budget.compile.kernel_workspace.node_workspace`).
    """
    fw_nodes = list(fw.graph.nodes)
    bw_nodes = list(bw.graph.nodes) if bw is not None else []
    kernels = memo.kernels if memo is not None else None
    flags = (measure_workspace, inductor)
    forward = memo.forward if memo is not None else None
    if forward is None or not forward.same(fw_nodes):
        forward = _walk(fw_nodes, "fw", {}, memo)
        if memo is not None:
            memo.forward = forward
    if forward.workspace is None or forward.workspace_for != (channels_last, flags):
        layout = channels_last or None
        forward.workspace = [node_workspace(n, layout, kernels, *flags) for n in fw_nodes]
        forward.workspace_for = (channels_last, flags)
    # the backward's inputs are forward storages (saved values, parameters) or tangents
    handed_over = {key[1]: key for keys in forward.keys.values() for key in keys}
    backward = _walk(bw_nodes, "bw", handed_over, memo, len(fw_nodes))
    layouts = (
        None
        if bw is None or handed_channels_last is None
        else backward_layouts(bw, handed_channels_last)
    )
    workspace = forward.workspace + [
        node_workspace(
            n, channels_last or None if layouts is None else layouts.get(n), kernels, *flags
        )
        for n in bw_nodes
    ]
    resident = {
        k
        for n in forward.ends
        if n.op == "placeholder" and n.name not in copied
        for k in forward.keys[n]
    }
    held = _held(forward, num_user_outputs if outputs_held else 0) + _held(backward, None)
    peak, peak_step, live = _simulate(forward, backward, resident, held, workspace)

    def timeline() -> list[LivePoint]:
        points = [
            LivePoint(n.name, "forward", b)
            for n, b in zip(fw_nodes, live, strict=False)
            if n.op not in ("placeholder", "output")
        ]
        for n, b in zip(bw_nodes, live[len(fw_nodes) :], strict=True):
            if n.op != "output":
                kind = "recompute" if n.name in recomputed else "backward"
                points.append(LivePoint(n.name, kind, b))
        return points

    return PeakPrediction(peak, timeline, peak_step, live)


def _simulate(
    forward: _Walk, backward: _Walk, resident: set[Key], held: list[Key], workspace: list[int]
) -> tuple[int, int, list[int]]:
    """The peak, its step and the live bytes after each step of the forward then the
    backward: each storage but the ``resident`` is made at its first step and freed after
    its last (``held`` ones: held to the end), and each step's kernel adds its
    ``workspace`` while it runs."""
    sizes = {**forward.sizes, **backward.sizes}
    if forward.accelerated or backward.accelerated:
        for raw in forward.host | backward.host:
            sizes[raw] = 0  # offloaded copies, in host memory: not the device's
    end = len(workspace)
    last = {**forward.last, **backward.last}
    for k in held:
        last[k] = end
    made, freed = [0] * (end + 1), [0] * (end + 1)
    for k, i in {**backward.first, **forward.first}.items():
        if k not in resident:
            made[i] += sizes[k[1]]
            freed[last[k]] += sizes[k[1]]
    live: list[int] = []
    current = peak = peak_step = 0
    for i in range(end):
        current += made[i]
        live.append(current)
        if current + workspace[i] > peak:
            peak, peak_step = current + workspace[i], i
        current -= freed[i]
    return peak, peak_step, live


def _held(walk: _Walk, outputs: int | None) -> list[Key]:
    """The storages of one graph held to the step's end: the backward's outputs (the
    gradients, ``outputs`` None) and the tangents autograd holds; the forward's first
    ``outputs`` outputs, which the user holds (the loss). The new values of mutated inputs
    (first among the forward's outputs) are copied into their inputs as the forward returns
    and dropped."""
    out: list[Key] = []
    for node in walk.ends:
        if (
            outputs is None
            and node.op == "placeholder"
            and node.name.startswith("tangents")
            and tangent_held(node.meta.get("val"))
        ):
            out += walk.keys[node]
        if node.op == "output":
            args = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
            dropped = input_mutation_outputs(node) if outputs is not None else frozenset()
            for j, arg in enumerate(args):
                if isinstance(arg, fx.Node) and (
                    outputs is None or (j < outputs and j not in dropped)
                ):
                    out += walk.keys[arg]
    return out
