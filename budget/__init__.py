"""budget: fit PyTorch training into memory by choosing what to save and what to recompute.

    import budget, torch
    budget.config.activation_memory_budget = 0.5
    step = torch.compile(model, backend=budget.backend())
    plan = budget.plan(loss_fn, *example_inputs, memory_budget=0.5)

Heavy pieces (torch compile machinery, solver backends) load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__
from .config import config
from .core.sizes import MemoryBudget, parse_budget

_LAZY = {
    "Plan": ".core.plan",
    "Decision": ".core.plan",
    "step_peak": ".core.plan",
    "Problem": ".core.problem",
    "backend": ".compile.backend",
    "plan": ".compile.preview",
    "plans": ".compile.preview",
    "sweep": ".compile.preview",
    "problems": ".compile.preview",
    "apply": ".eager.apply",
    "unapply": ".eager.install",
    "BudgetError": ".errors",
    "BudgetTooSmallError": ".errors",
    "InfeasibleError": ".errors",
    "SolverTimeout": ".errors",
    "PlanMismatchError": ".errors",
    "OffloadError": ".errors",
    "PreviewError": ".errors",
    "StepBudgetError": ".errors",
    "load_plans": ".core.plan_files",
    "save_plans": ".core.plan_files",
    "available_solvers": ".solvers",
    "available_estimators": ".estimators",
}

if TYPE_CHECKING:
    from .compile.backend import backend
    from .compile.preview import plan, plans, problems, sweep
    from .core.plan import Decision, Plan, step_peak
    from .core.plan_files import load_plans, save_plans
    from .core.problem import Problem
    from .eager.apply import apply
    from .eager.install import unapply
    from .errors import (
        BudgetError,
        BudgetTooSmallError,
        InfeasibleError,
        OffloadError,
        PlanMismatchError,
        PreviewError,
        SolverTimeout,
        StepBudgetError,
    )
    from .estimators import available_estimators
    from .solvers import available_solvers


def __getattr__(name: str) -> Any:
    import importlib

    if name in _LAZY:
        module = importlib.import_module(_LAZY[name], __name__)
        return getattr(module, name)
    if name == "eager":  # budget.eager.plan(...) after a bare ``import budget``
        return importlib.import_module(".eager", __name__)
    raise AttributeError(f"module 'budget' has no attribute {name!r}")


__all__ = [
    "BudgetError",
    "BudgetTooSmallError",
    "InfeasibleError",
    "SolverTimeout",
    "Decision",
    "MemoryBudget",
    "OffloadError",
    "Plan",
    "PlanMismatchError",
    "PreviewError",
    "Problem",
    "StepBudgetError",
    "__version__",
    "apply",
    "available_estimators",
    "available_solvers",
    "backend",
    "config",
    "load_plans",
    "parse_budget",
    "plan",
    "plans",
    "problems",
    "save_plans",
    "step_peak",
    "sweep",
    "unapply",
]
