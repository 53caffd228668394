"""Offload terms for a Problem, priced for the estimator's device: what both front ends
share (which values they may move is theirs: :mod:`budget.compile.offload`,
:mod:`budget.eager.offload`).

Offload needs a time estimator (the copies are priced against recomputation in seconds)
and a device whose host link the device table knows; on the host CPU it frees nothing,
and asking for it there raises :class:`~budget.errors.OffloadError`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch.fx as fx

from ..core.offload import OffloadTerms, offload_terms
from ..core.problem import Problem
from ..errors import OffloadError
from ..estimators import get_estimator
from ..estimators.base import DeviceEstimator
from ..estimators.devices import HOST, device_names


def host_link(estimator: str, node: fx.Node) -> float:
    """The host link's bandwidth (bytes/s, one way) of the device ``estimator`` prices
    ``node`` for; :class:`OffloadError` where offload cannot be planned."""
    est = get_estimator(estimator)
    if not isinstance(est, DeviceEstimator) or est.unit != "s":
        raise OffloadError(
            f"offload needs a time estimator (flops, roofline or profile) to price its "
            f"copies against recomputation; {estimator!r} prices in {est.unit!r}"
        )
    device = est.device_for(node)
    if device.host_link <= 0:
        where = (
            "the host CPU: offloading to host memory frees nothing where the host is the device"
            if device.key == HOST
            else f"{device.name}: its host link's bandwidth is not known"
        )
        raise OffloadError(
            f"offload cannot be planned on {where}. To plan for a GPU of the device table, "
            f"name it in the estimator (e.g. estimator='flops:h100'; devices: "
            f"{', '.join(device_names())})"
        )
    return device.host_link


def price_offload(
    problem: Problem,
    movable: Sequence[bool],
    bandwidth: float,
    *,
    overlap: bool = True,
    issued: Sequence[int] | None = None,
) -> OffloadTerms:
    """The offload terms of ``problem`` where the front end may move the ``movable``
    values: one value per storage (a storage shared by two values is moved once, by the
    first movable one, which made it), never a graph input. ``overlap``: whether the
    front end's copies run beside compute (a side stream) or on its stream; ``issued``:
    where each copy starts (:func:`~budget.core.offload.offload_terms`)."""
    seen: set[int] = set()
    owner = np.zeros(problem.n, dtype=bool)
    for v in range(problem.n):
        g = int(problem.storage[v])
        if movable[v] and not problem.is_input[v] and g >= 0 and g not in seen:
            seen.add(g)
            owner[v] = True
    sizes = np.asarray([problem.node_bytes(v) for v in range(problem.n)], dtype=np.float64)
    at = None if issued is None else np.asarray(issued, dtype=np.int64)
    return offload_terms(
        problem.cost, sizes, owner, bandwidth=bandwidth, overlap=overlap, issued=at
    )
