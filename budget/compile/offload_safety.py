"""What keeps torch's side-stream offload from reading freed memory where torch leaves it
to its caller: each forward wait, which frees its value's device storage
(``ao::wait_tensor``: ``resize_(0)``), ordered after every read of that storage in the
code Inductor generates (:func:`pin_waits`, run as Inductor's post-grad pass:
:mod:`budget.compile.pins`), and a second backward through a step whose backward frees the
host copies it reloads refused (:func:`backward_once`)."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx as fx

from ..core.plan import Plan
from ..errors import OffloadError
from ..runtime import _torch_private as T
from ..runtime.values import storage_of
from .offload import side_stream


def pin_waits(graph: fx.Graph) -> int:
    """Keep each offload's wait after every read of the storage it frees, under Inductor;
    returns how many waits it pinned.

    Inductor orders a graph by its data dependencies. A wait only reads its ``keepalive``,
    as the value's other readers do, so nothing orders the wait after them, and Inductor
    moved one before the matmul reading the value it frees (Inductor's CPU code of an
    offloaded MLP: ``ao.wait_tensor(buf3, buf1)`` then ``mm(buf1, ...)``, a read of a
    storage ``resize_(0)`` emptied). Each wait is made to wait, with Inductor's
    ``control_deps`` (as :mod:`budget.compile.pins` pins recomputations),
    for every op that reads its storage, through a view too. Run on the graph Inductor
    lowers, after its own rewrites, so that every read is seen: a clone Inductor drops
    makes its readers, placed after the wait, read the value itself, and the wait moves
    after them. A freed storage the forward also returns is an :class:`OffloadError`."""
    wait, offload_op = torch.ops.ao.wait_tensor.default, torch.ops.ao.offload.default
    op_types = T.get_default_op_list()
    waits: dict[int, fx.Node] = {}  # storage key -> the wait that frees it
    readers: dict[int, list[fx.Node]] = {}  # storage key -> the ops that read it
    for n in graph.nodes:
        if n.op != "call_function":
            continue
        if n.target is wait and isinstance(n.args[0], fx.Node) and n.args[0].target is offload_op:
            keepalive = n.args[1] if len(n.args) > 1 else n.kwargs.get("keepalive")
            key = storage_of(keepalive.meta.get("val")) if isinstance(keepalive, fx.Node) else None
            if key is not None:
                waits[key[0]] = n
            continue
        if n.target is offload_op or n.target is operator.getitem or op_types.is_view(n):
            continue  # the copy itself; a view reads nothing (its readers do)
        for a in n.all_input_nodes:
            key = storage_of(a.meta.get("val"))
            if key is not None and n not in readers.setdefault(key[0], []):
                readers[key[0]].append(n)
    order = {n: i for i, n in enumerate(graph.nodes)}
    deps: dict[fx.Node, list[fx.Node]] = {}
    for key, w in waits.items():
        if not readers.get(key):
            continue
        last = max(readers[key], key=order.__getitem__)
        if order[last] > order[w]:  # a read a rewrite moved past it (nothing reads the wait
            last.append(w)  # but the output: it may follow)
        deps[w] = readers[key]
    _refuse_returned(next(n for n in graph.nodes if n.op == "output"), waits)
    if deps:
        T.preserve_node_ordering(graph, deps)
    return len(deps)


def _refuse_returned(output: fx.Node, freed: dict[int, fx.Node]) -> None:
    """An output (not a wait's: the host copy) in a storage a wait frees: the forward would
    hand out a storage emptied under it."""
    for a in output.all_input_nodes:
        key = storage_of(a.meta.get("val"))
        if key is not None and key[0] in freed and a is not freed[key[0]]:
            raise OffloadError(
                f"the compiled forward returns {a.name}, in the storage that offloading "
                f"{freed[key[0]].args[1]} frees once its copy is done (Inductor made them "
                "one storage): plan without offloading it"
            )


def waits_to_pin(graph: fx.Graph) -> bool:
    """Whether ``graph`` has an offload's wait (the forward's: a reload's keepalive is the
    host copy), which frees a storage Inductor does not know it frees. By name: the ao ops
    exist once torch's offload pass is imported."""
    return any(
        str(n.target) == "ao.wait_tensor.default"
        and isinstance(n.args[0], fx.Node)
        and str(n.args[0].target) == "ao.offload.default"
        for n in graph.nodes
    )


def frees_host_copies(plans: Sequence[Plan], example_inputs: Sequence[Any]) -> bool:
    """Whether the backward of a graph with these plans frees the host copies it reloads:
    torch's side-stream pass (a CUDA graph's, with ``offload.SIDE_STREAM``) hands each
    host copy back once its reload is done, so a second backward through the step would
    read freed memory (:func:`backward_once`)."""
    cuda = any(isinstance(t, torch.Tensor) and t.device.type == "cuda" for t in example_inputs)
    return cuda and side_stream() and any(p.offloaded for p in plans)


def backward_once(compiled: Callable[..., Any]) -> Callable[..., Any]:
    """``compiled`` (a forward dynamo runs), whose outputs' backward refuses to run a
    second time in a step (``retain_graph=True``, or another output's backward after the
    first) with an :class:`OffloadError` that says why, instead of reloading host copies
    torch's pass has freed (a crash, or another value's bytes from a pooled buffer)."""

    def run(*args: Any) -> Any:
        outputs = compiled(*args)
        node = _function_node(outputs)
        if node is not None:
            ran: list[bool] = []

            def first_only(grad_outputs: Any) -> None:
                if ran:
                    raise OffloadError(
                        "a second backward through a compiled step whose plan offloads "
                        "(retain_graph=True, or a backward from another of its outputs): "
                        "torch's offload frees each host copy once it is reloaded. "
                        "Backpropagate once per step, or plan without offload "
                        "(offload=False)"
                    )
                ran.append(True)

            node.register_prehook(first_only)
        return outputs

    run._boxed_call = getattr(compiled, "_boxed_call", False)  # type: ignore[attr-defined]
    return run


def _function_node(outputs: Any) -> Any:
    """The autograd node of the compiled function behind ``outputs`` (AOTAutograd's
    ``CompiledFunctionBackward``): an output's own, or, for a view AOTAutograd makes of
    one outside its function, the node under it; None where no output needs a gradient.
    Nothing further back: that would be another graph's."""
    nodes = [t.grad_fn for t in T.tree_leaves(outputs) if isinstance(t, torch.Tensor)]
    nodes = [n for n in nodes if n is not None]
    for node in [*nodes, *(f for n in nodes for f, _ in n.next_functions if f is not None)]:
        if type(node).__name__ == "CompiledFunctionBackward":
            return node
    return None
