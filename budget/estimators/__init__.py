"""Estimator registry: a spec string -> an estimator that prices one fx node.

Specs are ``"name"`` or ``"name:device"``:

- ``flops``    FLOPs (torch's counter, its gaps filled) / the device's peak rate: seconds
- ``roofline`` max(FLOPs / peak, bytes moved / bandwidth): seconds
- ``profile``  each op timed on real tensors on the graph's device: seconds
- ``unit``     every op costs 1: for tests

``flops`` and ``roofline`` price for the device the graph's tensors are on (a CUDA GPU
matched by name against the table in ``devices``, the host CPU measured once), or for a
named device from any machine: ``"roofline:h100"`` previews an H100 plan on a laptop.
Every estimator fills the same fields (:class:`NodeCost`). An unknown estimator or device
is a ValueError that lists what is available.
"""

from __future__ import annotations

from .base import DeviceEstimator, Estimator, NodeCost
from .devices import device_names

_ESTIMATORS: dict[str, type] = {}


def register_estimator(cls: type) -> type:
    if cls.name in _ESTIMATORS:
        raise ValueError(f"estimator {cls.name!r} is already registered")
    _ESTIMATORS[cls.name] = cls
    return cls


def available_estimators() -> list[str]:
    return [name for name, cls in sorted(_ESTIMATORS.items()) if cls.available()]


def get_estimator(spec: str | Estimator) -> Estimator:
    """The estimator for ``spec`` (``"roofline"``, ``"flops:a100"``...), or ``spec`` itself
    when it already is one."""
    if not isinstance(spec, str):
        return spec
    name, _, device = spec.partition(":")
    cls = _ESTIMATORS.get(name.strip())
    if cls is None or not cls.available():
        raise ValueError(
            f"unknown estimator {spec!r}; available: {', '.join(available_estimators())}"
        )
    if not device:
        return cls()
    if not issubclass(cls, DeviceEstimator):
        takes = [n for n, c in sorted(_ESTIMATORS.items()) if issubclass(c, DeviceEstimator)]
        raise ValueError(
            f"estimator {cls.name!r} takes no device (got {spec!r}); "
            f"estimators that do: {', '.join(takes)}"
        )
    try:
        return cls(device)
    except ValueError as e:
        raise ValueError(
            f"unknown device {device!r} in estimator {spec!r}; "
            f"available: {', '.join(device_names())}"
        ) from e


def _register_builtins() -> None:
    from .flops import FlopsEstimator
    from .profile import ProfileEstimator
    from .roofline import RooflineEstimator
    from .unit import UnitEstimator

    for cls in (FlopsEstimator, RooflineEstimator, ProfileEstimator, UnitEstimator):
        register_estimator(cls)


_register_builtins()

__all__ = [
    "Estimator",
    "NodeCost",
    "available_estimators",
    "device_names",
    "get_estimator",
    "register_estimator",
]
