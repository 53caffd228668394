"""What dynamo's graph of a frame says about the step around it: where the graph ended
(a graph break, and why), and which of its inputs the user holds anyway, so that its
backward keeping them costs nothing (``Plan.kept_input_bytes`` counts the others); and how
to trace it again with sizes that hold (:func:`fake_cache_off`)."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from ..runtime import _torch_private as T
from ..runtime.values import storage_of


def held_inputs(gm: torch.fx.GraphModule, later: bool) -> frozenset[int]:
    """The inputs of dynamo's graph ``gm`` (by index) that the user holds through the step
    anyway, which its backward does not keep alive: in the compiled call's own frame,
    all but what dynamo makes per call; in a frame user code calls between graphs (a
    module whose forward breaks the graph), the tensors given to the call. Where the call
    is not found: every input of the step's first frame, none of a ``later`` one. Never
    an activation (a tensor autograd made, with a ``grad_fn``): given to a module
    compiled on its own (a block of a model compiled block by block), it is the output of
    the code before, which this graph's backward keeps. Always a leaf that requires grad
    (a weight read from a global or an attribute, not a parameter of a module dynamo
    sees): autograd accumulates its gradient into it, so the user holds it (one the step
    makes anew between graphs, ``h.detach().requires_grad_()``, is taken for held too)."""
    args = T.graph_args(gm)
    call = T.compiled_call()
    if call is None:
        own, given = not later, set()
    else:
        own = call[1]
        given = {st[0] for t in T.tree_leaves(call[0]) if (st := storage_of(t)) is not None}

    def held(value: Any, per_call: bool) -> bool:
        if per_call or getattr(value, "grad_fn", None) is not None:
            return False
        if isinstance(value, torch.Tensor) and value.is_leaf and value.requires_grad:
            return True  # a weight the graph reads (a global, an attribute): the user's
        st = storage_of(value)
        return own or (st is not None and st[0] in given)

    return frozenset(i for i, (v, per_call) in enumerate(args) if held(v, per_call))


def tokens_ahead(joint: torch.fx.Graph) -> int:
    """How many effect tokens AOTAutograd put in front of the joint graph's inputs (torch's
    Note [Side-Effectful Tokens in AOTAutograd]: an op registered as effectful, threaded
    through ``with_effects``): the indices of dynamo's inputs, and of torch's static
    inputs, count from after them."""
    count = 0
    for node in joint.find_nodes(op="placeholder"):
        if not node.users or any(
            u.target is not torch.ops.higher_order.with_effects or u.args[0] is not node
            for u in node.users
        ):
            break
        count += 1
    return count


def graph_break(gm: torch.fx.GraphModule) -> str:
    """Why dynamo ended this graph before the end of the step ("" if it did not): its
    reason and the user's line, as ``torch._dynamo.explain`` reports them."""
    reason = getattr(gm, "compile_subgraph_reason", None)
    if reason is None or not getattr(reason, "graph_break", False):
        return ""
    stack = getattr(reason, "user_stack", None) or []
    where = ""
    if stack:
        frame = stack[-1]
        path = frame.filename.rsplit("site-packages/", 1)[-1]  # the package's own path
        where = f" at {path}:{frame.lineno} in {frame.name}"
    first = str(reason.reason).strip().splitlines()[0] if str(reason.reason).strip() else "?"
    return f"{first}{where}"


def fake_cache_off(example_inputs: Any) -> contextlib.AbstractContextManager[None]:
    """torch's fake-tensor dispatch cache off for the graph's fake mode while budget traces
    it: a cache hit rebuilds an output's storage at its strides' least extent, not the size
    the kernel makes (a functional copy into a slice), so a graph traced again in one
    process (training after a preview) would count a smaller storage than it allocates."""
    mode = T.detect_fake_mode(example_inputs)
    return contextlib.nullcontext() if mode is None else T.disable_fake_tensor_cache(mode)
