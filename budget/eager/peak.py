"""The peak memory of an eager training step, predicted by running it on fake tensors.

What an eager plan does to the peak is decided inside ``torch.utils.checkpoint``: when a
region's recomputation runs (at the first unpack of one of its saved values), what the
selective policy's cache holds, when a checkpoint frame lets go of its inputs and RNG
state. Rather than model those rules, :func:`simulate` runs the step itself, forward and
backward, with whatever plan the model has applied, on fake tensors: the model's
parameters, buffers and the inputs are swapped for fake copies, nothing is computed and
no real buffer changes, and the caller's RNG state is restored afterwards. Every storage
an op call makes is counted from that call until Python frees it (the same objects, views
and in-place writes sharing their storage, as in a real step); the CPU RNG states the
checkpoints keep are counted the same way. The backward's work that torch does in place
for real tensors and out of place for fake ones (the engine's sums of gradients, formulas
such as indexing's) is done in place (:mod:`budget.eager.backward_paths`).

What is resident before the step is not counted: parameters, buffers, the inputs, and the
parameters' gradients, present as after a first step (the convention of
:func:`budget.runtime.measure.measure_peak`, which measures the same quantity on a real
step). What an op allocates inside its kernel and frees before returning is not seen on
fake tensors: it is added at the call (:func:`budget.estimators.memory.workspace_bytes`:
convolutions, attention, matmuls and the CPU kernels that allocate inside themselves,
measured per call signature; on CUDA the kernels it measures on the GPU).
tests/eager/test_eager_peak.py checks predictions to the byte against the measured peak.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ..core.plan import LivePoint
from ..estimators.live import LiveStorages
from ..runtime import _torch_private as T
from .backward_paths import BackwardPaths, exclusive_counts
from .fake import KernelGaps, fake_step, real_paths
from .plan import RegionChoice
from .policy import fake_run, recomputing
from .reads import reads_as_traced, recomputed_reads
from .traced import Trace


@dataclass
class EagerPeak:
    """The predicted peak of one step, above what is resident before it."""

    peak_bytes: int
    timeline: list[LivePoint] = field(default_factory=list)  # live bytes after each op call
    # per module of ``simulate(marks=...)``: the timeline index where its backward begins
    # (the gradient of its output is made), None where that was not seen
    backward_at: list[int | None] = field(default_factory=list)


class _Live(LiveStorages):
    """Live bytes (:class:`budget.estimators.live.LiveStorages`) with a timeline: the live
    bytes after each op call, marked forward, backward or recompute."""

    def __init__(self, *, measure_workspace: bool = True) -> None:
        super().__init__(measure_workspace=measure_workspace)
        self.backward = False
        self.timeline: list[LivePoint] = []
        self.calls: Counter[str] = Counter()
        self.marks: dict[int, int] = {}

    def mark(self, i: int) -> None:
        """Module ``i``'s backward begins: the next timeline point is its first."""
        self.marks.setdefault(i, len(self.timeline))

    def called(self, func: Any) -> None:
        name = func.overloadpacket.__name__
        k = self.calls[name]
        self.calls[name] += 1
        # backward runs with grad mode off; checkpoint recomputes with it on
        phase = (
            "forward"
            if not self.backward
            else ("recompute" if torch.is_grad_enabled() else "backward")
        )
        most = self.recent if self.recent > self.live else None
        self.timeline.append(LivePoint(f"{name}_{k}" if k else name, phase, self.live, most))
        self.recent = self.live


class _SavedNumbers(TorchFunctionMode):
    """Counts the 0-dim tensor autograd saves for a Python number (``x * 0.5`` saves 0.5 as
    an 8-byte double for the backward of x; ``x / 3`` too): torch wraps the number above
    the dispatcher, so no op call makes it and the saved-tensor hooks never see it. Its
    storage is counted from the call until autograd lets it go (after the node's backward
    runs), as :class:`_Live` counts any storage. Only the slot the number was given in is
    read: reading another (a saved activation) would run its unpack hook. And only for
    the arithmetic whose node saves the number (``ARITHMETIC``): a function of the model
    given numbers (``F.local_response_norm(x, 5, ...)``) returns a node of its last op,
    whose slot of that name holds an activation."""

    def __init__(self, live: _Live) -> None:
        super().__init__()
        self.live = live

    ARITHMETIC = frozenset(
        ("mul", "multiply", "rmul", "imul", "div", "divide", "true_divide", "truediv")
        + ("rtruediv", "rdiv", "idiv", "itruediv", "pow", "rpow", "ipow")
        + ("floor_divide", "floordiv", "rfloordiv", "ifloordiv")
    )

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        arithmetic = getattr(func, "__name__", "").strip("_") in self.ARITHMETIC
        slots = [
            name
            for name, arg in (("_saved_self", args[:1]), ("_saved_other", args[1:2]))
            if arithmetic and arg and isinstance(arg[0], (bool, int, float))
        ]
        node = getattr(out, "grad_fn", None) if slots and isinstance(out, torch.Tensor) else None
        for name in slots if node is not None else ():
            saved = getattr(node, name, None)
            if (
                isinstance(saved, torch.Tensor)
                and saved.dim() == 0
                and not isinstance(saved, T.FakeTensor)
            ):
                self.live.count(saved.untyped_storage())
        return out


def simulate(
    model: nn.Module,
    run: Callable[..., torch.Tensor],
    args: tuple,
    kwargs: dict[str, Any],
    trace: Trace | None = None,
    *,
    measure_workspace: bool = True,
    marks: list[tuple[nn.Module, int]] | None = None,
    regions: Sequence[RegionChoice] = (),
) -> EagerPeak:
    """The peak of ``run(*args, **kwargs).backward()`` as ``model`` is now (with or without
    a plan applied), on fake tensors. ``trace``: the step's trace, whose reads of tensor
    data (data-dependent Python) the run is given, so that it takes the same path.
    ``measure_workspace``: CPU kernels' workspace measured on this host, else by rule.
    ``marks``: module calls (a module and which of its forward's runs with gradients on)
    whose backward's start to find in the timeline (:attr:`EagerPeak.backward_at`).
    ``regions``: the plan applied, one choice per region of ``trace``, whose
    recomputations read values again."""
    live = _Live(measure_workspace=measure_workspace)
    paths = BackwardPaths(exclusive_counts())
    get_rng_state = torch.get_rng_state

    def counted_rng_state() -> torch.Tensor:  # what each checkpoint keeps for replay
        state = get_rng_state()
        live.count(state.untyped_storage())
        return state

    with fake_step(model, args, kwargs) as fake:
        with fake.mode:
            for t in fake.state.values():
                if t.requires_grad:  # resident before the step, as after a first step
                    t.grad = torch.zeros_like(t)
        with (
            fake_run(),
            torch.enable_grad(),
            mock.patch.object(torch, "get_rng_state", counted_rng_state),
            fake.mode,
            KernelGaps(),
            real_paths(),
            _reads(trace, regions),
            live,
            _SavedNumbers(live),
            _marked(marks or [], live),
            paths,
        ):
            loss = run(*fake.args, **fake.kwargs)
            seed = torch.ones_like(loss)  # backward()'s own seed, made before it starts
            paths.hook(loss.grad_fn)
            live.backward = True
            loss.backward(seed)
            del loss, seed
    at = [live.marks.get(i) for i in range(len(marks or []))]
    return EagerPeak(peak_bytes=live.peak, timeline=live.timeline, backward_at=at)


def _reads(trace: Trace | None, regions: Sequence[RegionChoice]) -> Any:
    """The trace's reads of tensor data, and its checkpointed regions' again."""
    if trace is None:
        return contextlib.nullcontext()
    again = recomputed_reads(trace.reads, trace.regions, regions) if regions else None
    return reads_as_traced(trace.reads, again, recomputing)


@contextlib.contextmanager
def _marked(calls: list[tuple[nn.Module, int]], live: _Live) -> Any:
    """Marks each module call's backward start in ``live``: a hook on the gradient of the
    first output of that call of its forward (not of a recomputation) that requires grad."""
    marks: dict[nn.Module, dict[int, int]] = {}  # module -> its call -> the mark
    for i, (m, call) in enumerate(calls):
        marks.setdefault(m, {})[call] = i

    def on_forward(mine: dict[int, int]) -> Callable[..., None]:
        runs = [0]

        def hook(_module: nn.Module, _args: Any, out: Any) -> None:
            if live.backward or not torch.is_grad_enabled():
                return  # a recomputation's output: its gradient is never made
            i = mine.get(runs[0])
            runs[0] += 1
            for t in T.tree_leaves(out) if i is not None else ():
                if isinstance(t, torch.Tensor) and t.requires_grad:
                    t.register_hook(lambda grad: live.mark(i))
                    return

        return hook

    handles = [m.register_forward_hook(on_forward(mine)) for m, mine in marks.items()]
    try:
        yield
    finally:
        for h in handles:
            h.remove()
