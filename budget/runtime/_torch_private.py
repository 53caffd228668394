"""The seam to PyTorch's private APIs: the only module of budget that imports them.

budget reuses torch's own machinery (joint-graph node classification, fwd/bwd extraction,
the b=1.0 min-cut, RNG functionalisation, the compile stack) instead of re-deriving it.
Every ``torch._*`` and ``torch.utils._*`` module budget uses is imported here only (ruff's
TID251 bans them elsewhere); tests/test_torch_seam.py checks that each export is still the
torch object it names. Names ``import torch`` has loaded already are imported eagerly; the
compile stack on first use (PEP 562 ``__getattr__``), so importing this module, and with it
``budget.estimators``, loads none of it.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import torch

# Loaded with torch itself: free to import here.
from torch._C import _has_storage
from torch._C._autograd import _profiler_enabled  # a profiler is recording (measure.py)
from torch._dispatch.python import no_python_dispatcher
from torch._ops import HigherOrderOperator, OpOverload
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensorMode,
)
from torch.fx.experimental.proxy_tensor import is_sym_node
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_leaves, tree_map

from .maxflow import boykov_kolmogorov_cuts

# The compile stack, loaded on first use: exported name -> (module, attribute; None for
# the module itself).
_LAZY: dict[str, tuple[str, str | None]] = {
    # functorch's min-cut partitioner, which compile/partition.py mirrors step by step
    **{
        name: ("torch._functorch.partitioners", name)
        for name in (
            "NodeInfo",
            "_extract_fwd_bwd_modules",
            "choose_saved_values_set",
            "classify_nodes",
            "cleanup_recompute_tags",
            "default_partition",
            "force_save_bw_mutation_src",
            "force_save_collectives",
            "force_save_effectful_ops",
            "functionalize_rng_ops",
            "get_default_op_list",
            "has_recomputable_ops",
            "has_recomputable_rng_ops",
            "must_recompute",
            "raise_getitems",
            "reordering_to_mimic_autograd_engine",
            "thread_graphsafe_rng_from_hops",
        )
    },
    "functorch_config": ("torch._functorch.config", None),
    "fx_graph_cse": ("torch._functorch.compile_utils", "fx_graph_cse"),
    "is_opaque_node": ("torch._functorch._aot_autograd.graph_compile", "is_opaque_node"),
    # what each of a graph's outputs is for (compile/peak.py: input mutations)
    "InputMutationAOTOutput": (
        "torch._functorch._aot_autograd.descriptors",
        "InputMutationAOTOutput",
    ),
    "make_boxed_func": ("torch._functorch.aot_autograd", "make_boxed_func"),
    # dynamo: the backend and preview entry points
    "aot_autograd": ("torch._dynamo.backends.common", "aot_autograd"),
    "boxed_nop": ("torch._dynamo.backends.debugging", "boxed_nop"),
    "BackendCompilerFailed": ("torch._dynamo.exc", "BackendCompilerFailed"),
    "OptimizedModule": ("torch._dynamo.eval_frame", "OptimizedModule"),  # torch.compile(m)
    # torch's compile counters: compile/inductor_compile.py reads its AOTAutograd cache hits
    "counters": ("torch._dynamo.utils", "counters"),
    # Inductor: compile/backend.py, compile/inductor_compile.py
    "compile_fx": ("torch._inductor.compile_fx", "compile_fx"),
    "compile_fx_inner": ("torch._inductor.compile_fx", "compile_fx_inner"),
    "AsyncCompile": ("torch._inductor.async_compile", "AsyncCompile"),  # compile/kernels.py
    "select_decomp_table": ("torch._inductor.compile_fx", "select_decomp_table"),
    # Inductor's ordering edges (compile/schedule.py: recomputations kept where planned)
    "preserve_node_ordering": (
        "torch._inductor.fx_passes.control_dependencies",
        "preserve_node_ordering",
    ),
    "OutputCode": ("torch._inductor.output_code", "OutputCode"),
    **{  # Inductor's hooks for passes, partitioners, knapsacks, runtime estimates
        f"Custom{k}": ("torch._inductor.custom_graph_pass", f"Custom{k}")
        for k in ("GraphPass", "PartitionerFn", "KnapsackSolver", "RuntimeEstimator")
    },
    "GraphLowering": ("torch._inductor.graph", "GraphLowering"),  # compile/layout.py
    "inductor_config": ("torch._inductor.config", None),
    "inductor_virtualized": ("torch._inductor.virtualized", "V"),  # compile/fusion.py
    # budget/eager/: the tracing mode, parameter swapping, torch's test for compile tracing
    "TorchDispatchMode": ("torch.utils._python_dispatch", "TorchDispatchMode"),
    # torch's activation offloading pass (node meta "should_offload" -> offload/reload ops)
    **{
        name: ("torch._functorch._activation_offloading.activation_offloading", attr)
        for name, attr in (("enable_activation_offloading",) * 2, ("activation_offloading", None))
    },
    "reparametrize_module": ("torch.nn.utils.stateless", "_reparametrize_module"),
    "sac_is_compiling": ("torch.utils.checkpoint", "_is_compiling"),
    "CachingTorchDispatchMode": ("torch.utils.checkpoint", "_CachingTorchDispatchMode"),
    "FakeTensor": ("torch._subclasses.fake_tensor", "FakeTensor"),
    "detect_fake_mode": ("torch._guards", "detect_fake_mode"),  # compile/backend.py
    "disable_fake_tensor_cache": ("torch._subclasses.fake_tensor", "disable_fake_tensor_cache"),
    "VF": ("torch", "_VF"),  # the C++ ops torch.nn.utils.rnn calls (budget.eager.fake)
    "FunctionalTensor": ("torch._subclasses.functional_tensor", "FunctionalTensor"),
    "make_graph_module": ("torch.fx._lazy_graph_module", "_make_graph_module"),  # lazy code
    "lazy_graph_modules": ("torch.fx._lazy_graph_module", "_use_lazy_graph_module"),
}


def memory_events(prof: Any) -> list[tuple[int, int]]:
    """(start ns, signed bytes) of every CPU allocation and free a finished ``torch.profiler.
    profile(profile_memory=True)`` recorded, in its order (its private ``kineto_results``)."""
    cpu = torch.autograd.DeviceType.CPU
    return [
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == cpu
    ]


def input_mutation_outputs(output: Any) -> dict[int, Any]:
    """Positions, among an AOTAutograd graph's ``output`` node's outputs, of mutated inputs'
    new values, each with its input's descriptor (``meta["desc"]``; empty where none):
    AOTAutograd's runtime copies each into its input (BatchNorm's running statistics)."""
    descs = output.meta.get("desc")
    if not isinstance(descs, (list, tuple)):
        return {}
    kind = __getattr__("InputMutationAOTOutput")
    return {i: d.mutated_input for i, d in enumerate(descs) if isinstance(d, kind)}


@functools.cache
def _tangents_in_a_list() -> bool:
    """Whether AOTAutograd's compiled backward takes its gradients as one list, each freed
    at its last read (torch 2.13), or as arguments held until it returns (earlier)."""
    wrappers = importlib.import_module("torch._functorch._aot_autograd.runtime_wrappers")
    return hasattr(wrappers, "_codegen_compiled_backward")


def reference_counts(t: torch.Tensor) -> tuple[int, int]:
    """The C++ references to tensor ``t`` and to its storage (budget.eager.backward_paths)."""
    return t._use_count(), torch._C._storage_Use_Count(t.untyped_storage()._cdata)


def tangent_held(val: Any) -> bool:
    """Whether a compiled backward's tangent ``val`` (its fake value) lives until the
    backward returns: a 0-dim one (the loss's gradient, ``loss.backward()`` holds it); any
    other (another graph's gradient, zeros for an unused output) where it is an argument."""
    dims = getattr(val, "dim", None)
    return dims is None or dims() == 0 or not _tangents_in_a_list()


def __getattr__(name: str) -> Any:
    """Load a compile-stack export on first use (PEP 562), then keep it as a global."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def torch_saved_set(
    graph: Any, node_info: Any, memory_budget: float, cuts: dict[Any, Any]
) -> list[Any]:
    """torch's saved set at ``memory_budget`` (``choose_saved_values_set``, with
    :func:`boykov_kolmogorov_cuts`). What does not depend on the budget is computed once
    per joint graph and kept in ``cuts`` (the caller's, one per graph) for a sweep's
    fractions: its min-cuts (one per set of ban options; the knapsack's, by the nodes it
    lets be recomputed) and each node's runtime estimate."""
    import dataclasses

    from torch._functorch import partitioners

    solve, estimate = partitioners.solve_min_cut, partitioners.estimate_runtime

    def remembered(joint_graph: Any, info: Any, options: Any, dont_ban: Any = None) -> Any:
        key = (id(joint_graph), dataclasses.astuple(options), frozenset(dont_ban or ()))
        if key not in cuts:
            cuts[key] = solve(joint_graph, info, options, dont_ban)
        saved, banned = cuts[key]
        return list(saved), banned

    def estimated(node: Any) -> float:
        key = ("runtime", partitioners.config.activation_memory_budget_runtime_estimator, node)
        if key not in cuts:
            cuts[key] = estimate(node)
        return cuts[key]

    partitioners.solve_min_cut, partitioners.estimate_runtime = remembered, estimated
    try:
        with boykov_kolmogorov_cuts():
            return partitioners.choose_saved_values_set(
                graph, node_info, memory_budget=memory_budget
            )
    finally:
        partitioners.solve_min_cut, partitioners.estimate_runtime = solve, estimate


def frame_code() -> Any:
    """The code object of the frame dynamo is compiling now (a ``torch_dynamo_resume_in_...``
    function after a graph break), None outside a dynamo compile."""
    from torch._guards import TracingContext

    codes = getattr(TracingContext.try_get(), "traced_code", None) or []
    return codes[0] if codes else None


_COMPILED_CALL = "compile_wrapper"  # torch.compile's wrapper of a call (torch 2.11-2.13)
_EVAL_FRAME = os.path.join("_dynamo", "eval_frame.py")
_INSIDE = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__)))


def compiled_call() -> tuple[tuple, bool] | None:
    """The ``(args, kwargs)`` given to the ``torch.compile``'d call dynamo compiles a frame
    of now (the outermost wrapper on the stack), and whether the wrapper calls that frame
    itself (not user code running between graphs); None where no wrapper is found."""
    found, direct, first = None, False, True
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == _COMPILED_CALL and code.co_filename.endswith(_EVAL_FRAME):
            found, direct, first = frame, direct or first, False
        elif not code.co_filename.startswith(_INSIDE):
            first = False  # user code called the frame
        frame = frame.f_back
    args, kwargs = (None, None) if found is None else map(found.f_locals.get, ("args", "kwargs"))
    ok = isinstance(args, tuple) and isinstance(kwargs, dict)
    return ((args, kwargs), direct) if ok else None


def graph_args(gm: torch.fx.GraphModule) -> list[tuple[Any, bool]]:
    """For each input of dynamo's graph ``gm``: the value behind it (None where unknown),
    and whether dynamo makes it at every call (a Python number the graph takes as a
    tensor: a float attribute under dynamic shapes, ``.item()``'s value after a break)."""
    out = []
    for node in gm.graph.find_nodes(op="placeholder"):
        arg = node.meta.get("grapharg")
        try:
            value = None if arg is None else arg.example
        except Exception:  # an example dynamo let go of
            value = None
        out.append((value, bool(getattr(arg, "pass_arg_as_tensor", False))))
    return out


@contextlib.contextmanager
def sizes_seen_kept() -> Iterator[None]:
    """Dynamo compiles in the block as a training compile would now (automatic dynamic
    shapes, from the sizes it has seen), and those are as they were after it, on disk too
    (its profile, ``automatic_dynamic_local_pgo``, is not written)."""
    from torch._dynamo import config, pgo

    before = copy.deepcopy(pgo.get_code_state())  # read from its profile, as training would
    try:
        with config.patch(automatic_dynamic_local_pgo=False, automatic_dynamic_remote_pgo=False):
            yield
    finally:
        pgo._CODE_STATE = before


def fake_mode_active() -> bool:
    """Whether a FakeTensorMode is on the dispatch stack (compile-time tracing runs ops)."""
    return torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None


def in_backward() -> bool:
    """Whether this runs inside autograd's backward (an op a backward node calls)."""
    return torch._C._current_autograd_node() is not None


def in_compiled_step() -> bool:
    """Whether this Python code runs inside a ``torch.compile``'d function (after a graph
    break, in eager Python: the frames it calls are compiled as they start)."""
    return _compiled_step_probe()()


@functools.cache
def _compiled_step_probe() -> Any:
    """The question, never traced (dynamo cannot); made on first use, not loading dynamo."""

    @torch.compiler.disable(recursive=False)
    def probe() -> bool:
        return torch._C._dynamo.eval_frame.get_eval_frame_callback() not in (None, False)

    return probe


def compiled_versions(code: Any) -> int:
    """How many compiled versions of ``code`` dynamo holds (its cache entries)."""
    return len(torch._C._dynamo.eval_frame._debug_get_cache_entry_list(code))


def forget_compiled(code: Any) -> None:
    """Drop dynamo's compiled versions of ``code`` (none counts towards its recompile_limit)."""
    torch._dynamo.reset_code(code)


@contextlib.contextmanager
def wrapper_reuse(mark: str, rewrite: Any) -> Iterator[None]:
    """While Inductor compiles: every buffer reuse it can make is made (its memory estimate
    not asked), each reused buffer's death is written as the comment ``mark`` + its name,
    and each graph's Python wrapper code is replaced by ``rewrite(source, device_type)``."""
    from torch._inductor.codegen import wrapper as W
    from torch._inductor.virtualized import V

    saved = (W.AllocateLine.should_reuse_buffer, W.FreeIfNotReusedLine.codegen)
    generate = W.PythonWrapperCodegen.generate

    def codegen(self: Any, code: Any) -> None:
        if self.is_reused and not self.comm_buffer:
            code.writeline(f"{mark}{self.node.get_name()}")
        else:
            saved[1](self, code)

    def generated(self: Any, is_inference: bool) -> Any:
        result = generate(self, is_inference)  # (wrapper code, kernel code), each with
        code = result[0]  # its line map (a dataclass, a named tuple), or a str (older)
        if V.graph.cpp_wrapper:
            return result
        if isinstance(code, str):
            return (rewrite(code, V.graph.device_type), *result[1:])
        new = rewrite(code.value, V.graph.device_type)
        if hasattr(code, "_replace"):
            return (code._replace(value=new), *result[1:])
        code.value = new
        return result

    def every(self: Any, free_line: Any, size: int) -> bool:
        return not V.graph.cpp_wrapper or saved[0](self, free_line, size)  # C++: not rewritten

    W.AllocateLine.should_reuse_buffer = every
    W.FreeIfNotReusedLine.codegen, W.PythonWrapperCodegen.generate = codegen, generated
    try:
        yield
    finally:
        W.AllocateLine.should_reuse_buffer, W.FreeIfNotReusedLine.codegen = saved
        W.PythonWrapperCodegen.generate = generate


def nodes_prefer_channels_last(graph: Any) -> set[Any]:
    """The nodes of ``graph`` (an fx.Graph) Inductor lays out channels-last under layout
    optimisation (convolutions' ancestors through any op but ``bmm``, their descendants up
    to the last convolution): ``GraphLowering.find_nodes_prefer_channels_last``."""
    from types import SimpleNamespace

    from torch._inductor.graph import GraphLowering

    holder = SimpleNamespace(module=SimpleNamespace(graph=graph))
    return set(GraphLowering.find_nodes_prefer_channels_last(holder))  # type: ignore[arg-type]


__all__ = [
    # budget's own
    "torch_saved_set",
    "compiled_versions",
    "in_compiled_step",
    "fake_mode_active",
    "forget_compiled",
    "frame_code",
    "input_mutation_outputs",
    "memory_events",
    "nodes_prefer_channels_last",
    "reference_counts",
    "wrapper_reuse",
    # loaded with torch
    "DataDependentOutputException",
    "DynamicOutputShapeException",
    "compiled_call",
    "in_backward",
    "sizes_seen_kept",
    "graph_args",
    "FakeTensorMode",
    "HigherOrderOperator",
    "OpOverload",
    "_disable_current_modes",
    "_has_storage",
    "_profiler_enabled",
    "is_sym_node",
    "no_python_dispatcher",
    "tree_leaves",
    "tree_map",
    *_LAZY,  # the compile stack, loaded on first use
]
