"""Training's check of a step's budgets (a peak budget, a memory budget given as a size)
as the step's graphs run.

Training plans each graph when dynamo first compiles it, for what the graphs compiled
before it hold (``Plan.held_bytes``: each once). A graph can run more often than that in
one step: a module compiled on its own and called once per layer (a model compiled block
by block, as torchtitan does) compiles once and runs for every block, each run keeping
its saves until the backward; several forwards before one backward do the same. Then the
step holds more while the graph runs than it was planned with, and its peak, or what it
keeps for the backward, can exceed the budget with no plan to say so.

:class:`StepRuns` counts, for each graph, the forward runs whose backward has not begun
(a run ends when its backward starts, or when its autograd graph is dropped unused) and,
before each run, adds up what those hold (each run's ``saved_bytes`` and
``kept_input_bytes``). Where that is more than the graph was planned with and puts what
the step keeps with this run over a size memory budget, or the graph's predicted peak in
the step over the peak budget, the run is refused with a
:class:`~budget.errors.StepBudgetError` that says why, before it allocates anything. Eager
code's saves between graphs are not seen here (as in planning).
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from ..core.plan import Plan
from ..core.settings import PlanSettings
from ..core.sizes import format_bytes
from ..errors import StepBudgetError
from ..runtime._torch_private import tree_leaves
from .step_budget import ahead, held_before


class StepRuns:
    """The live forward runs of one backend's graphs, by plan index."""

    def __init__(self, plans: Callable[[], list[Plan]], settings: PlanSettings) -> None:
        self.plans, self.settings = plans, settings
        self.live: Counter[int] = Counter()

    def held(self) -> int:
        """What the live runs keep for their backward."""
        plans = self.plans()
        return held_before([plans[i] for i, n in self.live.items() for _ in range(n)])

    def tracked(self, compiled: Callable[..., Any], index: int) -> Callable[..., Any]:
        """``compiled`` (the graph of plan ``index``), checked before each run and counted
        while its run is live."""

        def run(*args: Any) -> Any:
            self.check(index)
            out = compiled(*args)
            node = next(
                (t.grad_fn for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.grad_fn),
                None,
            )
            if node is not None:
                self._start(index, node)
            return out

        run._boxed_call = getattr(compiled, "_boxed_call", False)  # type: ignore[attr-defined]
        return run

    def _start(self, index: int, node: Any) -> None:
        self.live[index] += 1
        ended = [False]

        def end(*_: Any) -> None:
            if not ended[0]:
                ended[0] = True
                self.live[index] -= 1

        node.register_prehook(end)  # its backward begins: its saves go as it runs
        weakref.finalize(node, end)  # dropped without a backward

    def check(self, index: int) -> None:
        """Refuse a run of plan ``index``'s graph that the step's budgets cannot hold."""
        plan = self.plans()[index] if index < len(self.plans()) else None
        held = self.held()
        if plan is None or plan.held_bytes is None or held <= plan.held_bytes:
            return
        size = self.settings.budget.nbytes
        keeps = held + plan.kept_input_bytes + plan.saved_bytes
        if size is not None and keeps > size:
            told = (
                f"the step keeps {format_bytes(keeps)} for the backward with this run, over "
                f"the memory_budget {format_bytes(size)}"
            )
        else:
            peak = replace(plan, held_bytes=held).step_peak_bytes
            if self.settings.peak_bytes is None or peak is None or peak <= self.settings.peak_bytes:
                return
            told = (
                f"its predicted peak in the step, {format_bytes(peak)}, is over the "
                f"peak_memory_budget {format_bytes(self.settings.peak_bytes)}"
            )
        runs = sum(self.live.values())
        raise StepBudgetError(
            f"graph {index + 1} runs while {runs} earlier graph runs of the step keep "
            f"{format_bytes(held)} for their backward, {format_bytes(held - plan.held_bytes)} "
            f"more than it was planned with: {told}. A graph runs more than once in a step "
            "where a module is compiled on its own and called again (a model compiled block "
            "by block), or where several forwards run before one backward; training plans a "
            "graph when it first compiles and cannot know that. Compile the whole step "
            "(torch.compile(step), or model.compile() on the model), which plans it as one, "
            "or preview the step" + ahead(self.settings)
        )
