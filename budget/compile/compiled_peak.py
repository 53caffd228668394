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
device's kernel, and a later call's workspace depends on its operands' layout). This
module runs that code on meta tensors (:mod:`budget.compile.meta_code`): the allocations
and frees happen as they would, in the same order (CPython frees a tensor when its last
reference goes, as in the real run), nothing is computed and nothing touches a GPU; an op
that makes a tensor on a device other than meta or the CPU is an error. Live bytes are
counted as for the eager planner's run on fake tensors
(:class:`budget.estimators.live.LiveStorages`): each storage from the op that makes it
until its last tensor is gone, and what an extern
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

import contextlib
import sys
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any

import torch
import torch.fx as fx

from ..estimators.live import LiveStorages
from ..runtime import _torch_private as T
from ..runtime._torch_private import tangent_held
from ..runtime.values import generator_state_bytes, op_tensors
from .meta_code import (
    STUB_CHECK,
    CompiledCodeError,
    CompiledGraph,
    call_on_meta,
    host_tensor,
    meta_tensor,
)
from .pins import pinning

# The graph Inductor is compiling under a CodeCapture (its code not yet known) and, for a
# backward, its forward as compiled: compile/reuse.py runs the code as it is generated.
COMPILING: ContextVar[tuple[CompiledGraph, CompiledGraph | None] | None] = ContextVar(
    "budget_compiling", default=None
)


@contextlib.contextmanager
def _compiling(graph: CompiledGraph, forward: CompiledGraph | None) -> Iterator[None]:
    token = COMPILING.set((graph, forward))
    try:
        yield
    finally:
        COMPILING.reset(token)


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


class _MetaRun(LiveStorages):
    """:class:`LiveStorages` that refuses a tensor made off the meta device (but on the
    CPU): the code would have allocated on a device, which the run must not do. The
    higher-order ops with which torch replays a random op's generator state in a
    recomputation (``run_and_save_rng_state``, ``run_with_rng_state``: a random op in a
    checkpointed region, CPU attention among them) run their op; the state saved is the
    CPU generator's on the CPU, and held in host memory on an accelerator (not counted).

    torch's asynchronous offload ops (``ao::offload``, ``ao::reload``, ``ao::wait_tensor``:
    a CUDA graph's copies on a side stream) do on meta tensors what they do to the device's
    memory: an offload's host copy is not counted, a reload's device tensor is (made as
    the op makes it, in the original layout), and a wait frees its ``keepalive``'s storage
    (the op's ``resize_(0)``) where the device holds it; code that uses that storage again
    is refused (:class:`CompiledCodeError`), as the device would fault there."""

    supports_higher_order_operators = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # the storages offload waits freed, by id: code that uses one again (an op, or a
        # generated kernel: meta_code.STUB_CHECK) is refused, as it would fault on the device
        self.freed: dict[int, weakref.ref] = {}

    def check_freed(self, args: Any, kwargs: Any, what: object = "a generated kernel") -> None:
        """Raise :class:`CompiledCodeError` where ``args`` use a storage a wait freed."""
        if not self.freed:
            return
        for t in op_tensors(args, kwargs):
            if T._has_storage(t):
                storage = t.untyped_storage()
                ref = self.freed.get(id(storage))
                if ref is not None and ref() is storage:
                    raise CompiledCodeError(
                        f"{what} uses memory an offload's wait freed (resize_(0))"
                    )

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        name = func.name() if isinstance(func, T.OpOverload) else ""
        if name.startswith("ao::"):
            return self._offload_op(name, types, args, kwargs)
        self.check_freed(args, kwargs, func)
        if func is torch.ops.higher_order.run_and_save_rng_state:
            size = generator_state_bytes("cpu") if self.device == "cpu" else 0
            state = self.__torch_dispatch__(
                torch.ops.aten.empty.memory_format,
                types,
                ([size],),
                {"dtype": torch.uint8, "device": "meta"},
            )
            return state, self.__torch_dispatch__(args[0], types, args[1:], kwargs)
        if func is torch.ops.higher_order.run_with_rng_state:
            return self.__torch_dispatch__(args[1], types, args[2:], kwargs)
        if isinstance(func, T.HigherOrderOperator):
            raise CompiledCodeError(f"no meta run of the higher-order op {func.name()}")
        out = super().__torch_dispatch__(func, types, args, kwargs)
        for t in out if isinstance(out, (list, tuple)) else [out]:
            if isinstance(t, torch.Tensor) and t.device.type not in ("meta", "cpu"):
                raise CompiledCodeError(f"{func} made a tensor on {t.device}, not meta")
        return out

    def _offload_op(self, name: str, types: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        if name == "ao::offload":  # a host copy: host memory, not the device's
            return host_tensor(args[0].shape, None, args[0].dtype)  # contiguous, as torch's
        if name == "ao::reload":
            t = args[0]
            given = {
                **dict(zip(("original_size", "original_stride"), args[2:], strict=False)),
                **kwargs,
            }
            size = given.get("original_size") or list(t.shape)
            stride = given.get("original_stride") or list(t.stride())
            empty = torch.ops.aten.empty_strided.default
            return self.__torch_dispatch__(
                empty, types, (size, stride), {"dtype": t.dtype, "device": "meta"}
            )
        if name == "ao::wait_tensor":
            keepalive = args[1] if len(args) > 1 else kwargs.get("keepalive")
            if isinstance(keepalive, torch.Tensor) and T._has_storage(keepalive):
                storage = keepalive.untyped_storage()
                if id(storage) in self.alive:  # the device's: freed, and never used again
                    self.free(storage)
                    self.freed[id(storage)] = weakref.ref(storage)
            return args[0]
        raise CompiledCodeError(f"no meta run of {name}")


@contextlib.contextmanager
def _stubs_checked(live: _MetaRun) -> Iterator[None]:
    token = STUB_CHECK.set(live.check_freed)
    try:
        yield
    finally:
        STUB_CHECK.reset(token)


def compiled_peak(
    fw: CompiledGraph,
    bw: CompiledGraph | None,
    *,
    num_user_outputs: int = 1,
    outputs_held: bool = True,
    measure_workspace: bool = True,
    tracer: Callable[[Any, LiveStorages], None] | None = None,
) -> int:
    """The peak bytes of running the compiled forward then backward (module docstring),
    above what was resident before the step. The forward's first ``num_user_outputs``
    outputs (the loss; where ``outputs_held``) and the others the backward does not take
    are held to the end of the step. ``tracer(frame, live)``: called before each line of
    the last graph's ``call`` runs, and as it returns. Raises :class:`CompiledCodeError`
    when the code cannot be run on meta tensors."""
    # meta tensors standing in for the device's
    live = _MetaRun(device=fw.device, measure_workspace=measure_workspace)
    fw_call = call_on_meta(fw)
    bw_call = call_on_meta(bw) if bw is not None else None
    if tracer is not None:
        if bw_call is None:
            fw_call = _traced(fw_call, tracer, live)
        else:
            bw_call = _traced(bw_call, tracer, live)
    inputs = {name: meta_tensor(fw.values[name]) for name in fw.inputs}  # resident: made outside
    with live, _stubs_checked(live):
        try:
            outs = fw_call([inputs[name] for name in fw.inputs])
        except Exception as e:  # noqa: BLE001
            raise CompiledCodeError(f"Inductor's forward code failed on meta tensors: {e}") from e
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        # the backward's inputs named apart from the forward's outputs (AOTAutograd's
        # rng_state_output_i): the forward's saved outputs by position
        saved = [] if bw is None else [n for n in bw.inputs if not n.startswith("tangents")]
        names = fw.outputs[len(fw.outputs) - len(saved) :] if len(saved) <= len(fw.outputs) else []
        alias = {b: f for b, f in zip(saved, names, strict=False) if b not in fw.outputs and f}
        taken = (set(bw.inputs) | set(alias.values())) if bw is not None else set()
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
                if alias.get(name, name) in handed:
                    args.append(handed[alias.get(name, name)])
                elif name in inputs:
                    args.append(inputs[name])
                elif name.startswith("tangents"):  # autograd makes it as the backward starts
                    tangent = meta_tensor(bw.values[name])  # made in the mode: counted
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


def _traced(call: Callable[[list[Any]], Any], tracer: Any, live: LiveStorages) -> Any:
    code = getattr(call, "__func__", call).__code__

    def local(frame: Any, event: str, _: Any) -> Any:
        if event in ("line", "return"):
            tracer(frame, live)
        return local

    def run(args: list[Any]) -> Any:
        previous = sys.gettrace()
        sys.settrace(lambda frame, *_: local if frame.f_code is code else None)
        try:
            return call(args)
        finally:
            sys.settrace(previous)

    return run


class CodeCapture:
    """An Inductor ``inner_compile`` that compiles as Inductor does and keeps each graph's
    wrapper code (CPU or CUDA): :meth:`peak` is then the compiled step's peak (the
    backward must be compiled with the forward: ``force_non_lazy_backward_lowering``)."""

    def __init__(self) -> None:
        self.graphs: dict[str, CompiledGraph] = {}

    def __call__(self, gm: fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Any:
        from ..runtime._torch_private import compile_fx_inner

        graph = describe(gm)  # before Inductor's passes edit gm
        forward = self.graphs.get("forward") if kwargs.get("is_backward") else None
        with _compiling(graph, forward), pinning(gm):
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
