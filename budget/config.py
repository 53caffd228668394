"""Global defaults for ``budget``, validated when set.

Mirrors ``torch._functorch.config.activation_memory_budget``: set
``budget.config.activation_memory_budget = 0.5`` once, or scope a change with
``budget.config.patch(activation_memory_budget=0.3)`` as a context manager or decorator.
An invalid value raises at the assignment, not at compile time.
"""

from __future__ import annotations

import contextlib
from typing import Any

from .core.sizes import MemoryBudget, parse_budget, parse_peak_budget

# The compile pipelines a plan can be made for (budget.backend(compiler=...)).
COMPILERS = ("inductor", "eager")

_DEFAULTS: dict[str, Any] = {
    "activation_memory_budget": 1.0,
    "peak_memory_budget": None,
    "solver": "auto",
    "estimator": "flops",
    "time_limit": 60.0,
    "peak_search": "grid",
    "conv_workspace": "measure",
    "offload": False,
    "buffer_reuse": "neutral",
    "fusion_distance": 32,
}

# How the peak models price a CPU convolution's workspace (budget.config.conv_workspace):
# measured on this host once per distinct call, or by budget's rule (fitted on two CPUs)
CONV_WORKSPACES = ("measure", "rule")

# How a peak memory budget is searched (budget.config.peak_search).
PEAK_SEARCHES = ("grid", "exact")


def validate_option(name: str, value: Any) -> Any:
    if name == "activation_memory_budget":
        parse_budget(value)
        return value
    if name == "peak_memory_budget":
        if value is not None:
            parse_peak_budget(value)
        return value
    if name == "solver":
        from .solvers import get_solver

        get_solver(value)
        return value
    if name == "estimator":
        from .estimators import get_estimator

        get_estimator(value)
        return value
    if name == "time_limit":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"time_limit must be a positive number of seconds; got {value!r}")
        return float(value)
    if name == "peak_search":
        if value not in PEAK_SEARCHES:
            raise ValueError(
                f"peak_search must be one of {', '.join(map(repr, PEAK_SEARCHES))}; got {value!r}"
            )
        return value
    if name == "conv_workspace":
        if value not in CONV_WORKSPACES:
            raise ValueError(
                f"conv_workspace must be one of {', '.join(map(repr, CONV_WORKSPACES))}; "
                f"got {value!r}"
            )
        return value
    if name == "buffer_reuse" and value != "neutral" and not isinstance(value, bool):
        raise ValueError(f"buffer_reuse must be 'neutral', True or False; got {value!r}")
    if name == "buffer_reuse":
        return value
    if name == "fusion_distance":
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ValueError(
                "fusion_distance must be a whole number of places, 1 or more (1: neighbours "
                f"only), or None (Inductor's own rules); got {value!r}"
            )
        return value
    if name == "offload":
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be True or False; got {value!r}")
        return value
    raise AttributeError(f"budget.config has no option {name!r}; options: {sorted(_DEFAULTS)}")


class _Config:
    """Module-like holder of validated options. Use the module-level ``config``."""

    def __init__(self) -> None:
        object.__setattr__(self, "_values", dict(_DEFAULTS))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(
                f"budget.config has no option {name!r}; options: {sorted(_DEFAULTS)}"
            ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self._values[name] = validate_option(name, value)

    def memory_budget(self) -> MemoryBudget:
        return parse_budget(self._values["activation_memory_budget"])

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def patch(self, **changes: Any) -> _Patch:
        """Temporarily set options: ``with config.patch(solver="ilp"):`` or as a decorator."""
        for name, value in changes.items():
            validate_option(name, value)
        return _Patch(self, changes)

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"budget.config({body})"


class _Patch(contextlib.ContextDecorator):
    def __init__(self, cfg: _Config, changes: dict[str, Any]) -> None:
        self._cfg = cfg
        self._changes = changes
        self._saved: list[dict[str, Any]] = []

    def __enter__(self) -> _Config:
        self._saved.append(dict(self._cfg._values))
        for name, value in self._changes.items():
            setattr(self._cfg, name, value)
        return self._cfg

    def __exit__(self, *exc: object) -> None:
        self._cfg._values.clear()
        self._cfg._values.update(self._saved.pop())


config = _Config()
