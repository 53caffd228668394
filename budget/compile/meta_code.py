"""Inductor's Python wrapper code, made runnable on meta tensors.

The wrapper code (``CompiledFxGraph.source_code``) is the Python that runs a graph's
kernels: it allocates each buffer (``empty_strided_cpu``, ``empty_strided_cuda``), calls the
kernels and extern kernels, deletes buffers as they die. :func:`call_on_meta` loads it with
every generated kernel (C++ or Triton, called or launched with ``.run(..., stream=stream0)``)
replaced by a no-op and every allocation on the ``meta`` device, so that running its
``call`` allocates and frees as the real run would, in the same order, and computes
nothing. Nothing touches a GPU either: the code sees a ``torch`` whose CUDA device guard,
``set_device``, streams and synchronisation do nothing, and module imports that fail where
there is no CUDA or Triton bind stand-ins. Used by :mod:`budget.compile.compiled_peak`
(the step's peak) and :mod:`budget.compile.reuse` (line by line).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

import torch

from ..runtime._torch_private import _disable_current_modes
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


def _noop(*_: Any, **__: Any) -> None:
    return None


# Called with the arguments of every stand-in's call while set: a generated kernel's
# operands are checked there (compiled_peak: none may be memory an offload's wait freed).
STUB_CHECK: ContextVar[Callable[[tuple, dict], None] | None] = ContextVar(
    "budget_stub_check", default=None
)


class _Stub:
    """Stands for what the meta run must not run: a generated kernel (called, launched
    with ``.run(...)``, or a CUDA template's ``kernel.kernel_name(...)``), a module that
    does not import here (``triton``), a device guard, a stream. A call or an attribute
    gives another stand-in, which is also a context manager that does nothing; a call's
    arguments go to :data:`STUB_CHECK` where it is set."""

    def __call__(self, *args: Any, **kwargs: Any) -> _Stub:
        check = STUB_CHECK.get()
        if check is not None:
            check(args, kwargs)
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


# one statement of the module compiled, and the name an import binds (None: not an import)
Step = tuple[CodeType, str | None]


@functools.lru_cache(maxsize=8)
def _runnable(source: str) -> tuple[tuple[Step, ...], frozenset[str]]:
    """The wrapper module's statements, each compiled on its own, without its kernels'
    compilation and its benchmark harness, each import split into one statement per
    name; and the names of the generated kernels (bound to stand-ins when it runs).
    Kept for the last few sources: a peak search and the reuse check run the same code
    several times, and compiling a large ``call`` takes longer than running it."""
    kernels: set[str] = set()
    body: list[ast.stmt] = []
    for stmt in ast.parse(source).body:
        if isinstance(stmt, (ast.Assign, ast.Expr, ast.Delete)) and _uses_async_compile(stmt):
            # kernel = async_compile.triton(...), async_compile.wait(...), del async_compile
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
            body.extend(ast.copy_location(ast.Import(names=[a]), stmt) for a in stmt.names)
        elif isinstance(stmt, ast.ImportFrom):
            body.extend(
                ast.copy_location(ast.ImportFrom(stmt.module, [a], stmt.level), stmt)
                for a in stmt.names
            )
        else:
            body.append(stmt)
    steps = tuple((compile(ast.Module([stmt], []), _FILE, "exec"), _binds(stmt)) for stmt in body)
    return steps, frozenset(kernels)


def _binds(stmt: ast.stmt) -> str | None:
    """The name an import of one name binds (None: not such an import)."""
    if not isinstance(stmt, (ast.Import, ast.ImportFrom)) or stmt.names[0].name == "*":
        return None
    name = stmt.names[0].asname or stmt.names[0].name
    return name if isinstance(stmt, ast.ImportFrom) else name.split(".")[0]


def _uses_async_compile(stmt: ast.stmt) -> bool:
    """Whether ``stmt`` names ``async_compile`` (a kernel's source is one string constant:
    walked, not unparsed)."""
    return any(
        (isinstance(n, ast.Name) and n.id == "async_compile")
        or (isinstance(n, ast.Attribute) and n.attr == "async_compile")
        for n in ast.walk(stmt)
    )


def _load(steps: Sequence[Step]) -> dict[str, Any]:
    """The module's scope after running its ``steps``, one statement at a time. An
    import that fails here binds its name to a stand-in: Triton's modules and CUDA's
    stream getter where there is no Triton or CUDA, used only by the kernels and launches
    the run replaces. Any other failure: :class:`CompiledCodeError`."""
    scope: dict[str, Any] = {"__name__": "budget_compiled_peak"}
    for code, binds in steps:
        try:
            exec(code, scope)
        except ImportError as e:
            if binds is None:
                raise CompiledCodeError(f"Inductor's wrapper code did not load: {e}") from e
            scope[binds] = _Stub()
        except Exception as e:  # noqa: BLE001 - any failure means: unknown construct
            raise CompiledCodeError(f"Inductor's wrapper code did not load: {e}") from e
    return scope


def meta_tensor(val: Any) -> Any:
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


def host_tensor(
    size: Sequence[int], stride: Sequence[int] | None, dtype: torch.dtype | None = None, **_: Any
) -> torch.Tensor:
    """A meta tensor standing for one in host memory beside an accelerator's code (an
    offload's copy, ``empty_strided_cpu`` in CUDA code; ``stride`` None: contiguous): made
    with the run's counting mode off, so the device's count never sees it."""
    with _disable_current_modes():
        if stride is None:
            return torch.empty(size, dtype=dtype, device="meta")
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


def call_on_meta(graph: CompiledGraph) -> Callable[[list[Any]], Any]:
    if "load_pybinding" in graph.source or "CppWrapperCodeCache" in graph.source:
        # cpp_wrapper: call() is C++ that would run the kernels on meta tensors' pointers
        raise CompiledCodeError("C++ wrapper code (cpp_wrapper): only Python wrapper code is run")
    if "get_external_object_by_index" in graph.source:  # with stream1: ...
        raise CompiledCodeError("code on user streams: one stream's allocations are modelled")
    try:
        steps, kernels = _runnable(graph.source)
    except SyntaxError as e:
        raise CompiledCodeError(f"Inductor's wrapper code did not parse: {e}") from e
    scope = _load(steps)
    scope.update({name: _Stub() for name in kernels}, **_OVERRIDES)
    if graph.device != "cpu":  # the host's memory beside the device's: not counted
        scope.update(empty_strided_cpu=host_tensor, empty_strided_cpu_pinned=host_tensor)
    call = scope.get("call")
    code = getattr(getattr(call, "__func__", call), "__code__", None)
    if code is None or code.co_filename != _FILE:
        raise CompiledCodeError("Inductor's wrapper code has no Python call(): not run")
    return call
