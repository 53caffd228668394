"""The peak of a step as Inductor compiled it: its generated code run on meta tensors.

:mod:`budget.compile.peak` predicts a step's peak from the partitioned graphs, in their
order. Inductor does not run them in that order: its scheduler fuses nodes from different
places of a graph into one kernel (all their outputs allocated together) and reorders
kernels, and it reuses buffers. On small transformers that put the measured peak above
the graph model's (T5 by 16%, bench/real_model_peaks.py), so a peak budget checked on
the graphs alone could be missed.

Inductor's CPU wrapper code (``CompiledFxGraph.source_code``, the Python that runs the
kernels) says exactly what is allocated and when: ``empty_strided_cpu`` for each buffer,
``del`` when it dies, reuse by renaming, views by ``reinterpret_tensor``, and calls of
extern kernels (matmuls into buffers, fallback ATen ops that allocate their outputs).
This module runs that code with every generated kernel replaced by a no-op and every
tensor on the ``meta`` device: the allocations and frees happen as they would, in the
same order (CPython frees a tensor when its last reference goes, as in the real run),
and nothing is computed. Live bytes are counted as for the eager planner's run on fake
tensors (:class:`budget.compile.live.LiveStorages`): each storage from the op that makes
it until its last tensor is gone, and what an extern kernel allocates inside itself (CPU
convolutions, attention) at its call (:func:`budget.estimators.memory.workspace_bytes`).

The step is the forward's code, then the backward's: the forward's inputs are resident
(not counted), its outputs (the user's loss, held to the end, and the saved values) are
handed over, the loss's gradient is allocated as the backward starts and held to its end
(autograd's engine keeps the gradients it passes a node until the node returns, so the
code's ``del tangents_1`` frees nothing), and the gradients it returns are held to the
end. This is the accounting of :mod:`budget.compile.peak`,
over the code that really runs. CPU wrapper code only (on CUDA the wrapper launches
Triton kernels from another module, and allocates with the caching allocator).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from ..estimators.values import hint
from .live import LiveStorages


class CompiledCodeError(RuntimeError):
    """Inductor's generated code could not be run on meta tensors (a construct this
    module does not know): the compiled peak is unknown."""


@dataclass
class CompiledGraph:
    """One compiled graph: its wrapper code, and its fx graph's placeholder names (the
    code's argument order) and output names (None where an output is not a node)."""

    source: str
    inputs: list[str]
    outputs: list[str | None]
    values: dict[str, Any] = field(default_factory=dict)  # placeholder -> meta["val"]


def describe(gm: fx.GraphModule, source: str = "") -> CompiledGraph:
    """The :class:`CompiledGraph` of ``gm`` compiled to ``source``. Take it before
    Inductor compiles ``gm``: its passes edit the graph in place (a saved output can be
    replaced by its source node), and the code keeps the signature it had."""
    inputs, values = [], {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            inputs.append(node.name)
            values[node.name] = node.meta.get("val")
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    args = out.args[0] if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    outputs = [a.name if isinstance(a, fx.Node) else None for a in args]
    return CompiledGraph(source, inputs, outputs, values)


def _noop(*_: Any, **__: Any) -> None:
    return None


def _runnable(source: str) -> tuple[ast.Module, set[str]]:
    """The wrapper module without its kernels' compilation and its benchmark harness, and
    the names of the generated kernels (bound to no-ops when it runs)."""
    tree = ast.parse(source)
    kernels: set[str] = set()
    body = []
    for stmt in tree.body:
        text = ast.unparse(stmt) if isinstance(stmt, (ast.Assign, ast.Expr, ast.Delete)) else ""
        if "async_compile" in text:
            if isinstance(stmt, ast.Assign):
                kernels.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
            continue
        if isinstance(stmt, ast.If):  # if __name__ == "__main__": the benchmark
            continue
        if isinstance(stmt, ast.FunctionDef) and stmt.name in (
            "get_args",
            "benchmark_compiled_module",
        ):
            continue
        body.append(stmt)
    tree.body = body
    return tree, kernels


def _meta(val: Any) -> Any:
    """A meta tensor with ``val``'s sizes, strides and dtype (a fresh storage)."""
    if not isinstance(val, torch.Tensor):
        return hint(val) if isinstance(val, torch.SymInt) else val
    size = [hint(s) for s in val.shape]
    stride = [hint(s) for s in val.stride()]
    return torch.empty_strided(size, stride, dtype=val.dtype, device="meta")


def _call(graph: CompiledGraph) -> Callable[[list[Any]], Any]:
    if "load_pybinding" in graph.source or "CppWrapperCodeCache" in graph.source:
        # cpp_wrapper: call() is C++ that would run the kernels on meta tensors' pointers
        raise CompiledCodeError("C++ wrapper code (cpp_wrapper): only Python wrapper code is run")
    try:
        tree, kernels = _runnable(graph.source)
    except SyntaxError as e:
        raise CompiledCodeError(f"Inductor's wrapper code did not parse: {e}") from e
    scope: dict[str, Any] = {"__name__": "budget_compiled_peak"}
    try:
        exec(compile(tree, "<inductor wrapper>", "exec"), scope)
    except Exception as e:  # noqa: BLE001 - any failure means: unknown construct
        raise CompiledCodeError(f"Inductor's wrapper code did not load: {e}") from e
    for name in kernels:
        scope[name] = _noop

    def empty(size: Sequence[int], stride: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        return torch.empty_strided(size, stride, dtype=dtype, device="meta")

    def reinterpret(t: torch.Tensor, size: Sequence[int], stride: Sequence[int], offset: int = 0):
        return torch.as_strided(t, size, stride, offset)

    def device_code(*_: Any, **__: Any) -> None:
        raise CompiledCodeError("not CPU code: only Inductor's CPU wrapper code is run")

    scope.update(
        empty_strided_cuda=device_code,
        empty_strided_xpu=device_code,
        empty_strided_mtia=device_code,
        empty_strided_cpu=empty,
        empty_strided_cpu_pinned=empty,
        reinterpret_tensor=reinterpret,
        assert_size_stride=_noop,
        assert_alignment=_noop,
        run_intermediate_hooks=_noop,
    )
    call = scope.get("call")
    code = getattr(getattr(call, "__func__", call), "__code__", None)
    if code is None or code.co_filename != "<inductor wrapper>":
        raise CompiledCodeError("Inductor's wrapper code has no Python call(): not run")
    return call


def compiled_peak(fw: CompiledGraph, bw: CompiledGraph | None, *, num_user_outputs: int = 1) -> int:
    """The peak bytes of running the compiled forward then backward (module docstring),
    above what was resident before the step. The forward's first ``num_user_outputs``
    outputs (the loss) and those the backward does not take are held to the end of the
    step. Raises :class:`CompiledCodeError` when the code cannot be run on meta tensors."""
    live = LiveStorages(device="cpu")  # the code runs on meta tensors for CPU ones
    fw_call = _call(fw)
    bw_call = _call(bw) if bw is not None else None
    inputs = {name: _meta(fw.values[name]) for name in fw.inputs}  # resident: made outside
    with live:
        try:
            outs = fw_call([inputs[name] for name in fw.inputs])
        except Exception as e:  # noqa: BLE001
            raise CompiledCodeError(f"Inductor's forward code failed on meta tensors: {e}") from e
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        taken = set(bw.inputs) if bw is not None else set()
        held = [
            v
            for i, (name, v) in enumerate(zip(fw.outputs, outs, strict=False))
            if i < num_user_outputs or name not in taken
        ]
        handed = {name: v for name, v in zip(fw.outputs, outs, strict=False) if name is not None}
        del outs
        if bw_call is not None and bw is not None:
            args, tangents = [], []
            for name in bw.inputs:
                if name in handed:
                    args.append(handed[name])
                elif name in inputs:
                    args.append(inputs[name])
                elif name.startswith("tangents"):  # autograd makes it as the backward starts
                    tangents.append(_meta(bw.values[name]))  # made in the mode: counted
                    args.append(tangents[-1])
                else:
                    raise CompiledCodeError(
                        f"the backward takes {name!r}, which the forward does not hand over"
                    )
            handed.clear()
            try:
                grads = bw_call(args)
            except Exception as e:  # noqa: BLE001
                raise CompiledCodeError(
                    f"Inductor's backward code failed on meta tensors: {e}"
                ) from e
            del args, grads, tangents  # autograd holds the tangents until the backward returns
        del held
    return live.peak


class CodeCapture:
    """An Inductor ``inner_compile`` that compiles as Inductor does and keeps each graph's
    wrapper code: :meth:`peak` is then the compiled step's peak (the backward must be
    compiled with the forward: ``force_non_lazy_backward_lowering``)."""

    def __init__(self) -> None:
        self.graphs: dict[str, CompiledGraph] = {}

    def __call__(self, gm: fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Any:
        from ._torch_private import compile_fx_inner

        graph = describe(gm)  # before Inductor's passes edit gm
        compiled = compile_fx_inner(gm, example_inputs, **kwargs)
        source = getattr(compiled, "source_code", None)
        if isinstance(source, str):
            graph.source = source
            self.graphs["backward" if kwargs.get("is_backward") else "forward"] = graph
        return compiled

    def peak(self, num_user_outputs: int = 1) -> int | None:
        """The compiled step's peak; None when a graph's code was not seen (a compile cache
        skipped it) or could not be run on meta tensors."""
        fw, bw = self.graphs.get("forward"), self.graphs.get("backward")
        if fw is None or bw is None:
            return None
        try:
            return compiled_peak(fw, bw, num_user_outputs=num_user_outputs)
        except Exception:  # noqa: BLE001 - an unknown construct: the peak is unknown
            return None
