"""The objects budget hands Inductor: its custom partitioner, and a compile with no code.

- :class:`InductorPartitioner` is ``torch._inductor.config.custom_partitioner_fn`` for a
  :class:`budget.compile.backend.BudgetBackend` or one compile attempt of a graph
  (:mod:`budget.compile.inductor_compile`): each joint graph Inductor partitions is
  planned and partitioned by :func:`budget.compile.partition.budget_partition`, and its
  ``uuid()`` (torch's key for a custom partitioner in its compile caches) covers every
  setting that changes a plan.
- :func:`run_uncompiled` is an ``inner_compile`` for previews: Inductor's whole pipeline up
  to the partitioner, then the graph run as it is, no code generated.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import torch

from ..core.plan_files import PlanBook
from . import plan_cache
from .partition import budget_partition

if TYPE_CHECKING:
    from ..core.settings import PlanLog, PlanSettings


class Planning(Protocol):
    """What a partitioner plans for: the settings, and the log its plans go to."""

    settings: PlanSettings
    log: PlanLog


def run_uncompiled(gm: torch.fx.GraphModule, _inputs: Sequence[Any], **_: Any) -> Any:
    """An Inductor ``inner_compile`` that generates no code: runs the graph as it is.

    Previews trace on fake tensors through Inductor's whole pipeline (pre-grad passes,
    decompositions, joint-graph passes, the partitioner) so that they plan the very graph
    training compiles; only the code generation, the slow part, is skipped.
    """
    from ..runtime._torch_private import make_boxed_func

    return _uncompiled_class()(make_boxed_func(gm.forward))


@functools.cache
def _uncompiled_class() -> type:
    from ..runtime._torch_private import OutputCode

    class Uncompiled(OutputCode):  # type: ignore[misc]
        """Inductor's compiled-graph interface around a plain (boxed) graph function."""

        _boxed_call = True

        def __init__(self, fn: Callable[..., Any]) -> None:
            super().__init__()
            self.fn = fn

        def __call__(self, inputs: Sequence[Any]) -> Any:
            return self.fn(inputs)

        def post_compile(self, *args: Any, **kwargs: Any) -> None:
            pass

        def set_triton_bundle(self, triton_bundle: Any) -> None:
            pass

    return Uncompiled


def _inductor_partitioner_base() -> type:
    from ..runtime._torch_private import CustomPartitionerFn

    return CustomPartitionerFn


class InductorPartitioner(_inductor_partitioner_base()):  # type: ignore[misc]
    """Adapter for ``torch._inductor.config.custom_partitioner_fn``.

    Its ``uuid()`` (torch's key for a custom partitioner, in the FX graph and AOTAutograd
    cache keys) covers budget's version and source and every setting that changes a plan
    (:func:`budget.compile.plan_cache.settings_key`); torch pickles it as that uuid.
    """

    def __init__(
        self,
        planning: Planning,
        outputs_held: bool = True,
        settings: PlanSettings | None = None,
        held_inputs: frozenset[int] = frozenset(),
    ) -> None:
        self.planning = planning  # the settings, and the log its plans go to
        # what this graph is planned with: the planning's, or its share of the step's peak
        # budget (budget.compile.step_budget)
        self.settings = planning.settings if settings is None else settings
        # the caller holds the forward's outputs through the backward (not after a graph
        # break: budget.compile.peak); its peaks, and so its plans, depend on it
        self.outputs_held = outputs_held
        # the graph's inputs the user holds (not kept for its backward: compile/dynamo_graph.py)
        self.held_inputs = held_inputs
        self.calls = 0  # joint graphs partitioned: 0 when a compile cache skipped it
        self.num_fwd_outputs = 1  # the user's outputs of the forward (the last partitioned)
        self._uuid: str | None = None
        # plans to apply instead of planning (on several ranks, the plan cache's, which
        # every rank holds the same): no solve, no collective
        self.book: PlanBook | None = None

    def __call__(self, gm: torch.fx.GraphModule, joint_inputs: Sequence[Any], **kwargs: Any) -> Any:
        kwargs.pop("compiler", None)
        self.calls += 1
        self.num_fwd_outputs = kwargs.get("num_fwd_outputs", 1)
        settings = self.settings if self.book is None else replace(self.settings, book=self.book)
        return budget_partition(
            gm,
            joint_inputs,
            settings=settings,
            log=self.planning.log,
            outputs_held=self.outputs_held,
            held_inputs=self.held_inputs,
            **kwargs,
        )

    def uuid(self) -> str:
        if self._uuid is None:
            held = "" if self.outputs_held else ":outputs dropped"
            if self.held_inputs:  # another kept_input_bytes
                held += ":user holds " + ",".join(map(str, sorted(self.held_inputs)))
            self._uuid = plan_cache.settings_key(self.settings) + held
        return self._uuid

    def __reduce__(self) -> tuple[Any, ...]:
        # torch's cache keys pickle Inductor's config, this object included: the log it
        # plans into (its plans, on_plan) must not enter them, only what decides a plan.
        return (_PartitionerId, (self.uuid(),))


class _PartitionerId(_inductor_partitioner_base()):  # type: ignore[misc]
    """What a pickled :class:`InductorPartitioner` becomes: its uuid, not runnable."""

    def __init__(self, uuid: str) -> None:
        self._id = uuid

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("budget's partitioner cannot run from a pickled copy")

    def uuid(self) -> str:
        return self._id

    def __reduce__(self) -> tuple[Any, ...]:
        return (_PartitionerId, (self._id,))
