"""``budget.backend()``: a torch.compile backend that plans every graph it compiles.

Each graph dynamo hands over (several after graph breaks) is traced into its joint
forward/backward graph by AOTAutograd, planned at the memory budget, partitioned by the
plan and compiled with Inductor (default) or run eagerly with Inductor's decompositions
(``compiler="eager"``, the equivalent of torch's ``aot_eager_decomp_partition``).
The plans are kept on the backend (``backend.plans``) and passed to ``on_plan``.
With ``plan=`` (a plan file, a Plan or a list of Plans) nothing is solved: each graph gets
the saved plan made for it, or a clear error (:mod:`budget.core.plan_files`).

Previews (:mod:`budget.compile.preview`) run the same pipeline with ``preview=True``: Inductor's
whole pipeline up to and including the partitioner (its joint-graph passes change the
graph, and so the plan), without generating code; with ``code`` too, training's compiles
(code generated and read, kernels unbuilt), the graphs then run as they are.

Inductor compiles (:mod:`budget.compile.inductor_compile`) use torch's FX graph and
AOTAutograd caches: the partitioner's ``uuid()`` puts every setting that changes a plan
into their keys, and the plans of a compile that AOTAutograd's cache skips come from
budget's plan cache (:mod:`budget.compile.plan_cache`). Previews and ``compiler="eager"``
use neither (a preview is the partitioner's output; torch does not cache ``aot_autograd``
with eager compilers); with several ranks AOTAutograd's cache is used only where every rank
holds the same cached plans.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..core.plan import Plan
from ..core.plan_files import PlanSource
from ..core.settings import PlanLog, PlanSettings
from ..errors import BudgetTooSmallError
from ..planning.options import resolve_settings
from . import offload_safety, step_budget
from .dynamo_graph import fake_cache_off, graph_break, held_inputs
from .inductor_compile import GraphJob, compile_within_peak
from .inductor_hooks import InductorPartitioner, run_uncompiled
from .partition import budget_partition
from .peak_check import training_check
from .step_runs import StepRuns


class BudgetBackend:
    """A torch.compile backend. Create it with :func:`budget.backend`."""

    def __init__(self, settings: PlanSettings, log: PlanLog, preview: bool = False) -> None:
        self.settings = settings  # frozen: what decides the plans
        self.log = log  # what was planned, graph by graph
        self.preview = preview  # plan only: nothing is trained, no kernel built
        # previews that generate Inductor's code as training does and read its peak, its
        # kernels unbuilt (budget solve --compile)
        self.code = False
        self._step_code: Any = None  # the code of the first frame compiled: the step's
        # previews: the frames' codes no compile but the preview's had compiled, whose
        # compiled versions the preview drops once done (a notebook previewing one step
        # many times would reach dynamo's recompile limit: the step eager, no plan)
        self.preview_codes: list[Any] = []
        # previews: the index of the plan of each graph run, in run order (None: a graph
        # without a backward), so eager code's saves and what each graph holds follow the
        # runs, repeated graphs included
        self.preview_runs: list[int | None] = []
        self.preview_eager: list[int] = []  # eager saves before each run, after the last
        # previews of a step budget (a peak, a size): caps on what graphs save, by plan
        # index (budget.compile.step_budget), and what the step keeps before each graph
        # beyond the graphs before it once each, from an earlier run of the step
        self.saved_caps: dict[int, int] = {}
        self.eager_before: dict[int, int] = {}
        # training under a step peak budget or size: the graphs' live runs, checked
        stepwise = settings.peak_bytes is not None or step_budget.step_size(settings) is not None
        self.runs = StepRuns(lambda: log.plans, settings) if stepwise else None

    @property
    def compiler(self) -> str:
        return self.settings.compiler

    @property
    def plans(self) -> list[Plan]:
        """Plans made so far, one per compiled graph, in compilation order."""
        return self.log.plans

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        from ..runtime._torch_private import compiled_versions, frame_code

        # The first frame compiled is the step's own; any other (the rest of a frame after
        # a graph break, a function eager code calls) takes values of code before it.
        code = frame_code()
        if self.preview and code is not None and compiled_versions(code) == 0:
            self.preview_codes.append(code)
        if self._step_code is None:
            self._step_code = code
        made, later = len(self.log.plans), code is not self._step_code
        # a graph that ends at a graph break hands its outputs to the code after it, which
        # drops them as the step returns: they are not held through the backward
        ended, held_in = graph_break(gm), held_inputs(gm, later)
        # a peak budget is the step's: this graph gets what the graphs before it leave
        held = step_budget.held_before(self.log.plans) + self.eager_before.get(made, 0)
        outside = held
        while True:
            mark = self.log.mark()
            cap, preview = self.saved_caps.get(made), self.preview
            settings = step_budget.share(self.settings, outside, made, cap, preview)
            try:
                job = GraphJob(gm, example_inputs, settings, not ended, held_in)
                with fake_cache_off(example_inputs):  # a cache hit misstates storage sizes
                    compiled = self._compile(job)
            except BudgetTooSmallError as e:
                told = step_budget.refusal(self.settings, outside, made, e, preview)
                if told is e:
                    raise
                raise told from None
            self._told(made, ended)
            over, kept, size = step_budget.excess(self.settings, self.log.plans[made:])
            if over <= 0 or held + kept == 0:
                break
            if outside >= held + kept:  # planned for its kept inputs too, and still over
                raise step_budget.over_budget(self.settings, over, made, preview, size)
            self.log.rewind(mark)  # again, for the budget less its kept inputs too
            outside = held + kept
        self.log.announce(made)
        if self.preview:  # autograd's saves outside graphs: eager code's
            plan = made if len(self.log.plans) > made else None
            return _marked(compiled, lambda: self.preview_runs.append(plan))
        if offload_safety.frees_host_copies(self.log.plans[made:], example_inputs):
            compiled = offload_safety.backward_once(compiled)
        if self.runs is not None and len(self.log.plans) > made:  # run more than planned for
            return self.runs.tracked(compiled, made, _dynamic(example_inputs))
        return compiled

    def _told(self, made: int, ended: str) -> None:
        """This graph's plans (none without a backward), from index ``made``, with where
        it ended and what the step holds outside it."""
        for i in range(made, len(self.log.plans)):
            # training: each earlier graph once; a preview counts the runs (preview.py)
            held = step_budget.held_before(self.log.plans[:i]) + self.eager_before.get(i, 0)
            self.log.update(i, graph_break=ended, held_bytes=held)

    def _compile(self, job: GraphJob) -> Any:
        if self.compiler == "inductor":
            return self._inductor(job)
        return self._eager(job)

    def _eager(self, job: GraphJob) -> Any:
        from ..runtime._torch_private import (
            aot_autograd,
            boxed_nop,
            functorch_config,
            select_decomp_table,
        )

        # torch's own nop compiler (aot_eager's): the graphs take their arguments boxed and
        # clear the list, so each saved value is freed after its last use in the backward.
        with functorch_config.patch(unlift_effect_tokens=True, enable_autograd_cache=False):
            return aot_autograd(
                fw_compiler=boxed_nop,
                bw_compiler=boxed_nop,
                decompositions=select_decomp_table(),
                partition_fn=functools.partial(
                    budget_partition,
                    settings=job.settings,
                    log=self.log,
                    outputs_held=job.outputs_held,
                    held_inputs=job.held_inputs,
                ),
            )(job.gm, job.example_inputs)

    def _inductor(self, job: GraphJob) -> Any:
        from ..runtime._torch_private import compile_fx, functorch_config

        if self.preview and self.code:  # the plans training makes, their code read
            return compile_within_peak(self.log, job._replace(code_only=True))
        if self.preview:  # a preview is the partitioner's plan: no cache may skip it
            held = job.held_inputs
            partitioner = InductorPartitioner(self, job.outputs_held, job.settings, held)
            patches = {"custom_partitioner_fn": partitioner, "fx_graph_cache": False}
            made = len(self.log.plans)
            with functorch_config.patch(enable_autograd_cache=False):
                compiled = compile_fx(
                    job.gm, job.example_inputs, inner_compile=run_uncompiled, config_patches=patches
                )
            for i in range(made, len(self.log.plans)):  # what training checks on the code
                check = training_check(job.settings, self.log.plans[i])
                if check:
                    self.log.update(i, training_check=check)
            return compiled
        return compile_within_peak(self.log, job)


_in_graph = threading.local()


def in_compiled_graph() -> bool:
    """True while a previewed graph runs (:func:`budget.compile.preview._trace` counts
    autograd's saves outside them as eager code's)."""
    return getattr(_in_graph, "depth", 0) > 0


def _dynamic(example_inputs: Sequence[Any]) -> bool:
    """Whether dynamo compiled the graph with symbolic sizes (dynamic shapes)."""
    return any(
        isinstance(x, torch.SymInt)
        or (isinstance(x, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in x.shape))
        for x in example_inputs
    )


def _marked(compiled: Callable[..., Any], ran: Callable[[], None]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        ran()
        _in_graph.depth = getattr(_in_graph, "depth", 0) + 1
        try:
            return compiled(*args)
        finally:
            _in_graph.depth -= 1

    run._boxed_call = getattr(compiled, "_boxed_call", False)  # type: ignore[attr-defined]
    return run


def root_error(e: BaseException) -> BaseException:
    """The error behind torch.compile's wrappers (BackendCompilerFailed and the like)."""
    seen: set[int] = set()
    while id(e) not in seen:
        seen.add(id(e))
        inner = getattr(e, "inner_exception", None) or e.__cause__
        if not isinstance(inner, BaseException):
            break
        e = inner
    return e


def backend(
    memory_budget: float | str | None = None,
    *,
    solver: str | None = None,
    estimator: str | None = None,
    compiler: str = "inductor",
    time_limit: float | None = None,
    on_plan: Callable[[Plan], None] | None = None,
    plan: PlanSource | None = None,
    peak_memory_budget: str | None = None,
    peak_search: str | None = None,
    offload: bool | None = None,
) -> BudgetBackend:
    """A ``torch.compile`` backend that saves activations within ``memory_budget``.

    Unset arguments come from :data:`budget.config`. ``memory_budget`` is a fraction in
    [0, 1] or a size such as ``"512MiB"``. Plans are available as ``backend.plans`` and
    are passed to ``on_plan`` as they are made.

    ``plan`` applies saved plans instead of solving: a plan file written by
    ``budget solve --json`` (or :func:`budget.save_plans`), a Plan, or a list of Plans.
    Each compiled graph gets the plan made for it (matched by graph hash, checked node
    by node); a graph with none raises :class:`budget.PlanMismatchError`.

    ``peak_memory_budget`` (a size such as ``"6GiB"``; default
    ``budget.config.peak_memory_budget``, None) bounds each graph's peak: each graph gets
    the plan with the least recompute whose peak is at or under it, among plans within
    the memory budget too (which defaults to 1.0: any plan); under Inductor the peak is
    that of the code Inductor generates for the plan (``plan.compiled_peak_bytes``;
    :mod:`budget.compile.inductor_compile`), with ``compiler="eager"`` the graphs'
    prediction. An unreachable peak raises :class:`budget.BudgetTooSmallError` naming the
    lowest peak found. With graph breaks the budget is the step's: each graph is planned
    for what the graphs compiled before it hold (:mod:`budget.compile.step_budget`), and a
    run the budget cannot hold is refused (:mod:`budget.compile.step_runs`). ``peak_search``
    (default ``budget.config.peak_search``, "grid"): "exact" also searches, with CP-SAT, the
    plans that recompute each value once, cheapest first, and proves the plan optimal among
    them when it can (:mod:`budget.compile.peak_search`; slower).

    ``offload`` (default ``budget.config.offload``, False): the solver may also keep saved
    values in host memory, copied back for the backward, where the link hides the copies
    or they are cheaper than recomputation (:mod:`budget.core.offload`); torch's offload
    pass moves them. A GPU plan only: on a CPU it raises :class:`budget.OffloadError`.
    """
    settings = resolve_settings(
        memory_budget=memory_budget,
        peak_memory_budget=peak_memory_budget,
        solver=solver,
        estimator=estimator,
        time_limit=time_limit,
        peak_search=peak_search,
        offload=offload,
        compiler=compiler,
        plan=plan,
    )
    return BudgetBackend(settings, PlanLog(on_plan=on_plan))
