"""The compiled path's offload terms: which values of a joint graph torch's offload pass
can move, and what moving them costs on the planned device (budget.core.offload).

The decisions go back to torch's own pass (:func:`offload`); what it
moves is mirrored here so the solver never plans a value it would refuse: whole
contiguous tensors made by the forward that are not views, getitems, graph inputs or the
user's outputs; nor, as torch's asynchronous pass frees an offloaded storage once its copy
is done, a tensor whose storage a user output shares (a saved view beside it is the
Problem's check: :meth:`budget.core.problem.Problem.kept_beside`).
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from unittest import mock

import numpy as np
import torch
import torch.fx as fx

from ..core.offload import OffloadTerms
from ..core.problem import Problem
from ..errors import OffloadError, PlanMismatchError
from ..estimators.base import Estimator
from ..planning.offload import host_link, price_offload
from ..runtime import _torch_private as T
from ..runtime.values import storage_of

SIDE_STREAM = True
"""Whether torch's offload pass runs a CUDA graph's copies on a side stream (its
``activation_offload_separate_stream``, with the forward's waits sunk and the backward's
reloads prefetched), where compute hides them. :func:`offload` drives
the pass with it and :func:`terms_for` prices the copies by it: with it off, every copy is
priced in full, as it then runs on the compute stream."""


@dataclass
class Timing:
    """What torch's offload pass is told of the step instead of measuring it: each node's
    run time where its prefetch places the backward's reloads (it would run each node on
    the GPU, ``benchmark_node``: a GPU's time and memory at every partition, and a failure
    where there is none), from the planning estimator (0 for a node it cannot price, or
    where it does not price in seconds; ``profile`` measures a node it has not measured
    before, once); and the host link (bytes/s; None: torch's default) it sizes each copy
    by."""

    estimator: Estimator | None = None
    link: float | None = None
    _ms: dict[str, float] = field(default_factory=dict, repr=False)  # by node name

    def ms(self, node: fx.Node) -> float:
        est = self.estimator
        if est is None or getattr(est, "unit", None) != "s":
            return 0.0
        if node.name not in self._ms:
            try:
                cost = float(est.estimate(node).cost)
            except Exception:  # noqa: BLE001 - an op the estimator cannot price: no time
                cost = 0.0
            self._ms[node.name] = 1e3 * cost
        return self._ms[node.name]


def timing(estimator: Estimator, nodes: Sequence[fx.Node], spec: str) -> Timing:
    """The :class:`Timing` of a graph of ``nodes`` planned with ``estimator`` (named
    ``spec``): the link where the estimator's device has one."""
    try:
        link = graph_link(spec, nodes)
    except OffloadError:
        link = None
    return Timing(estimator, link)


def graph_link(estimator: str, nodes: Sequence[fx.Node]) -> float:
    """The host link of the device ``estimator`` prices the graph of ``nodes`` for, as
    the terms price copies and torch's pass is told; :class:`OffloadError` where there is
    none. The device's is read off a tensor on it: a CPU scalar of a CUDA graph would
    give the host's (none)."""
    tensors = [n for n in nodes if isinstance(n.meta.get("val"), torch.Tensor)]
    tensor = next((n for n in tensors if n.meta["val"].device.type != "cpu"), None)
    tensor = tensor if tensor is not None else next(iter(tensors), None)
    if tensor is None:
        raise OffloadError("offload asked for, but this graph has no tensor to offload")
    return host_link(estimator, tensor)


def side_stream() -> bool:
    """:data:`SIDE_STREAM`, read when asked (so a patch of it counts everywhere)."""
    return SIDE_STREAM


def terms_for(
    problem: Problem,
    nodes: Sequence[fx.Node],
    num_fwd_outputs: int,
    estimator: str,
    forward: Collection[fx.Node] = (),
) -> OffloadTerms:
    """The offload terms of ``problem`` (built from ``nodes`` of a joint graph whose
    forward returns ``num_fwd_outputs`` user outputs first), priced for the estimator's
    device (its copies overlapping compute as :data:`SIDE_STREAM` says), each copy from
    its value's last use among ``forward`` (the nodes the forward runs whatever the plan:
    torch's pass copies a value after its last use there);
    :class:`OffloadError` where offload cannot be planned (module docstring)."""
    movable = _movable(nodes, num_fwd_outputs)
    if not any(movable):
        raise OffloadError("offload asked for, but no value of this graph can be offloaded")
    ran = set(forward)
    runs = {i for i, n in enumerate(nodes) if n in ran}
    last = np.arange(problem.n)
    for u, v in problem.edges.tolist():
        if v in runs:
            last[u] = max(last[u], v)
    link = graph_link(estimator, nodes)
    return price_offload(problem, movable, link, overlap=side_stream(), issued=last)


def _movable(nodes: Sequence[fx.Node], num_fwd_outputs: int) -> list[bool]:
    """What torch's offload pass accepts among the forward's values (its ``can_offload``),
    less the values whose storage a user output shares (module docstring)."""
    op_types = T.get_default_op_list()
    graph = nodes[0].graph if nodes else None
    outputs: set[fx.Node] = set()
    if graph is not None:
        out = next(n for n in reversed(graph.nodes) if n.op == "output")
        outputs = {a for a in out.args[0][:num_fwd_outputs] if isinstance(a, fx.Node)}
    # a user output's storage stays with the user: an offload would free it under them
    theirs = {storage_of(a.meta.get("val")) for a in outputs}
    ok = []
    for n in nodes:
        val = n.meta.get("val")
        ok.append(
            n.op == "call_function"
            and isinstance(val, torch.Tensor)
            and val.is_contiguous()
            and not op_types.is_view(n)
            and n.target is not operator.getitem
            and n not in outputs
            and storage_of(val) is not None
            and storage_of(val) not in theirs
        )
    return ok


def offload(
    fw: fx.GraphModule,
    bw: fx.GraphModule,
    offloaded: frozenset[str],
    node_info: T.NodeInfo,
    num_fwd_outputs: int,
    timing: Timing,
) -> None:
    """Offload ``offloaded`` with torch's own pass (in place): the forward copies each to
    host memory after its last use there, the backward copies it back before its first
    use. On CUDA the copies run on a side stream, the forward's waits sunk and the
    backward's reloads prefetched (torch's options for it; off with
    ``budget.compile.offload.SIDE_STREAM``); elsewhere they are plain copies. A value
    torch's pass will not move (a view, a model output, an input, a non-contiguous tensor)
    is refused by name, never left on the device in silence. The prefetch places reloads
    by ``timing`` (the planning estimator's node times, the device's host link), not by
    torch running every node on the GPU at each partition; the forward's waits go where ``timing`` says each copy is
    done (:func:`place_waits`), not all at the forward's end."""
    devices = {
        n.meta["val"].device.type
        for n in fw.graph.nodes
        if n.name in offloaded and isinstance(n.meta.get("val"), torch.Tensor)
    }
    for n in fw.graph.nodes:
        if n.name in offloaded:
            n.meta["should_offload"] = True
    cuda = devices == {"cuda"} and side_stream()
    # torch 2.13's option (older torch has none: its default stands there)
    told = timing.link is not None and hasattr(T.functorch_config, "activation_offload_cpu_gpu_bw")
    link = {"activation_offload_cpu_gpu_bw": timing.link / 2**30} if told else {}
    with (
        T.functorch_config.patch(
            activation_offload_separate_stream=cuda,
            activation_offload_sink_wait=cuda,
            activation_reload_prefetch=cuda,
            **link,
        ),
        mock.patch.object(T.activation_offloading, "benchmark_node", timing.ms, create=True),
    ):
        T.enable_activation_offloading(
            fw, bw, num_fwd_outputs, node_info.static_lifetime_input_nodes
        )
    if cuda:
        place_waits(fw, timing)
    moved = {n.name for n in fw.graph.nodes if n.meta.get("saved_for_offloading")}
    refused = sorted(offloaded - moved)
    if refused:
        raise PlanMismatchError(
            f"torch's offload pass does not move {', '.join(refused[:5])}: it offloads "
            "whole contiguous tensors that are not views, model outputs or graph inputs"
        )


def place_waits(fw: fx.GraphModule, timing: Timing) -> None:
    """Move each offload's wait from the forward's end (where torch sinks it: every
    offloaded value held on the device to the end of the forward) to the first node by
    which ``timing`` says its copy is done, and after every read of its storage (a view
    torch does not follow, ``unbind``'s, may be read after the offload): the copies run one
    after another on the transfer stream, each from its offload on, for its bytes over the
    host link, while the compute stream runs the nodes between. A wait frees its value's
    device memory, so the forward's own peak falls too; one placed early where the copy is
    slower than told only holds the compute stream until it is done. Left at the end where
    the link is unknown. Inductor keeps each wait after the reads of its storage
    (:func:`budget.compile.offload_safety.pin_waits`) and may run it later: the compiled
    peak reads where it runs."""
    if timing.link is None:
        return
    nodes = list(fw.graph.nodes)
    waits = {
        n.args[0]: n
        for n in nodes
        if n.target is torch.ops.ao.wait_tensor.default
        and isinstance(n.args[0], fx.Node)
        and n.args[0].target is torch.ops.ao.offload.default
    }
    moved = set(waits.values())
    last_read: dict[int, int] = {}  # storage key -> the last node reading it
    for i, n in enumerate(nodes):
        if n.op == "call_function" and n not in moved and n not in waits:
            for a in n.all_input_nodes:
                key = storage_of(a.meta.get("val"))
                if key is not None:
                    last_read[key[0]] = i
    elapsed, done = 0.0, 0.0  # ms of compute so far; when the stream's copies are done
    pending: list[tuple[float, int, fx.Node]] = []  # (done, the last read before it, wait)
    for i, n in enumerate(nodes):
        if n in waits:  # its copy is queued behind the ones before it
            value = n.args[0]
            done = max(done, elapsed) + _nbytes(value) / timing.link * 1e3
            key = storage_of(value.meta.get("val")) if isinstance(value, fx.Node) else None
            pending.append((done, last_read.get(key[0], i) if key else i, waits[n]))
            continue
        if n.op != "call_function" or n in moved:
            continue
        elapsed += timing.ms(n)
        ready = [p for p in pending if p[0] <= elapsed and p[1] <= i]
        for p in reversed(ready):  # after n, in the order queued: copy done, storage read
            n.append(p[2])
            pending.remove(p)


def _nbytes(node: fx.Node) -> int:
    val = node.meta.get("val")
    return storage_of(val)[1] if storage_of(val) is not None else 0
