"""Estimator registry: name -> class that prices one fx node.

Every estimator returns a :class:`NodeCost` for a forward node of the joint graph
(FLOPs, bytes moved, and the cost the solver minimises). ``get_estimator(name)`` raises a
ValueError listing what is available.
"""

from __future__ import annotations

from .base import Estimator, NodeCost

_ESTIMATORS: dict[str, type] = {}


def register_estimator(cls: type) -> type:
    if cls.name in _ESTIMATORS:
        raise ValueError(f"estimator {cls.name!r} is already registered")
    _ESTIMATORS[cls.name] = cls
    return cls


def available_estimators() -> list[str]:
    return [name for name, cls in sorted(_ESTIMATORS.items()) if cls.available()]


def get_estimator(name: str | Estimator) -> Estimator:
    if not isinstance(name, str):
        return name
    cls = _ESTIMATORS.get(name)
    if cls is None or not cls.available():
        raise ValueError(
            f"unknown estimator {name!r}; available: {', '.join(available_estimators())}"
        )
    return cls()


def _register_builtins() -> None:
    from .flops import FlopsEstimator, UnitEstimator

    register_estimator(FlopsEstimator)
    register_estimator(UnitEstimator)


_register_builtins()

__all__ = ["Estimator", "NodeCost", "available_estimators", "get_estimator", "register_estimator"]
