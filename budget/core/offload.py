"""What offloading a saved value to host memory costs: the third decision beside save and
recompute (DESIGN.md, "Offload").

A value the backward needs may be kept on the device (saved), recomputed, or *offloaded*:
copied to host memory once the forward is done with it and copied back before the
backward reads it. Device memory then holds it only around those copies, which the
budget's saved-bytes figures leave out; the price is the time of the copies that compute
does not hide. :class:`OffloadTerms` prices a set ``O`` of offloaded values, in the
Problem's cost unit (seconds: offload needs a time estimator)::

    price(O) = sum(tail[v] for v in O)
             + max(0, sum(transfer[v] for v in O) - forward_window)
             + max(0, sum(transfer[v] for v in O) - backward_window)

``transfer[v]``: one copy of v's storage over the host link (bytes / link bandwidth).
The copies of one pass share the link: what they take beyond the pass's compute
(``forward_window``, ``backward_window``) is exposed. ``tail[v]``: what of v's own two
copies no compute can hide whatever else is copied: the forward's compute after its copy
starts (after v is made, or after its last forward use where the front end copies then)
is all its offload can overlap, and (the backward reading values in about the
reverse order) the reload is hidden by about as much backward compute. The model is
linear in the decisions, so the exact solvers optimise it, proving a plan's cost to within
:data:`PROOF_GAP` of the step's compute; it is a model, and the GPU check measures the
step times it stands for.

Which values can be offloaded is the front end's call (``transfer`` is NaN elsewhere):
torch's offload pass moves only whole, contiguous tensors that are not views, model
outputs or inputs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

PROOF_GAP = 1e-3
"""With offload the exact solvers prove a plan's cost within this share of the step's
compute (the two windows) of the optimum, rather than to its last unit. Where copies
fill the compute that hides them, which values fill it best is a subset sum over their
sizes, which the LP bound cannot see: branch and bound over many equal-sized values
then proves the last fraction of a microsecond slowly, for prices that model overlap
rather than measure it. 0.1% of the step is below what those prices tell apart."""


@dataclass(frozen=True)
class OffloadTerms:
    """The price of offloading, per value of a Problem (arrays of its length)."""

    transfer: np.ndarray
    """float[n]: one host-link copy of the value's storage, in the Problem's cost unit;
    NaN where the value cannot be offloaded."""
    tail: np.ndarray
    """float[n]: of the value's offload and reload, what no compute can hide."""
    forward_window: float
    """The forward's compute that offloads overlap, in the cost unit."""
    backward_window: float
    """The backward's compute that reloads overlap, in the cost unit."""

    def __post_init__(self) -> None:
        transfer = np.asarray(self.transfer, dtype=np.float64)
        tail = np.asarray(self.tail, dtype=np.float64)
        if transfer.shape != tail.shape or transfer.ndim != 1:
            raise ValueError("OffloadTerms.transfer and .tail need one entry per node")
        ok = ~np.isnan(transfer)
        if np.any(transfer[ok] < 0) or np.any(tail[ok] < 0) or np.any(np.isnan(tail[ok])):
            raise ValueError("OffloadTerms: transfer and tail must be >= 0 where offloadable")
        if self.forward_window < 0 or self.backward_window < 0:
            raise ValueError("OffloadTerms: the windows must be >= 0")
        object.__setattr__(self, "transfer", transfer)
        object.__setattr__(self, "tail", np.where(ok, tail, np.nan))

    @property
    def offloadable(self) -> np.ndarray:
        """bool[n]: the values that may be offloaded."""
        return ~np.isnan(self.transfer)

    @property
    def gap(self) -> float:
        """How far above the optimum an offload plan may cost and be called optimal, in
        the cost unit: :data:`PROOF_GAP` of the step's compute (0 where no compute hides
        the copies: those prices are linear, and proven exactly)."""
        return PROOF_GAP * (self.forward_window + self.backward_window)

    def kept(self, nodes: np.ndarray) -> OffloadTerms:
        """The terms of a problem of ``nodes`` only (a reduced problem's): the windows are
        the step's, whatever the nodes."""
        return OffloadTerms(
            self.transfer[nodes], self.tail[nodes], self.forward_window, self.backward_window
        )

    def price(self, offloaded: Iterable[int]) -> float:
        """The exposed time of offloading exactly ``offloaded`` (module docstring)."""
        chosen = sorted(set(offloaded))
        if not chosen:
            return 0.0
        link = float(self.transfer[chosen].sum())
        return (
            float(self.tail[chosen].sum())
            + max(0.0, link - self.forward_window)
            + max(0.0, link - self.backward_window)
        )


def offload_terms(
    cost: np.ndarray,
    storage_bytes_of: np.ndarray,
    offloadable: np.ndarray,
    *,
    bandwidth: float,
    backward_factor: float = 2.0,
    overlap: bool = True,
    issued: np.ndarray | None = None,
) -> OffloadTerms:
    """Offload terms of a Problem whose nodes are in forward order with ``cost`` in seconds.

    ``storage_bytes_of``: the bytes of each node's storage (0 where none);
    ``offloadable``: what the front end allows; ``bandwidth``: host link bytes/s (one
    direction); ``backward_factor``: the backward's compute as a multiple of the forward's
    (about 2 for matmul-dominated steps). A value's offload can hide behind the forward
    compute made after it, its reload behind about ``backward_factor`` times as much of the
    backward's. ``overlap=False``: the copies run on the compute stream, so no compute
    hides them and each offloaded value costs its two copies in full (windows and tails 0).
    ``issued``: the node after which each value's copy starts (the compiled path copies
    after a value's last forward use; default: the value itself): what hides its copies is
    the compute after that node.
    """
    if bandwidth <= 0:
        raise ValueError(f"offload needs a host link bandwidth > 0 bytes/s, got {bandwidth}")
    cost = np.asarray(cost, dtype=np.float64)
    transfer = np.asarray(storage_bytes_of, dtype=np.float64) / bandwidth
    after = np.concatenate([np.cumsum(cost[::-1])[::-1][1:], [0.0]])  # compute after v
    if issued is not None:
        after = after[np.asarray(issued, dtype=np.int64)]
    tail = np.maximum(0.0, transfer - after) + np.maximum(0.0, transfer - backward_factor * after)
    ok = np.asarray(offloadable, dtype=bool) & (transfer > 0)
    total = float(cost.sum())
    if not overlap:
        tail, total = np.zeros_like(transfer), 0.0
    return OffloadTerms(
        transfer=np.where(ok, transfer, np.nan),
        tail=np.where(ok, tail, np.nan),
        forward_window=total,
        backward_window=backward_factor * total,
    )
