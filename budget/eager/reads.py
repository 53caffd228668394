"""Values an eager step reads from tensor data in Python, while it is traced on fakes.

A step may read tensor values in Python (``if mask.all():``, ``.item()``, ``.tolist()``),
which fake tensors do not have, or run an op whose output size depends on them
(``nonzero``: a mixture of experts' routing). Such a call gets the value the real step
will read, or a fake tensor of the size the real step makes (:func:`real_value`,
:func:`real_output`): the recorded op calls it depends on (its data inputs, and every
earlier write into their storages) are run again on the real parameters, buffers and
inputs (no grad, RNG restored, nothing real written), and only those. So the trace takes
the branch the real step takes. Libraries that test for fake tensors to skip such reads
are told they are not tracing (Hugging Face transformers:
:func:`transformers_reads_values`). The values read are kept (``Trace.reads``):
:func:`reads_as_traced` gives them to another fake run of the same step (the plan applied,
for its peak: :mod:`budget.eager.peak`), which then takes the same path, its checkpointed
regions' recomputations included (:func:`recomputed_reads`).
"""

from __future__ import annotations

import contextlib
import operator
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.fx as fx

from ..runtime import _torch_private as T
from ..runtime.values import storage_of
from .plan import RegionChoice
from .traced import Read, Region


def real_value(tracer: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """The value ``func(*args, **kwargs)`` has in the real step, for a call whose output
    is a Python value read from tensor data: the recorded op calls it depends on are
    run on the real inputs. None when that cannot be done (an input without a real
    tensor behind it, a random op among them, or a tensor output). ``tracer``: the trace
    so far (its ``arg``, ``order``, ``real`` and ``writers``: budget.eager.trace)."""
    out = real_output(tracer, func, args, kwargs)
    if any(isinstance(t, torch.Tensor) for t in T.tree_leaves(out)):
        return None
    return out


def fake_like(out: Any, *, host: bool = False) -> Any:
    """Empty tensors shaped, strided and typed as ``out``'s (fake ones, under a fake mode):
    what a fake run makes of an op whose output size depends on values. ``host``: its
    integer CPU tensors are kept as they are, real, for the kernels that read them on the
    host (the batch sizes of a ``PackedSequence``, which ``nn.LSTM``, ``nn.GRU`` and
    ``pad_packed_sequence`` read in C++, where a fake tensor has no data to give)."""

    def like(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        if host and _host_ints(t) and not isinstance(t, T.FakeTensor):
            return t
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)

    return T.tree_map(like, out)


def real_output(tracer: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """What ``func(*args, **kwargs)`` makes in the real step (:func:`real_value`; tensors
    too, for an op whose output size depends on values: ``nonzero``, a MoE's routing),
    or None where that cannot be known."""
    call_args, call_kwargs = tracer.arg(args), tracer.arg(kwargs)
    roots: list[fx.Node] = []
    fx.node.map_arg((call_args, call_kwargs), roots.append)
    needed = _dependencies(tracer, roots)
    placeholders = [n for n in needed if n.op == "placeholder"]
    if any(n not in tracer.real for n in placeholders):
        return None
    ops = sorted((n for n in needed if n in tracer.order), key=tracer.order.__getitem__)
    if any(torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ()) for n in ops):
        # a random op's draw depends on every draw before it, which fake ops never made:
        # run again here it would draw other numbers than the real step (a wrong branch)
        return None
    writes = any(getattr(getattr(n.target, "_schema", None), "is_mutable", False) for n in ops)
    cuda = sorted(
        {
            t.device.index or 0
            for n in needed
            for t in T.tree_leaves(n.meta.get("val"))
            if isinstance(t, torch.Tensor) and t.device.type == "cuda"
        }
    )
    values: dict[fx.Node, Any] = {}

    def held(n: fx.Node) -> fx.Node:  # the node whose value holds n's
        return n.args[0] if n.target is operator.getitem else n  # type: ignore[return-value]

    def value(n: fx.Node) -> Any:
        if n.target is operator.getitem:
            return values[n.args[0]][n.args[1]]  # type: ignore[index]
        return values[n]

    # each value is let go after its last use (a read late in the forward would
    # otherwise hold every activation before it)
    last = {held(m): i for i, n in enumerate(ops) for m in n.all_input_nodes}
    last.update((held(m), len(ops)) for m in roots)

    # below the fake mode (whatever runs here is real), without autograd, and with
    # the RNG as it was (a random op among them draws)
    with T._disable_current_modes(), torch.no_grad(), torch.random.fork_rng(devices=cuda):
        for n in placeholders:
            # read, never written: copies when an op here writes in place (through a
            # view of a parameter, say)
            values[n] = tracer.real[n].detach().clone() if writes else tracer.real[n].detach()
        for i, n in enumerate(ops):
            a, k = fx.node.map_arg((n.args, n.kwargs), value)
            values[n] = n.target(*a, **k)  # type: ignore[operator]
            del a, k
            for m in [m for m in values if last.get(m, -1) <= i]:
                del values[m]
        a, k = fx.node.map_arg((call_args, call_kwargs), value)
        return func(*a, **k)


# Ops whose CPU kernel reads integer operands on the host (a PackedSequence's lengths),
# which fake tensors cannot give it, and whose outputs' sizes depend on those alone: their
# floating-point operands are read for values only. (``_pad_packed_sequence``, which reads
# the batch sizes, is composite: its calls run on them, real: budget.eager.fake.real_paths)
HOST_READS = ("aten::_pack_padded_sequence",)


def host_read(tracer: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """What a fake run makes of a call of one of ``HOST_READS`` (None for other calls, or
    where its integer operands have no real value behind them): the kernel run on zeros
    of its floating-point operands' sizes and the real values of its integer ones
    (:func:`real_output`), its outputs made :func:`fake_like` (the integer ones stay real,
    for the kernels that read them next)."""
    if not isinstance(func, T.OpOverload) or func.name() not in HOST_READS:
        return None
    ints = [a for a in T.tree_leaves((args, kwargs)) if _host_ints(a)]
    real_ints = real_output(tracer, lambda *a: list(a), tuple(ints), {}) if ints else []
    if real_ints is None:
        return None
    given = dict(zip(map(id, ints), real_ints, strict=True))

    def real(a: Any) -> Any:
        if not isinstance(a, torch.Tensor):
            return a
        if id(a) in given:
            return given[id(a)]
        return torch.zeros(a.shape, dtype=a.dtype, device=a.device)  # read for values only

    with T._disable_current_modes(), torch.no_grad():
        out = func(*T.tree_map(real, args), **T.tree_map(real, kwargs))
    return fake_like(out, host=True)


def _host_ints(a: Any) -> bool:
    """An integer (or bool) tensor on the CPU: values a kernel may read on the host."""
    integral = isinstance(a, torch.Tensor) and not (a.is_floating_point() or a.is_complex())
    return integral and a.device.type == "cpu"


def _dependencies(tracer: Any, roots: list[fx.Node]) -> set[fx.Node]:
    """The nodes ``roots`` are computed from: their inputs, and every op that wrote
    into one of their storages before now (an in-place op through a view), closed."""
    seen: set[fx.Node] = set()
    stack = list(roots)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(n.all_input_nodes)
        for t in T.tree_leaves(n.meta.get("val")):
            st = storage_of(t)
            if st is not None:
                stack.extend(tracer.writers.get(st[0], []))
    return seen


def recomputed_reads(
    reads: Sequence[Read], regions: Sequence[Region], choices: Sequence[RegionChoice]
) -> dict[tuple[str, int], list[Read]]:
    """For each checkpointed region of a plan (by module and call), the reads its
    recomputation makes again, in order: those of the calls the plan does not cache (a
    cached call's output is handed back, not made again). ``regions``: the trace's,
    ``choices``: the plan's, one per region."""
    again: dict[tuple[str, int], list[Read]] = {}
    for r, (region, choice) in enumerate(zip(regions, choices, strict=True)):
        if choice.checkpoint:
            again[region.key] = [
                read
                for read in reads
                if read.region == r and (read.call is None or choice.policy[read.call] != "save")
            ]
    return again


class _Answers(T.TorchDispatchMode):  # type: ignore[misc,name-defined]
    """Answers a fake run's reads of tensor data with a trace's, in order: the forward's
    from ``reads``, a recomputation's (``recomputing()``: the region and a number of the
    recomputation's own, or None) from ``again``, the reads of that region's calls the
    plan does not cache."""

    def __init__(
        self,
        reads: Sequence[Read],
        again: Mapping[tuple[str, int], list[Read]],
        recomputing: Callable[[], tuple[tuple[str, int], int] | None],
    ) -> None:
        super().__init__()
        self.reads, self.again, self.recomputing = reads, again, recomputing
        self.next = 0
        self.next_again: dict[int, int] = {}  # a recomputation's number -> its next read

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        try:
            if isinstance(func, T.OpOverload) and func.name() in HOST_READS:
                raise T.DynamicOutputShapeException(func)  # answered as the trace's
            return func(*args, **(kwargs or {}))
        except (T.DataDependentOutputException, T.DynamicOutputShapeException):
            now = self.recomputing()
            if now is None:
                reads, at = self.reads, self.next
                self.next += 1
            else:
                reads, at = self.again.get(now[0], []), self.next_again.get(now[1], 0)
                self.next_again[now[1]] = at + 1
            if at >= len(reads) or reads[at].op != str(func):
                raise
            host = isinstance(func, T.OpOverload) and func.name() in HOST_READS
            return fake_like(reads[at].value, host=host)


@contextlib.contextmanager
def transformers_reads_values() -> Iterator[None]:
    """Hugging Face transformers, while traced, reads no tensor values in Python: its
    ``is_tracing(tensor)`` (transformers/utils/import_utils.py) is true for fake tensors,
    and its mask helpers then build what the eager step skips (``find_packed_sequence_indices``
    in masking_utils.py does not test ``(packed_sequence_mask[:, -1] == 0).all()``, so a
    causal mask is materialized, and ``sdpa`` runs with that mask instead of ``is_causal``).
    The trace reads values as the real step does (:func:`real_value`), so the
    test is turned off for the trace: ``is_fake_tensor``, which ``is_tracing`` calls, answers
    False. Nothing when transformers is not loaded."""
    utils = sys.modules.get("transformers.utils.import_utils")
    original = getattr(utils, "is_fake_tensor", None)
    if utils is None or not callable(original):
        yield
        return
    utils.is_fake_tensor = lambda x: False
    try:
        yield
    finally:
        utils.is_fake_tensor = original


@contextlib.contextmanager
def reads_as_traced(
    reads: Sequence[Read],
    again: Mapping[tuple[str, int], list[Read]] | None = None,
    recomputing: Callable[[], tuple[tuple[str, int], int] | None] = lambda: None,
) -> Iterator[None]:
    """Run the traced step again on fake tensors so that it takes the path the trace took
    (the one the real step takes): transformers is told it is not tracing, and each read of
    tensor data gets the value the trace read at that point (in call order; a read the
    trace did not make, or another op, raises as before). Enter it after (inside) the
    FakeTensorMode. A read inside a checkpointed region is made again when the region is
    recomputed: it gets the value from ``again`` (:func:`recomputed_reads`), by the region
    ``recomputing`` names (budget.eager.policy.recomputing). ``reads``: the trace's
    (``Trace.reads``)."""
    answers = _Answers(reads, again or {}, recomputing) if reads else contextlib.nullcontext()
    with transformers_reads_values(), answers:
        yield
