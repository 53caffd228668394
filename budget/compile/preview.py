"""``budget.plan``: preview the plans for a training step without running it.

The step is traced by dynamo and AOTAutograd on fake tensors (no real compute, no
buffer updates, nothing moved), through the same pipeline and partitioner the backend
uses with the same ``compiler`` (Inductor's passes change the joint graph, so a preview
for ``compiler="inductor"``, the default, runs them too, and generates no code), so a
preview is the plan training would get. Graph breaks give one plan per graph.
"""

from __future__ import annotations

import dataclasses
import traceback
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from ..core.plan import Plan
from ..core.plan_files import PlanSource
from ..core.problem import Problem
from ..core.sizes import parse_budget
from ..errors import BudgetError, BudgetTooSmallError, PreviewError, StepBudgetError
from ..runtime._torch_private import (
    BackendCompilerFailed,
    FakeTensor,
    FakeTensorMode,
    forget_compiled,
    tree_leaves,
    tree_map,
)
from ..runtime.restore import modules_of, restored
from . import step_budget
from .backend import BudgetBackend, in_compiled_graph
from .backend import backend as make_backend

# torch's errors for Python that needs a fake tensor's values (a branch on a data-dependent
# size, .item() used as a number, an op whose output size it cannot bound)
_DATA_DEPENDENT = {
    "GuardOnDataDependentSymNode",
    "DataDependentOutputException",
    "DynamicOutputShapeException",
}


def _trace(
    fn: Callable[..., Any],
    example_args: tuple[Any, ...],
    example_kwargs: dict[str, Any],
    *,
    sweep: Sequence[float | str] | None = None,
    progress: Callable[[int, int, int], None] | None = None,
    with_peak_budget: bool = True,
    **backend_options: Any,
) -> BudgetBackend:
    """Plan ``fn`` as training would, on fake tensors; where code outside the compiled
    graphs depends on tensor values, again on the example inputs themselves (the forward
    then runs for real, and the modules ``fn`` reaches get their buffers and the
    generators their states back: :mod:`budget.runtime.restore`)."""

    made: list[BudgetBackend] = []  # each backend the step was planned with, last last

    def fresh(caps: dict[int, int]) -> BudgetBackend:
        be = make_backend(**backend_options)
        if not with_peak_budget:  # sweeps and problems: the peak is shown, never a bound
            be.settings = dataclasses.replace(be.settings, peak_bytes=None)
        be.preview = True
        be.saved_caps = caps
        be.log.progress = progress
        if sweep is not None:
            budgets = tuple(parse_budget(b) for b in sweep)
            if not budgets:
                raise ValueError("budgets must name at least one budget")
            be.settings = dataclasses.replace(be.settings, sweep=budgets)
        made.append(be)
        return be

    def run(caps: dict[int, int]) -> tuple[BudgetBackend, str]:
        be = fresh(caps)
        try:
            _run_on_fake(be, fn, example_args, example_kwargs)
        except Exception as e:
            if type(e).__name__ not in _DATA_DEPENDENT:
                raise
            be = fresh(caps)
            _run_on_examples(be, fn, example_args, example_kwargs, e)
            return be, EXAMPLES
        return be, FAKE

    be, ran_on = _divided(run, lambda: made[-1])
    if not be.plans:
        raise ValueError(
            "no training graph was captured: nothing in the step requires grad "
            "(pass parameters or inputs with requires_grad=True)"
        )
    for i in range(len(be.plans)):
        be.log.update(i, previewed_on=ran_on)
    return be


FAKE = "fake tensors"
EXAMPLES = "the example inputs"
DIVIDE_ROUNDS = 4  # previews of a step peak budget: the step planned at most this often


def _divided(
    run: Callable[[dict[int, int]], tuple[BudgetBackend, str]],
    last: Callable[[], BudgetBackend],
) -> tuple[BudgetBackend, str]:
    """``run(caps)`` (``last()``: the backend it planned with) with no caps, and where a
    later graph cannot fit a step peak budget beside what the graphs before it keep, again
    with those capped to leave it room (:func:`budget.compile.step_budget.divide`), up to
    ``DIVIDE_ROUNDS`` runs. Where a capped graph is refused in turn, or the caps stop
    changing, the first refusal stands: it names what planning graph by graph reached."""
    caps: dict[int, int] = {}
    first: StepBudgetError | None = None
    for _ in range(DIVIDE_ROUNDS):
        try:
            return run(caps)
        except StepBudgetError as e:
            first = first or e
            new = step_budget.divide(caps, last().plans, e)
            if new is None or new == caps or (caps and e.graph <= max(caps)):
                raise first from None
            caps = new
        except BudgetTooSmallError:
            if first is None:
                raise
            raise first from None
    assert first is not None
    raise first


def _run_on_fake(
    be: BudgetBackend, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    # A shape environment lets eager code between graphs run data-dependent ops (nonzero,
    # masked_select: a MoE's routing) on fake tensors, as training runs them for real.
    with FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv()) as mode:

        def fake(x: Any) -> Any:
            return mode.from_tensor(x, static_shapes=True) if isinstance(x, torch.Tensor) else x

        args, kwargs = tree_map(fake, (args, kwargs))
        _run(be, fn, args, kwargs, _OutsideSaves(be, (args, kwargs), mode))


def _run_on_examples(
    be: BudgetBackend,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    cause: Exception,
) -> None:
    """The step on its example inputs (:func:`_run_for_real`); a PreviewError naming
    where the step failed when even that cannot run."""
    try:
        _run_for_real(be, fn, args, kwargs)
    except BudgetError:
        raise
    except Exception as e:
        raise PreviewError(
            "the step cannot be previewed: on fake tensors, code outside the compiled "
            f"graphs depends on tensor values ({_first_line(cause)}), and on the example "
            f"inputs it raised {_first_line(e)}{_where(e)}"
        ) from e


def compiled_plans(
    fn: Callable[..., Any],
    example_args: tuple[Any, ...],
    example_kwargs: dict[str, Any],
    **backend_options: Any,
) -> list[Plan]:
    """The plans training makes (``budget solve --compile``): ``fn`` compiled by the
    backend with ``backend_options`` (Inductor generates its code, so each plan carries
    its code's peak), its forward run once on the example inputs, the modules it reaches
    and the generators restored after; what eager code saves and the order graphs run in
    are counted as in a preview, so the plans' ``step_peak`` is the step's. A step peak
    budget is divided across the graphs as a preview divides it (:func:`_divided`)."""
    made: list[BudgetBackend] = []

    def run(caps: dict[int, int]) -> tuple[BudgetBackend, str]:
        be = make_backend(**backend_options)
        be.counting, be.saved_caps = True, caps
        made.append(be)
        _run_for_real(be, fn, example_args, example_kwargs)
        return be, ""

    return _divided(run, lambda: made[-1])[0].plans


def _run_for_real(
    be: BudgetBackend, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """``fn`` on real tensors: the modules it reaches and the generators restored after,
    their parameters and buffers not counted as eager code's saves."""
    modules = modules_of(fn)
    resident = [t for m in modules for t in (*m.parameters(), *m.buffers())]
    outside = _OutsideSaves(be, (args, kwargs, resident), None)
    with restored(modules):
        _run(be, fn, args, kwargs, outside)


def _run(
    be: BudgetBackend,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    outside: _OutsideSaves,
) -> None:
    compiled = torch.compile(_own_code(fn), backend=be, dynamic=False)
    try:
        with torch.autograd.graph.saved_tensors_hooks(outside.pack, lambda t: t):
            compiled(*args, **kwargs)
    except BackendCompilerFailed as e:  # show our own error, not dynamo's wrapper
        raise e.inner_exception from None
    finally:
        for code in be.preview_codes:
            forget_compiled(code)
        be.preview_codes.clear()
    outside.attribute()


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def _where(e: BaseException) -> str:
    """`` at FILE:LINE``: the innermost frame of the traceback outside torch and budget."""
    roots = (str(Path(torch.__file__).parent), str(Path(__file__).parents[1]))
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith(roots)]
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""


def _own_code(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with a code object of its own, where it is a plain function: what dynamo
    compiles for the preview is then held apart from a training compile of ``fn``, and
    dropped after it (:attr:`BudgetBackend.preview_codes`)."""
    if not isinstance(fn, types.FunctionType):
        return fn
    own = types.FunctionType(
        fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )
    own.__kwdefaults__ = fn.__kwdefaults__
    own.__qualname__, own.__module__ = fn.__qualname__, fn.__module__
    return own


class _OutsideSaves:
    """What autograd saves outside the compiled graphs during a preview's run: eager
    code's own activations, which no plan covers. Each distinct storage once, parameters
    and the step's inputs aside, sized by its upper bound where its size depends on data
    (a MoE's routing, on fake tensors), and put on the plan of the graph it follows."""

    def __init__(self, be: BudgetBackend, inputs: Any, mode: Any) -> None:
        self.be = be
        self.mode = mode  # the fake mode; None on the example inputs (real tensors)
        leaves = [t for t in tree_leaves(inputs) if isinstance(t, torch.Tensor)]
        self.inputs = {id(t.untyped_storage()) for t in leaves}
        self.saved: dict[int, tuple[int, int]] = {}  # id(storage) -> (bytes, runs before)
        self.keep: list[Any] = []  # the storages, alive so that their ids stay theirs

    def pack(self, t: Any) -> Any:
        # on fake tensors, parameters are the real ones; on the example inputs, a leaf
        # that requires grad is one the step did not make (a parameter it reached)
        made = _fake(t) if self.mode is not None else not (t.is_leaf and t.requires_grad)
        if made and not in_compiled_graph():
            storage = t.untyped_storage()
            key = id(storage)
            if key not in self.inputs and key not in self.saved:
                self.saved[key] = (self._nbytes(storage), len(self.be.preview_runs))
                self.keep.append(storage)
        return t

    def _nbytes(self, storage: Any) -> int:
        n = storage.nbytes()
        if isinstance(n, int):
            return n
        try:  # a data-dependent size: its upper bound
            upper = self.mode.shape_env.bound_sympy(n.node.expr).upper
            return int(upper) if upper.is_finite else 0
        except Exception:  # noqa: BLE001 - no bound: not counted
            return 0

    def attribute(self) -> None:
        """Each plan's eager saves (those after a run of its graph, until the next graph's
        run; before the first run: the first graph's) and what the step holds outside its
        graph while it runs (``held_bytes``: over its runs, the most)."""
        plans, runs = self.be.plans, self.be.preview_runs
        ran = [i for i in runs if i is not None]
        eager = [0] * len(plans)
        saves_before = [0] * (len(runs) + 1)  # eager bytes saved after k runs, by k
        for nbytes, k in self.saved.values():
            saves_before[min(k, len(runs))] += nbytes
            last = next((i for i in reversed(runs[:k]) if i is not None), None)
            eager[last if last is not None else (ran[0] if ran else 0)] += nbytes
        held: list[int] = [0] * len(plans)
        outside = 0  # the step's bytes outside the graph about to run
        for k, i in enumerate(runs):
            outside += saves_before[k]
            if i is not None:
                held[i] = max(held[i], outside)
                outside += plans[i].saved_bytes + plans[i].kept_input_bytes
        for i in range(len(plans)):
            self.be.log.update(i, eager_saved_bytes=eager[i], held_bytes=held[i])
        self.keep.clear()


def _fake(t: Any) -> bool:
    return isinstance(t, FakeTensor)


def plans(
    fn: Callable[..., Any],
    *example_args: Any,
    memory_budget: float | str | None = None,
    solver: str | None = None,
    estimator: str | None = None,
    time_limit: float | None = None,
    compiler: str = "inductor",
    plan: PlanSource | None = None,
    peak_memory_budget: str | None = None,
    peak_search: str | None = None,
    offload: bool | None = None,
    **example_kwargs: Any,
) -> list[Plan]:
    """The plans for every graph of ``fn(*example_args, **example_kwargs)``, in order,
    as ``torch.compile(fn, backend=budget.backend(..., compiler=compiler))`` makes them.

    With ``plan`` (a plan file, a Plan or a list of Plans) nothing is solved: the saved
    plans are applied as the backend would apply them, which checks they still fit the
    step (:class:`budget.PlanMismatchError` when they do not).
    """
    be = _trace(
        fn,
        example_args,
        example_kwargs,
        memory_budget=memory_budget,
        solver=solver,
        estimator=estimator,
        time_limit=time_limit,
        compiler=compiler,
        plan=plan,
        peak_memory_budget=peak_memory_budget,
        peak_search=peak_search,
        offload=offload,
    )
    return be.plans


def problems(
    fn: Callable[..., Any],
    *example_args: Any,
    estimator: str | None = None,
    compiler: str = "inductor",
    **example_kwargs: Any,
) -> list[Problem]:
    """The solver-agnostic :class:`~budget.core.problem.Problem` of every graph of the step,
    for benchmarks and notebooks (planned at budget 1.0 on the way, which is cheap)."""
    be = _trace(
        fn,
        example_args,
        example_kwargs,
        with_peak_budget=False,
        memory_budget=1.0,
        estimator=estimator,
        compiler=compiler,
    )
    return be.log.problems


def sweep(
    fn: Callable[..., Any],
    *example_args: Any,
    budgets: Sequence[float | str],
    solver: str | None = None,
    estimator: str | None = None,
    time_limit: float | None = None,
    compiler: str = "inductor",
    progress: Callable[[int, int, int], None] | None = None,
    offload: bool | None = None,
    **example_kwargs: Any,
) -> list[Plan] | list[list[Plan]]:
    """Plans for many budgets from one trace: ``[plan per budget]`` for a step with one
    graph, ``[[plan per budget] per graph]`` when it has graph breaks.

    The step is traced and its problem built once; each graph's two ends (torch's b=1.0
    choice and the smallest reachable memory) are solved once and shared by all budgets.
    ``progress(graph, done, total)`` is called as each graph starts (``done=0``) and as
    each of its ``total`` budgets is planned (``graph`` counts from 0), e.g. to drive a
    progress bar; nothing is printed. Every plan carries its predicted peak; a peak
    budget (``budget.config.peak_memory_budget``) does not apply to sweeps.
    """
    be = _trace(
        fn,
        example_args,
        example_kwargs,
        sweep=budgets,
        progress=progress,
        with_peak_budget=False,
        memory_budget=budgets[0] if budgets else None,
        solver=solver,
        estimator=estimator,
        time_limit=time_limit,
        compiler=compiler,
        offload=offload,
    )
    sweeps = be.log.sweeps
    return sweeps[0] if len(sweeps) == 1 else sweeps


def plan(
    fn: Callable[..., Any],
    *example_args: Any,
    memory_budget: float | str | None = None,
    solver: str | None = None,
    estimator: str | None = None,
    time_limit: float | None = None,
    compiler: str = "inductor",
    peak_memory_budget: str | None = None,
    peak_search: str | None = None,
    offload: bool | None = None,
    **example_kwargs: Any,
) -> Plan | list[Plan]:
    """The plan for ``fn``'s training step; a list of plans when it has graph breaks."""
    found = plans(
        fn,
        *example_args,
        memory_budget=memory_budget,
        peak_memory_budget=peak_memory_budget,
        peak_search=peak_search,
        offload=offload,
        solver=solver,
        estimator=estimator,
        time_limit=time_limit,
        compiler=compiler,
        **example_kwargs,
    )
    return found[0] if len(found) == 1 else found
