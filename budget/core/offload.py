"""What offloading a saved value to host memory costs: the third decision beside save and
recompute (DESIGN.md, "Offload").

A value the backward needs may be kept on the device (saved), recomputed, or *offloaded*:
copied to host memory once the forward is done with it and copied back before the
backward reads it. Device memory then holds it only around those copies, which the
budget's saved-bytes figures leave out; the price is the time of the copies that compute
does not hide. :class:`OffloadTerms` prices a set ``O`` of offloaded values, in the
Problem's cost unit (seconds: offload needs a time estimator), per pass::

    exposed(O, f) = max(0, max over k in O of
                           sum(transfer[j] for j in O if after[j] <= after[k]) - f * after[k])
    price(O) = exposed(O, 1) + exposed(O, backward_factor)

``transfer[v]``: one copy of v's storage over the host link (bytes / link bandwidth).
``after[v]``: the forward's compute after v's copy is issued (after v is made, or after its
last forward use where the front end copies then). The copies run one after another on one
transfer stream, in the order they are issued, as torch's side stream runs them
(``budget.apply``'s hooks wait for each at the next offloaded save instead): the forward's
last copy is done once, for some copy ``k``, every copy issued with it or after it has run
from ``k``'s issue on, and what of those copies the forward's compute after ``k`` does not
cover is exposed. The backward reloads in the reverse order, each before its use, with about
``backward_factor`` times as much compute ahead of it: the same sums, against that much. One
copy alone exposes what of it the compute after it does not hide; copies issued together
queue. A maximum of sums linear in the decisions: the exact solvers optimise it exactly (one
exposure variable per pass, one row per issue point). It is a model of the queue, with the
node times of the estimator; the GPU check measures the step times it stands for.

Which values can be offloaded is the front end's call (``transfer`` is NaN elsewhere):
torch's offload pass moves only whole, contiguous tensors that are not views, model
outputs or inputs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class OffloadTerms:
    """The price of offloading, per value of a Problem (arrays of its length)."""

    transfer: np.ndarray
    """float[n]: one host-link copy of the value's storage, in the Problem's cost unit;
    NaN where the value cannot be offloaded."""
    after: np.ndarray
    """float[n]: the forward's compute after the value's copy is issued, in the cost unit
    (what its offload can overlap; its reload, ``backward_factor`` times as much); NaN
    where the value cannot be offloaded."""
    backward_factor: float = 2.0
    """The backward's compute as a multiple of the forward's (about 2 where matmuls
    dominate)."""

    def __post_init__(self) -> None:
        transfer = np.asarray(self.transfer, dtype=np.float64)
        after = np.asarray(self.after, dtype=np.float64)
        if transfer.shape != after.shape or transfer.ndim != 1:
            raise ValueError("OffloadTerms.transfer and .after need one entry per node")
        ok = ~np.isnan(transfer)
        if np.any(transfer[ok] < 0) or np.any(after[ok] < 0) or np.any(np.isnan(after[ok])):
            raise ValueError("OffloadTerms: transfer and after must be >= 0 where offloadable")
        if not self.backward_factor >= 0:
            raise ValueError(
                f"OffloadTerms: backward_factor must be >= 0, got {self.backward_factor}"
            )
        object.__setattr__(self, "transfer", transfer)
        object.__setattr__(self, "after", np.where(ok, after, np.nan))

    @property
    def offloadable(self) -> np.ndarray:
        """bool[n]: the values that may be offloaded."""
        return ~np.isnan(self.transfer)

    @property
    def factors(self) -> tuple[float, float]:
        """Each pass's compute ahead of a copy, as a multiple of ``after``: the forward's
        and the backward's."""
        return 1.0, self.backward_factor

    def exposures(self, offloaded: Iterable[int]) -> tuple[float, float]:
        """The forward's and the backward's exposed copy time of offloading exactly
        ``offloaded`` (module docstring)."""
        chosen = sorted(set(offloaded))
        if not chosen:
            return 0.0, 0.0
        after = self.after[chosen]
        order = np.argsort(after, kind="stable")
        at = after[order]
        queued = np.cumsum(self.transfer[chosen][order])
        # those issued with k (equal after) queue with it: each tie's whole sum
        queued = queued[np.searchsorted(at, at, side="right") - 1]
        forward, backward = (max(0.0, float(np.max(queued - f * at))) for f in self.factors)
        return forward, backward

    def price(self, offloaded: Iterable[int]) -> float:
        """The exposed time of offloading exactly ``offloaded`` (module docstring)."""
        return sum(self.exposures(offloaded))


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
    direction); ``backward_factor``: the backward's compute as a multiple of the forward's.
    ``overlap=False``: the copies run on the compute stream, so no compute hides them and
    each offloaded value costs its two copies in full (``after`` 0). ``issued``: the node
    after which each value's copy starts (the compiled path copies after a value's last
    forward use; default: the value itself): what hides its copies is the compute after
    that node.
    """
    if bandwidth <= 0:
        raise ValueError(f"offload needs a host link bandwidth > 0 bytes/s, got {bandwidth}")
    cost = np.asarray(cost, dtype=np.float64)
    transfer = np.asarray(storage_bytes_of, dtype=np.float64) / bandwidth
    after = np.concatenate([np.cumsum(cost[::-1])[::-1][1:], [0.0]])  # compute after v
    if issued is not None:
        after = after[np.asarray(issued, dtype=np.int64)]
    if not overlap:
        after = np.zeros_like(transfer)
    ok = np.asarray(offloadable, dtype=bool) & (transfer > 0)
    return OffloadTerms(
        transfer=np.where(ok, transfer, np.nan),
        after=np.where(ok, after, np.nan),
        backward_factor=backward_factor,
    )
