"""Reading an fx node's fake values (``meta["val"]``): sizes, storages, tensors, device.

The estimators, the op classification (:mod:`.ops`) and the graph builder see a node only
through these. Symbolic sizes (dynamic shapes) are read through their hints; what a value
*occupies* is its storage (``storage_of``): a view costs its base once, so the graph counts
memory per storage, exactly as it is measured.

A size that depends on tensor values (an unbacked symbol: ``nonzero``'s rows, a size read
with ``.item()``) has no hint. Where torch's value ranges bound it (``nonzero``: at most its
input's elements; a ``torch._check(n <= K)`` in the step), it is read at its upper bound,
so that what is priced is never under what the step makes; where they do not, at the guess
``FALLBACK_SIZE`` (:func:`data_dependent`).
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Iterator
from typing import Any

import sympy
import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols, optimization_hint

from ._torch_private import _has_storage, tree_leaves

FALLBACK_SIZE = 4096  # hint for a data-dependent size torch's value ranges do not bound
# a bound at or past this (a TiB, or as many elements) bounds nothing a device holds: the
# size is guessed instead (torch gives nonzero of a symbolic number of elements
# sys.maxsize - 1, an unconstrained .item() infinity)
BOUND_CAP = 1 << 40


def hint(x: Any) -> int:
    """An int, or a symbolic int through its hint; a data-dependent one at its upper bound
    where torch has one (:func:`upper_bound`), else at ``FALLBACK_SIZE``."""
    if isinstance(x, int):
        return x
    if isinstance(x, torch.SymBool):
        return int(bool(optimization_hint(torch.sym_ite(x, 1, 0), fallback=0)))
    if isinstance(x, torch.SymInt) and x.node.hint is None and free_unbacked_symbols(x):
        bound = upper_bound(x)
        if bound is not None:
            return bound
    return int(optimization_hint(x, fallback=FALLBACK_SIZE))


def upper_bound(x: torch.SymInt) -> int | None:
    """The most ``x`` can be: its backed symbols at their hints, its unbacked ones over
    torch's value ranges, bounded as one expression (so that a size that falls as a symbol
    grows, such as ``s0 - u0``, is bounded at its most too); None where torch bounds it
    nowhere under ``BOUND_CAP``."""
    env = x.node.shape_env
    expr = env.replace(x.node.expr)
    backed = {
        s: sympy.Integer(v) for s, v in env.backed_var_to_val.items() if s in expr.free_symbols
    }
    try:
        upper = env.bound_sympy(expr.xreplace(backed)).upper
    except Exception:  # noqa: BLE001 - an expression torch's bounds cannot take: no bound
        return None
    # torch's own test for a bound (int_oo passes is_integer and is_finite)
    bounded = isinstance(upper, (int, sympy.Integer)) and 0 <= int(upper) < BOUND_CAP
    return int(upper) if bounded else None


def data_dependent(val: object) -> str | None:
    """How a tensor value's storage size is priced where it depends on tensor values:
    ``"bounded"`` (at its upper bound: never under the step's), ``"guessed"`` (some unknown
    dimension at ``FALLBACK_SIZE``); None where the size is known."""
    if not isinstance(val, torch.Tensor) or not _has_storage(val):
        return None
    nbytes = val.untyped_storage().nbytes()
    if not isinstance(nbytes, torch.SymInt) or not free_unbacked_symbols(nbytes):
        return None
    return "bounded" if upper_bound(nbytes) is not None else "guessed"


def hint_float(x: Any) -> float:
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, (torch.SymInt, torch.SymBool)):
        return float(hint(x))
    if isinstance(x, torch.SymFloat):
        return float(x.node.hint) if x.node.hint is not None else 0.0
    return float(x)


def shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(hint(s) for s in t.shape)


def numel(t: torch.Tensor) -> int:
    return math.prod(shape(t))


def storage_of(val: object) -> tuple[int, int] | None:
    """(storage key, storage bytes) of a tensor value, None for non-tensors."""
    if not isinstance(val, torch.Tensor) or not _has_storage(val):
        return None
    storage = val.untyped_storage()
    return storage._cdata, hint(storage.nbytes())


def tensors(val: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(val) if isinstance(t, torch.Tensor)]


def op_tensors(*vals: Any) -> list[torch.Tensor]:
    """The tensors in an op call's arguments or results (tensors, scalars, and lists,
    tuples and dicts of them), in order: :func:`tensors` without pytree's generality, for
    the dispatch modes that ask at every op call."""
    out: list[torch.Tensor] = []
    stack = list(reversed(vals))
    while stack:
        v = stack.pop()
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            stack.extend(reversed(v))
        elif isinstance(v, dict):
            stack.extend(reversed(list(v.values())))
    return out


def value_of(x: Any) -> Any:
    """An fx node's ``meta["val"]``; anything else as it is."""
    return x.meta.get("val") if isinstance(x, torch.fx.Node) else x


def input_tensors(node: torch.fx.Node) -> list[torch.Tensor]:
    """The tensor values ``node`` reads, one per distinct input node, in argument order."""
    out = []
    for a in node.all_input_nodes:
        out.extend(tensors(a.meta.get("val")))
    return out


def node_tensors(node: torch.fx.Node) -> Iterator[torch.Tensor]:
    """Output tensors of ``node``, then its input tensors."""
    yield from tensors(node.meta.get("val"))
    yield from input_tensors(node)


# Outputs a CUDA kernel returns in host memory although its fake kernel says the device:
# memory-efficient attention's RNG seed and offset (CPU scalars outside CUDA graph
# capture). Flash attention's rng_state is left counted: not measured on a GPU yet.
_HOST_OUTPUTS = {
    "aten._scaled_dot_product_efficient_attention.default": (2, 3),
    "aten._efficient_attention_forward.default": (2, 3),
}


def on_host(node: torch.fx.Node) -> bool:
    """Whether ``node`` (an ``operator.getitem`` of a multi-output op) is an output its
    CUDA kernel leaves in host memory: it takes none of the device's."""
    if node.target is not operator.getitem or not isinstance(node.args[0], torch.fx.Node):
        return False
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.device.type != "cuda":
        return False
    return node.args[1] in _HOST_OUTPUTS.get(str(node.args[0].target), ())


def rng_state_output(node: torch.fx.Node) -> bool:
    """Whether ``node`` is the generator state torch's partitioner saves, in the forward,
    for a random op a user's checkpoint makes the backward recompute (the first output of
    ``run_and_save_rng_state``). Its fake value has a size of no hint: its bytes are
    :func:`generator_state_bytes`."""
    source = node.args[0] if node.target is operator.getitem and node.args else None
    return (
        isinstance(source, torch.fx.Node)
        and source.target is torch.ops.higher_order.run_and_save_rng_state
        and node.args[1] == 0
    )


@functools.cache
def generator_state_bytes(device: str) -> int:
    """Bytes of the random generator state of ``device`` (a device type): the CPU's is its
    Mersenne Twister's; an accelerator's, its module's ``get_rng_state()`` (a seed and an
    offset on CUDA)."""
    if device == "cpu":
        return torch.get_rng_state().numel()
    return int(getattr(torch, device).get_rng_state().numel())


def node_device(node: torch.fx.Node) -> torch.device:
    """The device ``node`` runs on: that of its first tensor; CPU when it has none, or when
    its tensors are on ``meta``."""
    where = next((t.device for t in node_tensors(node)), torch.device("cpu"))
    return torch.device("cpu") if where.type == "meta" else where


def compute_dtype(node: torch.fx.Node) -> torch.dtype | None:
    """The dtype ``node`` computes in: its first floating input, else its first output."""
    for t in input_tensors(node):
        if t.dtype.is_floating_point or t.dtype.is_complex:
            return t.dtype
    out = tensors(node.meta.get("val"))
    return out[0].dtype if out else None


def written_args(func: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors an op call writes in place, by its schema (``Tensor(a!)``)."""
    schema = getattr(func, "_schema", None)
    if schema is None or not schema.is_mutable:
        return []
    out = []
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        out.extend(t for t in tree_leaves(value) if isinstance(t, torch.Tensor))
    return out
