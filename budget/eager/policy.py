"""A region's selective-checkpoint policy, taken from a plan, for ``torch.utils.checkpoint``.

torch asks the policy about every op call of a checkpointed forward, in call order, at the
dispatch level (the calls :mod:`budget.eager.trace` recorded). :class:`RegionPolicy` answers
from the plan's :class:`~budget.eager.plan.RegionChoice`: the k-th call gets the k-th
choice (``MUST_SAVE`` or ``PREFER_RECOMPUTE``), after checking that it is the op the plan
was made for. Any other op, or one call too many, raises
:class:`~budget.errors.PlanMismatchError` naming the region, the call and both ops: a
plan is never applied to calls it was not made for. Each forward starts counting afresh
(``context_fn`` is called once per checkpointed call), so nothing carries over from a step
that raised. Where torch asks the policy again while it recomputes (torch before 2.13,
``ctx.is_recompute``), the recomputation is counted apart from the forward it replays.

A recomputation runs BatchNorm again; in training its outputs depend on the batch alone,
but the op also updates the running statistics in place (not in its schema): there the
op is given copies of them (:class:`StatsAside`), so they are updated once per step, by
the forward.

Under ``torch.compile`` (AOTAutograd traces the region with its own, functionalized ops)
the calls differ from eager's; there the plan's cached ops are matched by op and
occurrence (the j-th ``addmm`` of the region) and tagged ``MUST_SAVE``, everything else
``PREFER_RECOMPUTE``: the tags reach the compiled partitioner, which honours them.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.checkpoint import (
    CheckpointPolicy,
    SelectiveCheckpointContext,
    create_selective_checkpoint_contexts,
)

from ..errors import PlanMismatchError
from ..runtime import _torch_private as T
from .plan import RegionChoice
from .replays import ViewReplays


class RegionPolicy:
    """The plan's policy for one checkpointed module; ``context_fn`` for checkpoint()."""

    def __init__(self, choice: RegionChoice) -> None:
        if len(choice.ops) != len(choice.policy):
            raise ValueError(
                f"region {choice.module!r}: {len(choice.ops)} ops but {len(choice.policy)} "
                "policies in the plan"
            )
        self.choice = choice
        self.ops = tuple(choice.ops)
        self.save = tuple(p == "save" for p in choice.policy)
        seen: Counter[str] = Counter()
        self.by_occurrence: dict[tuple[str, int], bool] = {}
        for op, save in zip(self.ops, self.save, strict=True):
            self.by_occurrence[(op, seen[op])] = save
            seen[op] += 1
        self.calls = 0  # checkpointed forwards run with this policy (eager and compiled)

    def context_fn(self) -> tuple[Any, Any]:
        """A fresh pair of selective-checkpoint contexts for one checkpointed call."""
        self.calls += 1
        # torch's own check of cached values (their version counter) also fires for the
        # output of every in-place op, whose counter goes up after the op returns: the
        # plan never caches a value that is written after it is cached (trace), so the
        # check is off and in-place ops that write tensors from outside the region
        # (BatchNorm's num_batches_tracked.add_) can be cached (eager/problem._cacheable).
        asked = _Pass(self)
        forward, recompute = create_selective_checkpoint_contexts(
            asked, allow_cache_entry_mutation=True
        )
        if torch.compiler.is_compiling():  # functional ops: a recomputed BatchNorm writes nothing
            return forward, recompute
        return forward, _StatsAside(recompute, self.choice, asked)


# Ops that update BatchNorm running statistics in place without saying so in their
# schema: the position of their training flag (running mean and variance: arguments 3, 4).
# (None: always in training.)
RUNNING_STATS: dict[str, int | None] = {
    "aten::native_batch_norm": 5,
    "aten::_native_batch_norm_legit": 5,
    "aten::cudnn_batch_norm": 5,
    "aten::miopen_batch_norm": 5,
    "aten::_batch_norm_with_update": None,
}


class StatsAside(T.TorchDispatchMode):  # type: ignore[misc,name-defined]
    """Below selective checkpointing's recompute mode (so it sees only the ops run again):
    a BatchNorm in training is given copies of its running statistics."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        name = func._schema.name
        if name in RUNNING_STATS and _updates_stats(args, RUNNING_STATS[name]):
            args = (*args[:3], args[3].clone(), args[4].clone(), *args[5:])
        return func(*args, **kwargs)


def _updates_stats(args: tuple, training: int | None) -> bool:
    """Whether a BatchNorm call with ``args`` updates running statistics (arguments 3 and
    4, tensors; ``training``: the position of its training flag, None where it has none)."""
    if len(args) < 5 or not all(isinstance(t, torch.Tensor) for t in args[3:5]):
        return False  # no statistics given (an overload without them)
    return training is None or (len(args) > training and bool(args[training]))


class _StatsAside:
    """``recompute`` (selective checkpointing's recompute mode) above :class:`StatsAside`,
    entered once per recomputation. A second backward through the region (``retain_graph
    =True``, a gradient penalty's ``create_graph=True``) recomputes it again; torch allows
    that where the plan caches nothing there, and else refuses, as it hands each cached
    value out once: the refusal is told as the plan's (:class:`PlanMismatchError`)."""

    def __init__(self, recompute: Any, choice: RegionChoice, asked: _Pass) -> None:
        self.recompute, self.choice, self.asked = recompute, choice, asked
        self.stack: list[contextlib.ExitStack] = []

    def __enter__(self) -> None:
        self.asked.index[1] = 0  # each recomputation's calls counted afresh (torch < 2.13)
        stack = contextlib.ExitStack()
        stack.enter_context(StatsAside())
        stack.enter_context(self.recompute)
        stack.enter_context(_recomputing(self.choice.key))
        self.stack.append(stack)

    def __exit__(self, kind: Any, error: Any, tb: Any) -> bool | None:
        done = self.stack.pop().__exit__(kind, error, tb)
        if isinstance(error, RuntimeError) and "backward an extra time" in str(error):
            raise PlanMismatchError(
                f"budget.apply: a backward ran through module {self.choice.label!r} "
                "a second time (retain_graph=True, or a gradient penalty's create_graph="
                "True), and its plan caches values, which checkpointing hands out once: "
                "plan the step that runs both backwards (budget.apply(..., step=...)), or "
                "budget.unapply the model"
            ) from error
        return done


_local = threading.local()


@contextlib.contextmanager
def fake_run() -> Iterator[None]:
    """Policies answer as in an eager step although the tensors are fake: for
    :mod:`budget.eager.peak`, which runs the step with the plan applied on fake tensors
    (op calls are then checked one by one, as in a real step, less autograd's view
    replays, which only fake tensors make: :mod:`budget.eager.replays`)."""
    before = getattr(_local, "fake_run", False), getattr(_local, "replays", None)
    _local.fake_run, _local.replays = True, ViewReplays()
    try:
        with _local.replays:
            yield
    finally:
        _local.fake_run, _local.replays = before


@contextlib.contextmanager
def _recomputing(region: tuple[str, int]) -> Iterator[None]:
    """In a fake run, marks the recomputation of ``region`` (:func:`recomputing`)."""
    if not getattr(_local, "fake_run", False):
        yield
        return
    _local.serial = getattr(_local, "serial", 0) + 1
    _local.recomputing = [*getattr(_local, "recomputing", []), (region, _local.serial)]
    try:
        yield
    finally:
        _local.recomputing = _local.recomputing[:-1]


def recomputing() -> tuple[tuple[str, int], int] | None:
    """In a fake run (:func:`fake_run`), the region being recomputed now (its module and
    call, :attr:`RegionChoice.key`) and a number of that recomputation's own; None outside
    recomputations."""
    stack = getattr(_local, "recomputing", [])
    return stack[-1] if stack else None


def _tracing(func: Any, args: tuple, kwargs: dict) -> bool:
    """True while torch.compile traces the region (AOTAutograd's passes run it on fake or
    functional tensors, some without the proxy mode torch's own test looks for)."""
    if getattr(_local, "fake_run", False):
        return False
    if T.sac_is_compiling(func, args, kwargs) or T.fake_mode_active():
        return True
    kinds = (T.FakeTensor, T.FunctionalTensor)
    return any(isinstance(t, kinds) for t in T.tree_leaves((args, kwargs)))


class _Pass:
    """The policy function of one forward: counts its op calls."""

    def __init__(self, policy: RegionPolicy) -> None:
        self.policy = policy
        self.index = [0, 0]  # op calls seen: in the forward, in the recomputation
        self.seen: Counter[str] = Counter()

    def __call__(
        self, ctx: SelectiveCheckpointContext, func: Any, *args: Any, **kwargs: Any
    ) -> CheckpointPolicy:
        p = self.policy
        name = str(func)
        replays = getattr(_local, "replays", None)
        if replays is not None and replays.is_replay(func, args):
            return CheckpointPolicy.PREFER_RECOMPUTE  # not a call of the real step
        if _tracing(func, args, kwargs):
            k = self.seen[name]
            self.seen[name] += 1
            save = p.by_occurrence.get((name, k), False)
            return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE
        phase = int(ctx.is_recompute)
        k = self.index[phase]
        self.index[phase] += 1
        if k >= len(p.ops) or p.ops[k] != name:
            planned = p.ops[k] if k < len(p.ops) else f"the end of the region ({len(p.ops)} calls)"
            raise PlanMismatchError(
                f"budget.apply: module {p.choice.label!r} ran {name} as op "
                f"call {k}, but its plan has {planned} there: the forward is not the one that "
                "was planned (other shapes taking another path, a changed model, or another "
                "training mode); plan it again with budget.apply"
            )
        return CheckpointPolicy.MUST_SAVE if p.save[k] else CheckpointPolicy.PREFER_RECOMPUTE
