"""Every exception budget raises on purpose, in one hierarchy.

Catch :class:`BudgetError` for anything budget refuses; the subclasses also derive from
the builtin a caller would expect (a bad budget or an unreachable target is a
``ValueError``, a solver out of time a ``RuntimeError``), so ``except ValueError`` keeps
working. Messages say what is wrong and what is allowed.
"""

from __future__ import annotations


class BudgetError(Exception):
    """Base class of the errors budget raises on purpose."""


class InfeasibleError(BudgetError, ValueError):
    """No plan fits the target; ``min_bytes`` (when known) is the smallest reachable size."""

    def __init__(self, message: str, min_bytes: int | None = None) -> None:
        super().__init__(message)
        self.min_bytes = min_bytes


class BudgetTooSmallError(InfeasibleError):
    """The budget cannot be met: a saved-memory size below the smallest reachable one
    (``min_bytes``), or a peak memory budget below the lowest peak of the plans tried
    (``lowest_peak_bytes``: predicted, or under Inductor the peak of their compiled
    code)."""

    def __init__(
        self, message: str, min_bytes: int | None = None, lowest_peak_bytes: int | None = None
    ) -> None:
        super().__init__(message, min_bytes)
        self.lowest_peak_bytes = lowest_peak_bytes


class StepBudgetError(BudgetTooSmallError):
    """A step's peak budget, or memory budget given as a size, that one of its graphs
    (``graph``, counted from 0) cannot fit beside what the step holds outside it.
    ``short_bytes``: how much less the graphs run before it would have to keep for it to
    fit (at its lowest peak; None where unknown).
    A preview divides the budget again with that (:mod:`budget.compile.step_budget`)."""

    def __init__(
        self,
        message: str,
        min_bytes: int | None = None,
        lowest_peak_bytes: int | None = None,
        *,
        graph: int = 0,
        short_bytes: int | None = None,
    ) -> None:
        super().__init__(message, min_bytes, lowest_peak_bytes)
        self.graph = graph
        self.short_bytes = short_bytes


class SolverTimeout(BudgetError, RuntimeError):
    """The time limit passed before any plan was found."""


class PlanMismatchError(BudgetError, ValueError):
    """A saved plan does not fit the graph being compiled; it is refused, never applied."""


class OffloadError(BudgetError, ValueError):
    """Offload was asked for where it cannot be planned: the device is the host (a CPU),
    its host link is unknown, the estimator does not price time, or the path does not
    offload yet; or a compiled step whose plan offloads on a GPU is backpropagated twice
    (its backward frees the host copies it reloads)."""


class PreviewError(BudgetError, ValueError):
    """A step a preview cannot trace on fake tensors (data-dependent Python in eager code
    between graphs; for budget.apply, a value read from tensor data that cannot be known
    before the step runs, or read again where the peak prediction cannot answer it)."""


class TargetError(BudgetError, ValueError):
    """A CLI TARGET that cannot be loaded: a bad string, a missing file, a factory that raises."""


class UsageError(BudgetError):
    """A command-line usage error: reported as one line, exit status 2."""


__all__ = [
    "BudgetError",
    "BudgetTooSmallError",
    "InfeasibleError",
    "OffloadError",
    "PlanMismatchError",
    "SolverTimeout",
    "StepBudgetError",
    "TargetError",
    "UsageError",
]
