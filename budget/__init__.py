"""budget: fit PyTorch training into memory by choosing what to save and what to recompute.

    import budget, torch
    budget.config.activation_memory_budget = 0.5
    step = torch.compile(model, backend=budget.backend())
    plan = budget.plan(loss_fn, *example_inputs, memory_budget=0.5)

Heavy pieces (torch compile machinery, solver backends) load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import config
from .sizes import MemoryBudget, parse_budget

__version__ = "0.1.0"

_LAZY = {
    "Plan": ".plan_model",
    "Decision": ".plan_model",
    "Problem": ".problem",
    "backend": ".torch_backend",
    "plan": ".preview",
    "plans": ".preview",
    "sweep": ".preview",
    "problems": ".preview",
    "BudgetTooSmallError": ".planner",
    "PlanMismatchError": ".plan_files",
    "load_plans": ".plan_files",
    "save_plans": ".plan_files",
    "available_solvers": ".solvers",
    "available_estimators": ".estimators",
}

if TYPE_CHECKING:
    from .estimators import available_estimators
    from .plan_files import PlanMismatchError, load_plans, save_plans
    from .plan_model import Decision, Plan
    from .planner import BudgetTooSmallError
    from .preview import plan, plans, problems, sweep
    from .problem import Problem
    from .solvers import available_solvers
    from .torch_backend import backend


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module = importlib.import_module(_LAZY[name], __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'budget' has no attribute {name!r}")


__all__ = [
    "BudgetTooSmallError",
    "Decision",
    "MemoryBudget",
    "Plan",
    "PlanMismatchError",
    "Problem",
    "__version__",
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
    "sweep",
]
