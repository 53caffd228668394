"""The estimator contract: price one forward node of the joint graph.

Every estimator returns the same :class:`NodeCost`: ``cost``, what the solver minimises (in
the estimator's ``unit``: seconds for ``flops``, ``roofline`` and ``profile``, ops for
``unit``), with the node's FLOPs and the bytes it moves kept for display and totals.
``spec`` is the string that makes the same estimator again (``"roofline:h100"``); plans
record it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import torch
import torch.fx

from ..runtime.values import node_device
from .devices import Device, check_device_name, device_of, get_device


@dataclass(frozen=True)
class NodeCost:
    cost: float  # what the solver minimises, in the estimator's ``unit``
    flops: float = 0.0  # FLOPs, for display and totals
    bytes_moved: float = 0.0  # bytes read + written (0 for views), for display
    note: str = ""  # how the cost was found when that is not the obvious way


class Estimator(Protocol):
    name: ClassVar[str]
    unit: ClassVar[str]
    spec: str

    @classmethod
    def available(cls) -> bool: ...

    def estimate(self, node: torch.fx.Node) -> NodeCost: ...


class DeviceEstimator:
    """Base of the estimators that turn FLOPs and bytes into seconds with device figures.

    ``device=None`` prices every node for the device its tensors are on (a CUDA GPU by
    name, the measured host CPU for CPU tensors); a name (``"h100"``) prices for that
    device whatever machine plans.
    """

    name: ClassVar[str] = ""
    unit: ClassVar[str] = "s"

    def __init__(self, device: str | None = None) -> None:
        self.device_name = check_device_name(device) if device is not None else None
        self.spec = f"{self.name}:{self.device_name}" if self.device_name else self.name
        self._devices: dict[str, Device] = {}

    @classmethod
    def available(cls) -> bool:
        return True

    def device_for(self, node: torch.fx.Node) -> Device:
        """The figures ``node`` is priced with (looked up once per device)."""
        where = None if self.device_name is not None else node_device(node)
        key = self.device_name or str(where)
        if key not in self._devices:
            self._devices[key] = get_device(key) if where is None else device_of(where)
        return self._devices[key]

    def __repr__(self) -> str:
        return f"<estimator {self.spec}>"
