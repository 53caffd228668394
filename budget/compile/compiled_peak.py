"""The peak of a step as Inductor compiled it: its generated code run on meta tensors.

:mod:`budget.compile.peak` predicts a step's peak from the partitioned graphs, in their
order. Inductor does not run them in that order: its scheduler fuses nodes from different
places of a graph into one kernel (all their outputs allocated together) and reorders
kernels. Where that puts the measured peak above the graph model's (BERT:
bench/real_model_peaks.py), a peak budget checked on the graphs alone could be missed.

Inductor's Python wrapper code (``CompiledFxGraph.source_code``, the Python that runs the
kernels), for CPU and CUDA alike, says exactly what is allocated and when:
``empty_strided_cpu`` or ``empty_strided_cuda`` for each buffer, ``del`` when it dies,
reuse by renaming, views by ``reinterpret_tensor`` and ``alloc_from_pool``, and calls of
extern kernels (matmuls into buffers, fallback ATen ops that allocate their outputs:
attention on CUDA), whose outputs' strides its ``assert_size_stride`` states (the meta
run gives them to its tensors: a meta function may lay an output out otherwise than the
device's kernel, and a later call's workspace depends on its operands' layout). This module runs that code with every generated kernel (C++ or
Triton, called or launched with ``.run(..., stream=stream0)``) replaced by a no-op and
every tensor on the ``meta`` device: the allocations and frees happen as they would, in
the same order (CPython frees a tensor when its last reference goes, as in the real
run), and nothing is computed. Nothing touches a GPU either: the code sees a ``torch``
whose CUDA device guard, ``set_device``, streams and synchronisation do nothing, and
module imports that fail where there is no CUDA or Triton (``import triton``, ``from
torch._C import _cuda_getCurrentRawStream``) bind stand-ins; an op that makes a tensor
on a device other than meta or the CPU is an error. Live bytes are counted as for the
eager planner's run on fake tensors (:class:`budget.estimators.live.LiveStorages`): each
storage from the op that makes it until its last tensor is gone, and what an extern
kernel allocates inside itself at its call (:func:`budget.estimators.memory.workspace_bytes`:
CPU convolutions and attention; on CUDA the attention backwards and convolutions, measured
on the GPU). The device is the graph's (:attr:`CompiledGraph.device`, from its inputs).

The step is the forward's code, then the backward's: the forward's inputs are resident
(not counted), its outputs (the user's loss, held to the end, and the saved values) are
handed over (the user's outputs of a graph that ends at a graph break are not held),
the tangents are allocated as the backward starts, the loss's gradient held to its end
(``backward()`` keeps it, so the code's ``del tangents_1`` frees nothing) and any other
freed where the code drops it (:func:`budget.runtime._torch_private.tangent_held`), and
the gradients it returns are held to the end. This is the accounting of
:mod:`budget.compile.peak`, over the code that really
runs. On CUDA it is the bytes requested from the caching allocator (which rounds blocks
up to 512 bytes and caches freed ones). Not run: C++ wrapper code (``cpp_wrapper``), and
CUDA code on user streams.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from ..estimators.live import LiveStorages
from ..runtime._torch_private import tangent_held
from ..runtime.values import hint


class CompiledCodeError(RuntimeError):
    """Inductor's generated code could not be run on meta tensors (a construct this
    module does not know): the compiled peak is unknown."""


@dataclass
class CompiledGraph:
    """One compiled graph: its wrapper code, and its fx graph's placeholder names (the
    code's argument order) and output names (None where an output is not a node).
    ``device``: where it runs (``"cpu"``, ``"cuda"``), which says how its ops' workspace
    is counted; :func:`describe` reads it off the placeholders."""

    source: str
    inputs: list[str]
    outputs: list[str | None]
    values: dict[str, Any] = field(default_factory=dict)  # placeholder -> meta["val"]
    device: str = "cpu"


def _device(values: dict[str, Any]) -> str:
    """The device of a graph's tensor inputs: the first that is not the CPU (a CUDA
    graph can take CPU scalars), else ``"cpu"``."""
    types = [v.device.type for v in values.values() if isinstance(v, torch.Tensor)]
    return next((t for t in types if t != "cpu"), "cpu")


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
    return CompiledGraph(source, inputs, outputs, values, _device(values))


def _noop(*_: Any, **__: Any) -> None:
    return None


class _Stub:
    """Stands for what the meta run must not run: a generated kernel (called, launched
    with ``.run(...)``, or a CUDA template's ``kernel.kernel_name(...)``), a module that
    does not import here (``triton``), a device guard, a stream. A call or an attribute
    gives another stand-in, which is also a context manager that does nothing."""

    def __call__(self, *_: Any, **__: Any) -> _Stub:
        return self

    def __getattr__(self, name: str) -> _Stub:
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __enter__(self) -> _Stub:
        return self

    def __exit__(self, *_: Any) -> None:
        return None


class _Cuda:
    """``torch.cuda`` as the wrapper code sees it: what would set up or wait on a GPU
    (``with torch.cuda._DeviceGuard(0):``, ``torch.cuda.set_device(0)``, streams,
    ``synchronize()``, NVTX ranges) does nothing; the rest is torch.cuda's."""

    STUBBED = frozenset(
        {"_DeviceGuard", "device", "set_device", "synchronize", "current_stream", "stream"}
        | {"Stream", "Event", "set_stream", "nvtx"}
    )

    def __getattr__(self, name: str) -> Any:
        return _Stub() if name in self.STUBBED else getattr(torch.cuda, name)


class _Torch:
    """``torch`` as the wrapper code sees it: its ``cuda`` is :class:`_Cuda` and its
    ``Event`` (a device-to-host copy's) a stand-in; the rest is torch's."""

    cuda = _Cuda()
    Event = _Stub()

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


_FILE = "<inductor wrapper>"


def _runnable(source: str) -> tuple[list[ast.stmt], set[str]]:
    """The wrapper module's statements without its kernels' compilation and its
    benchmark harness, each import split into one statement per name; and the names of
    the generated kernels (bound to stand-ins when it runs)."""
    kernels: set[str] = set()
    body: list[ast.stmt] = []
    for stmt in ast.parse(source).body:
        text = ast.unparse(stmt) if isinstance(stmt, (ast.Assign, ast.Expr, ast.Delete)) else ""
        if "async_compile" in text:  # kernel = async_compile.triton(...), .wait(), del
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
        if isinstance(stmt, ast.Import):
            body.extend(ast.Import(names=[a]) for a in stmt.names)
        elif isinstance(stmt, ast.ImportFrom):
            body.extend(ast.ImportFrom(stmt.module, [a], stmt.level) for a in stmt.names)
        else:
            body.append(stmt)
    return body, kernels


def _load(body: list[ast.stmt]) -> dict[str, Any]:
    """The module's scope after running ``body``, one statement at a time. An import
    that fails here binds its name to a stand-in: Triton's modules and CUDA's stream
    getter where there is no Triton or CUDA, used only by the kernels and launches the
    run replaces. Any other failure: :class:`CompiledCodeError`."""
    scope: dict[str, Any] = {"__name__": "budget_compiled_peak"}
    for stmt in body:
        code = compile(ast.fix_missing_locations(ast.Module([stmt], [])), _FILE, "exec")
        try:
            exec(code, scope)
        except ImportError as e:
            if not isinstance(stmt, (ast.Import, ast.ImportFrom)) or stmt.names[0].name == "*":
                raise CompiledCodeError(f"Inductor's wrapper code did not load: {e}") from e
            alias = stmt.names[0]
            name = alias.asname or alias.name
            scope[name if isinstance(stmt, ast.ImportFrom) else name.split(".")[0]] = _Stub()
        except Exception as e:  # noqa: BLE001 - any failure means: unknown construct
            raise CompiledCodeError(f"Inductor's wrapper code did not load: {e}") from e
    return scope


def _meta(val: Any) -> Any:
    """A meta tensor with ``val``'s sizes, strides and dtype (a fresh storage)."""
    if not isinstance(val, torch.Tensor):
        return hint(val) if isinstance(val, torch.SymInt) else val
    size = [hint(s) for s in val.shape]
    stride = [hint(s) for s in val.stride()]
    return torch.empty_strided(size, stride, dtype=val.dtype, device="meta")


def _empty(
    size: Sequence[int],
    stride: Sequence[int],
    dtype: torch.dtype | None = None,
    *,
    device: Any = None,
) -> torch.Tensor:
    """``empty_strided_cpu``, ``empty_strided_cuda`` (...) and ``empty_strided``: on meta."""
    return torch.empty_strided(size, stride, dtype=dtype, device="meta")


def _reinterpret(t: torch.Tensor, size: Sequence[int], stride: Sequence[int], offset: int = 0):
    return torch.as_strided(t, size, stride, offset)


def _take_asserted_strides(t: Any, size: Sequence[int], stride: Sequence[int], *_: Any) -> None:
    """``assert_size_stride``: the strides Inductor asserts a tensor has, given to the meta
    tensor standing for it. An extern kernel's meta function can lay its output out
    otherwise than the device's kernel does (a CPU convolution given a channels-last weight
    returns channels-last output from oneDNN, contiguous from its meta function), and the
    code's later calls, with their workspace, depend on their operands' layout. The real
    run asserts these strides, so they are the ones it has; a tensor whose sizes differ,
    or whose storage the strides would overrun, is left as it is."""
    if not isinstance(t, torch.Tensor) or t.device.type != "meta" or list(t.shape) != list(size):
        return
    if list(t.stride()) == list(stride) or t.numel() == 0:
        return
    extent = t.storage_offset() + 1 + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
    if extent * t.element_size() <= t.untyped_storage().nbytes():
        t.as_strided_(size, stride)


# What the module's own names are replaced by once it has loaded (it assigns some of them,
# empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda: these win).
_OVERRIDES: dict[str, Any] = {
    "torch": _Torch(),
    "device": lambda *_, **__: torch.device("meta"),  # device(type='cuda', index=0)
    "get_raw_stream": lambda *_: 0,
    "reinterpret_tensor": _reinterpret,
    "assert_size_stride": _take_asserted_strides,
    "assert_alignment": _noop,
    "run_intermediate_hooks": _noop,
    "start_graph": _noop,
    "end_graph": _noop,
    **{
        f"empty_strided{device}": _empty
        for device in ("", "_cpu", "_cpu_pinned", "_cuda", "_xpu", "_mtia")
    },
    "empty_strided_p2p": lambda size, stride, dtype, *_: _empty(size, stride, dtype),
}


def _call(graph: CompiledGraph) -> Callable[[list[Any]], Any]:
    if "load_pybinding" in graph.source or "CppWrapperCodeCache" in graph.source:
        # cpp_wrapper: call() is C++ that would run the kernels on meta tensors' pointers
        raise CompiledCodeError("C++ wrapper code (cpp_wrapper): only Python wrapper code is run")
    if "get_external_object_by_index" in graph.source:  # with stream1: ...
        raise CompiledCodeError("code on user streams: one stream's allocations are modelled")
    try:
        body, kernels = _runnable(graph.source)
    except SyntaxError as e:
        raise CompiledCodeError(f"Inductor's wrapper code did not parse: {e}") from e
    scope = _load(body)
    scope.update({name: _Stub() for name in kernels}, **_OVERRIDES)
    call = scope.get("call")
    code = getattr(getattr(call, "__func__", call), "__code__", None)
    if code is None or code.co_filename != _FILE:
        raise CompiledCodeError("Inductor's wrapper code has no Python call(): not run")
    return call


class _MetaRun(LiveStorages):
    """:class:`LiveStorages` that refuses a tensor made off the meta device (but on the
    CPU): the code would have allocated on a device, which the run must not do."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = super().__torch_dispatch__(func, types, args, kwargs)
        for t in out if isinstance(out, (list, tuple)) else [out]:
            if isinstance(t, torch.Tensor) and t.device.type not in ("meta", "cpu"):
                raise CompiledCodeError(f"{func} made a tensor on {t.device}, not meta")
        return out


def compiled_peak(
    fw: CompiledGraph,
    bw: CompiledGraph | None,
    *,
    num_user_outputs: int = 1,
    outputs_held: bool = True,
    measure_workspace: bool = True,
) -> int:
    """The peak bytes of running the compiled forward then backward (module docstring),
    above what was resident before the step. The forward's first ``num_user_outputs``
    outputs (the loss; where ``outputs_held``) and the others the backward does not take
    are held to the end of the step. Raises :class:`CompiledCodeError` when the code cannot be run on meta tensors."""
    # meta tensors standing in for the device's
    live = _MetaRun(device=fw.device, measure_workspace=measure_workspace)
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
            if (outputs_held if i < num_user_outputs else name not in taken)
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
                    tangent = _meta(bw.values[name])  # made in the mode: counted
                    if tangent_held(bw.values[name]):
                        tangents.append(tangent)
                    args.append(tangent)
                    del tangent
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
            del args, grads, tangents  # the held tangents: until the backward returns
        del held
    return live.peak


class CodeCapture:
    """An Inductor ``inner_compile`` that compiles as Inductor does and keeps each graph's
    wrapper code (CPU or CUDA): :meth:`peak` is then the compiled step's peak (the
    backward must be compiled with the forward: ``force_non_lazy_backward_lowering``)."""

    def __init__(self) -> None:
        self.graphs: dict[str, CompiledGraph] = {}

    def __call__(self, gm: fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Any:
        from ..runtime._torch_private import compile_fx_inner

        graph = describe(gm)  # before Inductor's passes edit gm
        compiled = compile_fx_inner(gm, example_inputs, **kwargs)
        source = getattr(compiled, "source_code", None)
        if isinstance(source, str):
            graph.source = source
            self.graphs["backward" if kwargs.get("is_backward") else "forward"] = graph
        return compiled

    def peak(
        self,
        num_user_outputs: int = 1,
        *,
        outputs_held: bool = True,
        measure_workspace: bool = True,
    ) -> int | None:
        """The compiled step's peak; None when a graph's code was not seen (a compile cache
        skipped it) or could not be run on meta tensors (C++ wrapper code, user streams,
        a construct this module does not know)."""
        fw, bw = self.graphs.get("forward"), self.graphs.get("backward")
        if fw is None or bw is None:
            return None
        try:
            return compiled_peak(
                fw,
                bw,
                num_user_outputs=num_user_outputs,
                outputs_held=outputs_held,
                measure_workspace=measure_workspace,
            )
        except Exception:  # noqa: BLE001 - an unknown construct: the peak is unknown
            return None
