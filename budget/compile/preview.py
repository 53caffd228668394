"""``budget.plan``: preview the plans for a training step without running it.

The step is traced by dynamo and AOTAutograd on fake tensors (no real compute, no
buffer updates, nothing moved), through the same pipeline and partitioner the backend
uses with the same ``compiler`` (Inductor's passes change the joint graph, so a preview
for ``compiler="inductor"``, the default, runs them too, and generates no code), so a
preview is the plan training would get. Graph breaks give one plan per graph. With
``compile=True`` Inductor generates each graph's code too (its kernels unbuilt), so that
a peak budget is held by the code's peak as training holds it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

from ..core.plan import Plan
from ..core.plan_files import PlanSource
from ..core.problem import Problem
from ..core.sizes import MemoryBudget, parse_budget
from ..errors import PreviewError
from ..planning.peak_grid import grid_budgets
from . import step_budget
from .backend import BudgetBackend
from .backend import backend as make_backend
from .divided import divided
from .step_run import DATA_DEPENDENT, run_on_examples, run_on_fake


def _trace(
    fn: Callable[..., Any],
    example_args: tuple[Any, ...],
    example_kwargs: dict[str, Any],
    *,
    sweep: Sequence[float | str | MemoryBudget] | None = None,
    progress: Callable[[int, int, int | None], None] | None = None,
    with_peak_budget: bool = True,
    code: bool = False,
    vs_torch: bool = False,
    **backend_options: Any,
) -> BudgetBackend:
    """Plan ``fn`` as training would, on fake tensors; where code outside the compiled
    graphs depends on tensor values, again on the example inputs themselves (the forward
    then runs for real, and the modules ``fn`` reaches get their buffers and the
    generators their states back: :mod:`budget.runtime.restore`). ``code``: Inductor
    generates each graph's code and training's checks run on its peak (``compile=True``)."""

    made: list[BudgetBackend] = []  # each backend the step was planned with, last last

    def fresh(caps: dict[int, int], eager: dict[int, int]) -> BudgetBackend:
        be = make_backend(**backend_options)
        if not with_peak_budget:  # sweeps and problems: the peak is shown, never a bound
            be.settings = dataclasses.replace(be.settings, peak_bytes=None)
        if vs_torch and (be.settings.peak_bytes is not None or be.settings.book is not None):
            raise ValueError(
                "vs_torch=True sets torch's plan at the same memory budget beside budget's: "
                "it needs a memory budget, not a peak budget (torch has none) or a saved plan"
            )
        be.settings = dataclasses.replace(be.settings, vs_torch=vs_torch)
        be.preview, be.code = True, code
        be.saved_caps, be.eager_before = caps, eager
        be.log.progress = progress
        if sweep is not None:
            budgets = tuple(parse_budget(b) for b in sweep)
            be.settings = dataclasses.replace(be.settings, sweep=budgets)
        made.append(be)
        return be

    def run(caps: dict[int, int], eager: dict[int, int]) -> tuple[BudgetBackend, str]:
        be = fresh(caps, eager)
        try:
            run_on_fake(be, fn, example_args, example_kwargs)
        except Exception as e:
            if type(e).__name__ not in DATA_DEPENDENT:
                raise
            be = fresh(caps, eager)
            run_on_examples(be, fn, example_args, example_kwargs, e)
            return be, EXAMPLES
        return be, FAKE

    joint = functools.partial(
        _joint_division, fn, example_args, example_kwargs, backend_options, progress
    )
    be, ran_on = divided(run, lambda: made[-1], joint)
    if not be.plans and not be.preview_runs:
        raise PreviewError(
            "torch.compile made no graph of this step: dynamo ran all of it eagerly (it "
            "does so with a frame whose graph break it cannot resume from, such as a call "
            "to nn.LSTM, GRU or RNN, which it does not trace; TORCH_LOGS=graph_breaks says "
            "why), so the compiled path has nothing to plan; budget.apply plans eager steps "
            "(budget solve --eager)"
        )
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


def _joint_division(
    fn: Callable[..., Any],
    example_args: tuple[Any, ...],
    example_kwargs: dict[str, Any],
    backend_options: dict[str, Any],
    progress: Callable[[int, int, int | None], None] | None,
    planned: BudgetBackend,
) -> tuple[dict[int, int] | None, dict[int, int]] | None:
    """The joint division of ``planned``'s step peak budget and size memory budget
    (:func:`budget.compile.step_budget.joint_division`): the step previewed once more on
    fake tensors (or its example inputs) with no peak budget, each graph planned alone at
    the memory budget and at the peak grid's fractions below it (told to ``progress`` as a
    sweep). None without either budget, with plans given (``plan=``), or where the
    division does not apply."""
    peak, size = planned.settings.peak_bytes, step_budget.step_size(planned.settings)
    if (peak is None and size is None) or backend_options.get("plan") is not None:
        return None
    swept = _trace(
        fn,
        example_args,
        example_kwargs,
        sweep=grid_budgets(planned.settings.budget),
        progress=progress,
        with_peak_budget=False,
        **backend_options,
    )
    return step_budget.joint_division(
        peak, swept.log.sweeps, swept.plans, swept.preview_runs, swept.preview_eager, size
    )


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
    compile: bool = False,
    progress: Callable[[int, int, int | None], None] | None = None,
    vs_torch: bool = False,
    **example_kwargs: Any,
) -> list[Plan]:
    """The plans for every graph of ``fn(*example_args, **example_kwargs)``, in order,
    as ``torch.compile(fn, backend=budget.backend(..., compiler=compiler))`` makes them;
    where ``fn`` reaches modules compiled on their own (a model compiled block by block),
    as training makes them calling ``fn`` eagerly (:mod:`budget.compile.own_code`).

    With ``plan`` (a plan file, a Plan or a list of Plans) nothing is solved: the saved
    plans are applied as the backend would apply them, which checks they still fit the
    step (:class:`budget.PlanMismatchError` when they do not). With ``compile=True`` (Inductor)
    each graph is compiled as training compiles it, still on fake tensors: Inductor
    generates the code of each plan it tries, a peak budget is checked on that code's peak
    as in training, and the plans carry it (``compiled_peak_bytes``); no kernel is built.
    ``progress(graph, done, total)`` is called as each graph's planning starts (0 of 1)
    and ends (1 of 1), in between as a peak search partitions each plan (``total`` None:
    how many it tries depends on what fits), and, where a step budget is divided across
    graphs, as each budget of the division's sweep is planned (e.g. to drive a progress
    bar). With ``vs_torch=True`` each plan of a memory budget carries torch's own plan of
    its graph at the same fraction (``Plan.torch_plan``), priced and predicted alike.
    """
    options = dict(
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
    if compile:
        _needs_inductor(compiler)
    found = _trace(
        fn,
        example_args,
        example_kwargs,
        progress=progress,
        code=compile,
        vs_torch=vs_torch,
        **options,
    )
    return found.plans


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
    progress: Callable[[int, int, int | None], None] | None = None,
    offload: bool | None = None,
    compile: bool = False,
    vs_torch: bool = False,
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

    With ``compile=True`` (Inductor) each budget's plans are those training makes at that
    budget, with the peak of their code (``compiled_peak_bytes``), as :func:`plans`
    previews them with ``compile=True``: the step traced and compiled once per budget
    (slower; ``progress`` is told each budget done as graph 0's). ``vs_torch``: each plan
    carries torch's own plan at its budget, as with :func:`plans`.
    """
    options: dict[str, Any] = dict(
        solver=solver, estimator=estimator, time_limit=time_limit, compiler=compiler
    )
    options |= {"offload": offload, "with_peak_budget": False, "vs_torch": vs_torch}
    if not budgets:
        raise ValueError("budgets must name at least one budget")
    if compile:
        _needs_inductor(compiler)
        sweeps = _compiled_sweep(fn, example_args, example_kwargs, budgets, progress, options)
    else:
        be = _trace(
            fn,
            example_args,
            example_kwargs,
            sweep=budgets,
            progress=progress,
            memory_budget=budgets[0],
            **options,
        )
        sweeps = be.log.sweeps
    return sweeps[0] if len(sweeps) == 1 else sweeps


def _compiled_sweep(
    fn: Callable[..., Any],
    example_args: tuple[Any, ...],
    example_kwargs: dict[str, Any],
    budgets: Sequence[float | str],
    progress: Callable[[int, int, int | None], None] | None,
    options: dict[str, Any],
) -> list[list[Plan]]:
    """Each budget's plans as a compiled preview makes them (one trace each), per graph."""
    found = []
    for done, b in enumerate(budgets):
        if progress is not None:
            progress(0, done, len(budgets))
        be = _trace(fn, example_args, example_kwargs, code=True, memory_budget=b, **options)
        if found and len(be.plans) != len(found[0]):
            raise PreviewError(
                f"the step compiled into {len(found[0])} graph(s) at budget {budgets[0]} and "
                f"{len(be.plans)} at budget {b}: a sweep needs the same graphs at every budget"
            )
        found.append(be.plans)
    if progress is not None:
        progress(0, len(budgets), len(budgets))
    return [list(graph) for graph in zip(*found, strict=True)]


def _needs_inductor(compiler: str) -> None:
    if compiler != "inductor":
        raise ValueError(
            f"compile=True reads the code Inductor generates: it needs compiler='inductor', "
            f"not {compiler!r}"
        )


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
    compile: bool = False,
    vs_torch: bool = False,
    **example_kwargs: Any,
) -> Plan | list[Plan]:
    """The plan for ``fn``'s training step; a list of plans when it has graph breaks
    (``compile``, ``vs_torch``: as :func:`plans`)."""
    found = plans(
        fn,
        *example_args,
        memory_budget=memory_budget,
        peak_memory_budget=peak_memory_budget,
        peak_search=peak_search,
        offload=offload,
        compile=compile,
        vs_torch=vs_torch,
        solver=solver,
        estimator=estimator,
        time_limit=time_limit,
        compiler=compiler,
        **example_kwargs,
    )
    return found[0] if len(found) == 1 else found
