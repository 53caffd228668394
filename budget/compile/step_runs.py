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
before each run, adds up what those hold (each run's saves, as planned or, for a graph
with dynamic shapes under a size, as read from its run, and its ``kept_input_bytes``).
Where that is more than the graph was planned with and puts what the step keeps with
this run over a size memory budget, or the graph's predicted peak in the step over the
peak budget, the run is refused with a :class:`~budget.errors.StepBudgetError` that says
why, before it allocates anything (a run at larger dynamic sizes, once its forward has
shown what it saves). Eager code's saves between graphs are not seen here (as in
planning).
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from ..core.plan import Plan
from ..core.settings import PlanSettings
from ..core.sizes import format_bytes
from ..errors import StepBudgetError
from ..runtime._torch_private import tree_leaves
from ..runtime.values import storage_of
from .step_budget import ahead, step_size


class StepRuns:
    """The live forward runs of one backend's graphs: each one's plan index and saves."""

    def __init__(self, plans: Callable[[], list[Plan]], settings: PlanSettings) -> None:
        self.plans, self.settings = plans, settings
        self.live: dict[int, tuple[int, int]] = {}  # run -> (plan index, bytes it saves)
        self._runs = itertools.count()

    def held(self) -> int:
        """What the live runs keep for their backward."""
        plans = self.plans()
        return sum(saved + plans[i].kept_input_bytes for i, saved in self.live.values())

    def tracked(
        self, compiled: Callable[..., Any], index: int, dynamic: bool = False
    ) -> Callable[..., Any]:
        """``compiled`` (the graph of plan ``index``), checked before each run and counted
        while its run is live. A graph compiled with ``dynamic`` shapes saves more at
        larger sizes than its plan: under a size memory budget what each of its runs saves
        is read from its autograd node (its saved tensors unpacked: saved-tensor hooks, if
        any, run for it), and a run that puts the step past the size is refused."""
        size = step_size(self.settings) if dynamic else None

        def run(*args: Any) -> Any:
            self.check(index)
            held = self.held()
            given = _storages(args) if size is not None else set()  # a boxed call clears args
            out = compiled(*args)
            node = next(
                (t.grad_fn for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.grad_fn),
                None,
            )
            if node is None:
                return out
            plan = self.plans()[index]
            saved = plan.saved_bytes
            if size is not None:
                saved = _saves(node, given, _device(out), saved)
                keeps = replace(plan, held_bytes=held, saved_bytes=saved).step_keeps_bytes
                if saved > plan.saved_bytes and keeps is not None and keeps > size:
                    raise self._resized(index, keeps, saved)
            self._start(index, node, saved)
            return out

        run._boxed_call = getattr(compiled, "_boxed_call", False)  # type: ignore[attr-defined]
        return run

    def _start(self, index: int, node: Any, saved: int) -> None:
        run = next(self._runs)
        self.live[run] = (index, saved)

        def end(*_: Any) -> None:
            self.live.pop(run, None)

        node.register_prehook(end)  # its backward begins: its saves go as it runs
        weakref.finalize(node, end)  # dropped without a backward

    def _resized(self, index: int, keeps: int, saved: int) -> StepBudgetError:
        plan, size = self.plans()[index], step_size(self.settings)
        assert size is not None
        return StepBudgetError(
            f"graph {index + 1} ran at larger sizes than it was planned at (its shapes are "
            f"dynamic): it saves {format_bytes(saved)} for its backward where its plan saves "
            f"{format_bytes(plan.saved_bytes)}, and the step keeps at least "
            f"{format_bytes(keeps)}, over "
            f"the memory_budget {format_bytes(size)}. A size holds at the sizes a graph is "
            "planned at: give a fraction, or compile with static shapes (dynamic=False, or "
            "torch._dynamo.mark_static on the inputs), or plan at the largest sizes first",
            graph=index,
            short_bytes=keeps - size,
        )

    def check(self, index: int) -> None:
        """Refuse a run of plan ``index``'s graph that the step's budgets cannot hold."""
        plan = self.plans()[index] if index < len(self.plans()) else None
        held = self.held()
        if plan is None or plan.held_bytes is None or held <= plan.held_bytes:
            return
        size = step_size(self.settings)
        keeps = replace(plan, held_bytes=held).step_keeps_bytes
        if size is not None and keeps is not None and keeps > size:
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
        runs = len(self.live)
        raise StepBudgetError(
            f"graph {index + 1} runs while {runs} earlier graph runs of the step keep "
            f"{format_bytes(held)} for their backward, {format_bytes(held - plan.held_bytes)} "
            f"more than it was planned with: {told}. A graph runs more than once in a step "
            "where a module is compiled on its own and called again (a model compiled block "
            "by block), or where several forwards run before one backward (or where an earlier "
            "graph ran at larger dynamic sizes than planned); training plans a graph when it "
            "first compiles and cannot know that. Compile the whole step "
            "(torch.compile(step), or model.compile() on the model), which plans it as one, "
            "or preview the step" + ahead(self.settings)
        )


def _storages(args: Any) -> set[int]:
    """The storage keys of a call's tensors (:func:`budget.runtime.values.storage_of`)."""
    return {st[0] for t in tree_leaves(args) if (st := storage_of(t)) is not None}


def _device(out: Any) -> torch.device | None:
    """Where a graph's run computed: its first output tensor's device."""
    return next((t.device for t in tree_leaves(out) if isinstance(t, torch.Tensor)), None)


def _saves(node: Any, given: set[int], device: torch.device | None, planned: int) -> int:
    """The bytes of the storages a compiled graph's run saves for its backward on its
    ``device`` (an offloaded value's host copy aside, as plans count), its inputs' storages
    (``given``) aside: read from its autograd node (``planned`` where it holds none it can
    say: another kind of node)."""
    saved = getattr(node, "saved_tensors", None)
    if saved is None:
        return planned
    storages = {
        st[0]: st[1]
        for t in saved
        if (st := storage_of(t)) is not None
        and st[0] not in given
        and (device is None or t.device == device)
    }
    return sum(storages.values())
