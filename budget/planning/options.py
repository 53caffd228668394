"""The one options resolver: every entry point's arguments, with ``budget.config`` for
those left unset, checked once and turned into :class:`~budget.core.settings.PlanSettings`.

The compiled path (:func:`budget.backend`, the previews, ``budget solve``) and the eager
path (:func:`budget.apply`, :func:`budget.eager.plan`) take the same options and call
:func:`resolve_settings`, so a default, a check or an error message is written once.
"""

from __future__ import annotations

from ..config import COMPILERS, config, validate_option
from ..core.plan_files import PlanBook, PlanSource
from ..core.settings import PlanSettings
from ..core.sizes import parse_budget, parse_peak_budget
from ..estimators import get_estimator
from ..solvers import get_solver


def resolve_settings(
    *,
    memory_budget: float | str | None = None,
    peak_memory_budget: str | None = None,
    solver: str | None = None,
    estimator: str | None = None,
    time_limit: float | None = None,
    peak_search: str | None = None,
    offload: bool | None = None,
    compiler: str = "",
    plan: PlanSource | object | None = None,
) -> PlanSettings:
    """The settings of one planning call. ``compiler``: "inductor" or "eager" for the
    compiled path, "" for the eager path (no compiler). ``plan``: a saved plan the caller
    applies instead of solving (on the compiled path a plan file or Plans, loaded here into
    ``book``), which carries its own budget: a budget given beside it is refused."""
    if compiler and compiler not in COMPILERS:
        raise ValueError(f"unknown compiler {compiler!r}; available: {', '.join(COMPILERS)}")
    if plan is not None and (memory_budget is not None or peak_memory_budget is not None):
        raise ValueError(
            "pass a budget (memory_budget, peak_memory_budget) or plan, not both: a saved "
            "plan carries its own budget"
        )
    fraction = config.activation_memory_budget if memory_budget is None else memory_budget
    peak = config.peak_memory_budget if peak_memory_budget is None else peak_memory_budget
    return PlanSettings(
        budget=parse_budget(fraction),
        solver=get_solver(solver or config.solver).name,
        estimator=get_estimator(estimator or config.estimator).spec,
        time_limit=validate_option(
            "time_limit", config.time_limit if time_limit is None else time_limit
        ),
        peak_bytes=None if peak is None or plan is not None else parse_peak_budget(peak),
        peak_search=validate_option(
            "peak_search", config.peak_search if peak_search is None else peak_search
        ),
        offload=validate_option("offload", config.offload if offload is None else offload),
        compiler=compiler,
        book=PlanBook.load(plan) if compiler and plan is not None else None,  # type: ignore[arg-type]
        conv_workspace=config.conv_workspace,
        buffer_reuse=config.buffer_reuse,
        fusion_distance=config.fusion_distance,
    )
