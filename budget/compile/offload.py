"""The compiled path's offload terms: which values of a joint graph torch's offload pass
can move, and what moving them costs on the planned device (budget.core.offload).

The decisions go back to torch's own pass (:func:`budget.compile.split.offload`); what it
moves is mirrored here so the solver never plans a value it would refuse: whole
contiguous tensors made by the forward that are not views, getitems, graph inputs or the
user's outputs; nor, as torch's asynchronous pass frees an offloaded storage once its copy
is done, a tensor whose storage a user output shares (a saved view beside it is the
Problem's check: :meth:`budget.core.problem.Problem.kept_beside`).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch
import torch.fx as fx

from ..core.offload import OffloadTerms
from ..core.problem import Problem
from ..errors import OffloadError
from ..planning.offload import host_link, price_offload
from ..runtime import _torch_private as T
from ..runtime.values import storage_of

SIDE_STREAM = True
"""Whether torch's offload pass runs a CUDA graph's copies on a side stream (its
``activation_offload_separate_stream``, with the forward's waits sunk and the backward's
reloads prefetched), where compute hides them. :func:`budget.compile.split.offload` drives
the pass with it and :func:`terms_for` prices the copies by it: with it off, every copy is
priced in full, as it then runs on the compute stream."""


def side_stream() -> bool:
    """:data:`SIDE_STREAM`, read when asked (so a patch of it counts everywhere)."""
    return SIDE_STREAM


def terms_for(
    problem: Problem,
    nodes: Sequence[fx.Node],
    num_fwd_outputs: int,
    estimator: str,
) -> OffloadTerms:
    """The offload terms of ``problem`` (built from ``nodes`` of a joint graph whose
    forward returns ``num_fwd_outputs`` user outputs first), priced for the estimator's
    device (its copies overlapping compute as :data:`SIDE_STREAM` says);
    :class:`OffloadError` where offload cannot be planned (module docstring)."""
    movable = _movable(nodes, num_fwd_outputs)
    tensor = next((n for n, ok in zip(nodes, movable, strict=True) if ok), None)
    if tensor is None:
        raise OffloadError("offload asked for, but no value of this graph can be offloaded")
    return price_offload(problem, movable, host_link(estimator, tensor), overlap=side_stream())


def _movable(nodes: Sequence[fx.Node], num_fwd_outputs: int) -> list[bool]:
    """What torch's offload pass accepts among the forward's values (its ``can_offload``)."""
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
