"""The estimator contract: price one forward node of the joint graph."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

import torch.fx


@dataclass(frozen=True)
class NodeCost:
    cost: float  # what the solver minimises, in the estimator's ``unit``
    flops: float  # FLOPs, for display and totals


class Estimator(Protocol):
    name: ClassVar[str]
    unit: ClassVar[str]

    @classmethod
    def available(cls) -> bool: ...

    def estimate(self, node: torch.fx.Node) -> NodeCost: ...
