"""The ``profile`` estimator: time each node on real tensors, on the graph's own device.

For each forward node the estimator builds real inputs from the fake ``meta["val"]`` of its
arguments (same shapes, strides, dtypes and device; floats from a private seeded generator,
integer and index tensors zero, so indices are always in range; booleans False), runs the
op outside every fake/tracing mode and times it: a monotonic clock (``time.perf_counter``)
on CPU, CUDA events on a GPU. Two warm-up runs, then the median of five samples, each
sample looping the op enough times to last about a millisecond.

- **Cache**: timings are kept per process, keyed by op, argument shapes, strides, dtypes,
  non-tensor arguments and device (and CPU thread count), so the same op is timed once:
  the layers of a transformer cost the time of one.
- **Random ops** (and every other op) run inside ``torch.random.fork_rng``: the caller's
  CPU and CUDA RNG states are untouched.
- **Views** cost 0 without running. **Mutating ops, ops with side effects, collectives,
  higher-order ops, ops on a device that is not here, and anything that fails to run** are
  not timed: they get the ``roofline`` estimate, and ``notes[node name]`` says why.

Per-op timings are eager timings: launch/dispatch overhead included, no fusion. Under a
compiler that fuses (Inductor), an op it generates code for does not run as its own kernel:
a pointwise op or reduction recomputed in the backward is fused into the kernels that read
it, and its eager time (a full kernel per decomposed op: a layer norm is several) would
price recomputing it above recomputing a matrix product. So ``ProfileEstimator(fused=True)``
(what the compiled path uses under Inductor) times only the ops that keep their own kernel
(matrix products, convolutions, attention) and prices the others as the ``flops``
estimator does. Timings vary from run to run, so unlike the other estimators plans made
with ``profile`` are not reproducible across processes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.fx

from ..runtime._torch_private import (
    HigherOrderOperator,
    OpOverload,
    _disable_current_modes,
    no_python_dispatcher,
    tree_map,
)
from ..runtime.values import hint, hint_float, node_device, shape, value_of
from .base import NodeCost
from .flops import FlopsEstimator, node_flops, op_kind
from .memory import bytes_moved
from .ops import is_alias, is_collective, is_mutating
from .roofline import RooflineEstimator

WARMUP = 2
REPEATS = 5
MIN_SAMPLE_S = 1e-3  # each timed sample loops the op for at least this long
MAX_LOOP = 1000


@dataclass
class _Entry:
    seconds: float | None  # None: could not be timed
    note: str = ""


_CACHE: dict[str, _Entry] = {}
_STATS = {"hits": 0, "misses": 0}


def cache_info() -> dict[str, int]:
    """Hits and misses of the per-process timing cache, and its size."""
    return {**_STATS, "size": len(_CACHE)}


def clear_cache() -> None:
    _CACHE.clear()
    _STATS.update(hits=0, misses=0)


def _spec_leaf(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return (
            "T",
            shape(x),
            tuple(hint(s) for s in x.stride()),
            hint(x.storage_offset()),
            str(x.dtype),
            str(x.layout),
        )
    if isinstance(x, (torch.SymInt, torch.SymBool)):
        return hint(x)
    if isinstance(x, torch.SymFloat):
        return hint_float(x)
    return x


def _spec(x: Any) -> Any:
    return tree_map(_spec_leaf, value_of(x))


def cache_key(node: torch.fx.Node, device: torch.device) -> str:
    where = str(device)
    if device.type == "cpu":
        where += f"/{torch.get_num_threads()}threads"
    args = tree_map(_spec, (node.args, node.kwargs))
    return repr((str(node.target), where, args))


def not_runnable(node: torch.fx.Node, device: torch.device) -> str:
    """Why ``node`` must not (or cannot) be run to be timed; '' when it can."""
    target = node.target
    if isinstance(target, HigherOrderOperator):
        return f"higher-order op {target.name()}"
    if not isinstance(target, OpOverload):
        return "not an aten op"
    if is_mutating(node):
        return "mutates its inputs"
    if is_collective(node):
        return "collective"
    if node.is_impure(impure_random=False):
        return "has side effects"
    if device.type == "cuda" and not torch.cuda.is_available():
        return f"its device ({device}) is not available here"
    if device.type not in ("cpu", "cuda"):
        return f"cannot time on {device.type}"
    return ""


@contextlib.contextmanager
def _real_execution(device: torch.device) -> Iterator[None]:
    """Run real ops inside a compile: no fake/proxy modes, no Python dispatcher, no grad,
    and the caller's RNG states restored afterwards."""
    cuda = []
    if device.type == "cuda":
        cuda = [device.index if device.index is not None else torch.cuda.current_device()]
    with contextlib.ExitStack() as stack:
        stack.enter_context(_disable_current_modes())
        stack.enter_context(no_python_dispatcher())
        stack.enter_context(torch.no_grad())
        stack.enter_context(torch.random.fork_rng(devices=cuda, device_type="cuda"))
        yield


def _materialize(val: Any, device: torch.device, gen: torch.Generator) -> Any:
    """A real tensor like the fake ``val`` (shape, strides, offset, dtype) on ``device``."""
    if isinstance(val, (torch.SymInt, torch.SymBool)):
        return hint(val)
    if isinstance(val, torch.SymFloat):
        return hint_float(val)
    if not isinstance(val, torch.Tensor):
        return val
    if val.layout != torch.strided:
        raise NotImplementedError(f"cannot build a {val.layout} tensor")
    sizes = shape(val)
    strides = [hint(s) for s in val.stride()]
    offset = hint(val.storage_offset())
    span = 0 if 0 in sizes else 1 + sum((s - 1) * st for s, st in zip(sizes, strides, strict=True))
    base = torch.empty(offset + span, dtype=val.dtype, device=device)
    if val.dtype.is_floating_point or val.dtype.is_complex:
        try:
            base.normal_(generator=gen)
        except (RuntimeError, NotImplementedError):  # e.g. float8: fill through float32
            base.copy_(torch.randn(base.shape, generator=gen, device=device))
    else:
        base.zero_()  # integer/index tensors: 0 is a valid index; bools: False
    return base.as_strided(sizes, strides, offset)


def _sample_count(first: float) -> tuple[int, int]:
    number = max(1, min(MAX_LOOP, int(MIN_SAMPLE_S / max(first, 1e-9))))
    repeats = REPEATS if first < 0.1 else (3 if first < 0.5 else 1)
    return number, repeats


def _time_cpu(run: Callable[[], Any]) -> float:
    for _ in range(WARMUP - 1):
        run()
    start = time.perf_counter()
    run()
    number, repeats = _sample_count(time.perf_counter() - start)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            run()
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples)


def _time_cuda(run: Callable[[], Any], device: torch.device) -> float:
    with torch.cuda.device(device):
        for _ in range(WARMUP - 1):
            run()
        begin = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        begin.record()
        run()
        end.record()
        end.synchronize()
        number, repeats = _sample_count(begin.elapsed_time(end) / 1e3)
        samples = []
        for _ in range(repeats):
            begin.record()
            for _ in range(number):
                run()
            end.record()
            end.synchronize()
            samples.append(begin.elapsed_time(end) / 1e3 / number)
    return statistics.median(samples)


def time_node(node: torch.fx.Node, device: torch.device) -> float:
    """Seconds one run of ``node`` takes on ``device`` (uncached)."""
    op = node.target
    assert isinstance(op, OpOverload)
    with _real_execution(device):
        gen = torch.Generator(device=device).manual_seed(0)

        def real(x: Any) -> Any:
            return tree_map(lambda v: _materialize(v, device, gen), value_of(x))

        args, kwargs = tree_map(real, (node.args, node.kwargs))

        def run() -> Any:
            return op(*args, **kwargs)

        if device.type == "cuda":
            return _time_cuda(run, device)
        return _time_cpu(run)


class ProfileEstimator:
    """Measured seconds per node; see the module docstring."""

    name: ClassVar[str] = "profile"
    unit: ClassVar[str] = "s"

    def __init__(self, fused: bool = False) -> None:
        self.spec = self.name
        self.fused = fused  # the compiler fuses the ops it generates: time only the others
        self.notes: dict[str, str] = {}  # node name -> why it was not timed
        self._fallback = RooflineEstimator()
        self._fused_rule = FlopsEstimator()

    @classmethod
    def available(cls) -> bool:
        return True

    def estimate(self, node: torch.fx.Node) -> NodeCost:
        if node.op != "call_function" or is_alias(node):
            return NodeCost(cost=0.0, flops=node_flops(node))
        if self.fused and op_kind(node) == "other":
            return self._by_rule(node, self._fused_rule, "")
        device = node_device(node)
        why = not_runnable(node, device)
        if why:
            return self._by_rule(node, self._fallback, why)
        key = cache_key(node, device)
        entry = _CACHE.get(key)
        if entry is not None:
            _STATS["hits"] += 1
        else:
            _STATS["misses"] += 1
            try:
                entry = _Entry(time_node(node, device))
            except Exception as e:  # any failure to run is priced, never fatal
                first = (str(e).strip().splitlines() or [""])[0][:120]
                entry = _Entry(None, f"failed to run ({type(e).__name__}: {first})")
            _CACHE[key] = entry
        if entry.seconds is None:
            return self._by_rule(node, self._fallback, entry.note)
        return NodeCost(
            cost=entry.seconds, flops=node_flops(node), bytes_moved=float(bytes_moved(node))
        )

    def _by_rule(self, node: torch.fx.Node, rule: Any, why: str) -> NodeCost:
        """``rule``'s price for a node not timed: the roofline fallback's for one that is
        not run (``why``, noted), or, under a fusing compiler, the ``flops`` estimator's
        for an op it generates (``why`` empty, not noted). Where ``rule`` has no figures
        for the node's device: 0, and noted."""
        try:
            est = rule.estimate(node)
            note = f"not timed: {why}; {rule.name} estimate" if why else ""
        except ValueError as e:  # no figures for the device either
            est = NodeCost(0.0, node_flops(node), float(bytes_moved(node)))
            note = f"not timed: {why or 'fused by the compiler'}; priced 0 ({e})"
        if not note:
            return est
        self.notes[node.name] = note
        return dataclasses.replace(est, note=note)
