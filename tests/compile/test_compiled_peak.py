"""The peak of the code Inductor generates (budget.compile.compiled_peak), and peak budgets
checked on it (budget.backend under Inductor).

Oracles: a hand-written wrapper whose allocations are counted by hand, and the step's
peak measured by torch.profiler's memory events (budget.runtime.measure.measure_peak),
which shares no code with the meta-tensor run of the wrapper.
"""

from __future__ import annotations

import textwrap

import pytest
import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode

import budget
from budget.compile.compiled_peak import CompiledCodeError, CompiledGraph, compiled_peak, describe
from budget.models import get_builtin
from budget.runtime.measure import measure_peak

KiB = 1024

# Inductor's CPU wrapper code, cut to what matters: the module prologue, a kernel compiled
# at load time, a Runner whose call() allocates, reuses, frees and returns buffers.
FORWARD = '''
import torch
from torch._inductor.async_compile import AsyncCompile
empty_strided_cpu = torch._C._dynamo.guards._empty_strided_cpu
reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor
async_compile = AsyncCompile()
cpp_fused_0 = async_compile.cpp_pybinding(['float*'], """not C++: never compiled""")
async_compile.wait(globals())
del async_compile

class Runner:
    def __init__(self, partitions):
        self.partitions = partitions

    def call(self, args):
        x, = args
        args.clear()
        buf0 = empty_strided_cpu((256, ), (1, ), torch.float32)  # 1 KiB
        cpp_fused_0(x, buf0)
        buf1 = empty_strided_cpu((512, ), (1, ), torch.float32)  # 2 KiB
        cpp_fused_0(buf0, buf1)
        del buf0
        buf2 = reinterpret_tensor(buf1, (16, 32), (32, 1), 0); del buf1  # reuse
        buf3 = empty_strided_cpu((), (), torch.float32)  # the loss: 4 bytes
        cpp_fused_0(buf2, buf3)
        return (buf3, buf2, )

runner = Runner(partitions=[])
call = runner.call

if __name__ == "__main__":
    raise SystemExit("the benchmark harness never runs")
'''

BACKWARD = """
import torch
empty_strided_cpu = torch._C._dynamo.guards._empty_strided_cpu

class Runner:
    def __init__(self, partitions):
        self.partitions = partitions

    def call(self, args):
        saved, tangents_1 = args
        args.clear()
        buf0 = empty_strided_cpu((1024, ), (1, ), torch.float32)  # 4 KiB
        extern_mm = torch.mm(saved, saved.t())  # 16x16: 1 KiB, freed at once
        del extern_mm
        del saved
        del tangents_1
        buf1 = empty_strided_cpu((256, ), (1, ), torch.float32)  # 1 KiB
        return (buf0, buf1, )

runner = Runner(partitions=[])
call = runner.call
"""


def test_wrapper_code_is_run_on_meta_tensors_as_it_allocates():
    """Forward: 1 + 2 KiB live at once, then 2 KiB and the loss handed over. Backward: it
    starts with them and the loss's gradient, allocates 4 KiB, then a 1 KiB product for
    an instant (7 KiB + 8 bytes: the peak), frees the saved value, and holds the
    gradients (4 + 1 KiB) with the loss to the end."""
    fw = CompiledGraph(FORWARD, ["x"], ["loss", "saved"], {"x": torch.empty(8, 8)})
    bw = CompiledGraph(
        BACKWARD, ["saved", "tangents_1"], [None, None], {"tangents_1": torch.empty(())}
    )
    assert compiled_peak(fw, None) == 3 * KiB
    assert compiled_peak(fw, bw) == 2 * KiB + 4 + 4 + 4 * KiB + 1 * KiB


def _early_free() -> str:
    """BACKWARD with ``del tangents_1`` right after ``args.clear()``."""
    code = BACKWARD.replace(
        "        args.clear()\n", "        args.clear()\n        del tangents_1\n", 1
    ).replace("        del tangents_1\n        buf1", "        buf1")
    assert code.index("del tangents_1") < code.index("buf0 =")
    return code


def test_the_loss_gradient_is_held_until_the_backward_returns():
    """The code deletes ``tangents_1`` after its last read, but ``loss.backward()`` holds
    the loss's gradient (0-dim) it passes the backward until it returns: it is still live
    when the backward makes its 4 KiB gradient and a 1 KiB product, with the 2 KiB saved
    value and the loss: 7 KiB + 8 bytes."""
    fw = CompiledGraph(FORWARD, ["x"], ["loss", "saved"], {"x": torch.empty(8, 8)})
    bw = CompiledGraph(
        _early_free(), ["saved", "tangents_1"], [None, None], {"tangents_1": torch.empty(())}
    )
    assert compiled_peak(fw, bw) == 2 * KiB + 4 + 4 + 4 * KiB + 1 * KiB


def test_another_gradient_is_freed_where_the_code_drops_it():
    """A tangent autograd made (a later graph's gradient: 1 KiB here) is handed to torch
    2.13's compiled backward in a list the code clears, so ``del tangents_1`` frees it
    before the 4 KiB gradient is made: 7 KiB + 4 bytes with torch 2.13, 8 KiB + 4 where
    the backward takes its gradients as arguments (autograd holds them to its return)."""
    from budget.runtime._torch_private import _tangents_in_a_list

    fw = CompiledGraph(FORWARD, ["x"], ["loss", "saved"], {"x": torch.empty(8, 8)})
    bw = CompiledGraph(
        _early_free(), ["saved", "tangents_1"], [None, None], {"tangents_1": torch.empty(256)}
    )
    held = 0 if _tangents_in_a_list() else 1 * KiB
    assert compiled_peak(fw, bw) == 2 * KiB + 4 + held + 4 * KiB + 1 * KiB


def test_a_graph_before_a_graph_break_does_not_hold_its_outputs():
    """The forward's user output (the 4-byte ``loss`` slot) is dropped as the step goes on
    past a graph break: the backward's peak is 4 bytes lower."""
    fw = CompiledGraph(FORWARD, ["x"], ["loss", "saved"], {"x": torch.empty(8, 8)})
    bw = CompiledGraph(
        BACKWARD, ["saved", "tangents_1"], [None, None], {"tangents_1": torch.empty(())}
    )
    assert compiled_peak(fw, bw, outputs_held=False) == compiled_peak(fw, bw) - 4


# An extern kernel's output as the device's kernel lays it out: the wrapper asserts the
# strides, and the code's next call depends on them (here a copy where they are not
# contiguous; in a convnet, how much a convolution's backward copies inside itself).
ASSERTED = BACKWARD.replace(
    BACKWARD[BACKWARD.index("        saved, tangents_1") : BACKWARD.index("runner = Runner")],
    """        x, = args
        args.clear()
        buf0 = torch.mm(x, x)  # 1 KiB; contiguous from its meta function
        assert_size_stride(buf0, (16, 16), (1, 16), 'torch.ops.aten.mm.default')
        assert_size_stride(x, (8, 32), (32, 1), 'input')  # not x's sizes: left as it is
        buf1 = buf0.contiguous()  # a 1 KiB copy: buf0 is laid out transposed
        del buf0
        return (buf1, )

""",
)


def test_an_extern_kernels_output_has_the_strides_the_code_asserts():
    """The meta tensor standing for ``buf0`` takes the strides Inductor asserts (those the
    real run has), so ``.contiguous()`` copies it: 1 KiB + its 1 KiB copy. With the meta
    function's contiguous strides the copy would not be made (1 KiB)."""
    fw = CompiledGraph(ASSERTED, ["x"], ["loss"], {"x": torch.empty(16, 16)})
    assert compiled_peak(fw, None) == 2 * KiB


def test_code_it_cannot_run_is_an_error_saying_so():
    fw = CompiledGraph("x = 1\n", ["x"], [None], {"x": torch.empty(1)})
    with pytest.raises(CompiledCodeError, match="no Python call"):
        compiled_peak(fw, None)
    broken = FORWARD.replace("torch.float32)  # 2 KiB", "torch.float32, 'no such')  # 2 KiB")
    fw = CompiledGraph(broken, ["x"], ["loss", "saved"], {"x": torch.empty(8, 8)})
    with pytest.raises(CompiledCodeError, match="forward code failed"):
        compiled_peak(fw, None)
    streams = "from torch._dynamo.graph_bytecode_inputs import get_external_object_by_index\n"
    fw = CompiledGraph(streams + FORWARD, ["x"], ["loss", "saved"], {"x": torch.empty(8, 8)})
    with pytest.raises(CompiledCodeError, match="user streams"):  # not modelled
        compiled_peak(fw, None)


# Inductor's CUDA wrapper code (Python wrapper, no cudagraphs: as torch 2.11 wrote it for
# the built-in GPT on an H200, the constructs 2.13's codegen writes too), cut to what
# matters: its imports (Triton's and the raw stream getter fail without Triton or CUDA),
# its header (empty_strided_cuda bound to torch's, which would allocate on the GPU),
# Triton kernels compiled at load time, and a Runner whose call() enters the device
# guard, sets the device, gets the stream and launches kernels on it, calls extern
# kernels into buffers and fallback ops that allocate, and frees and reuses buffers.
CUDA_PROLOGUE = """
# AOT ID: ['0_forward']
from ctypes import c_void_p, c_long, c_int
import torch
import math
import random
import os
import tempfile
from math import inf, nan
from cmath import nanj
from torch._inductor.hooks import run_intermediate_hooks
from torch._inductor.utils import maybe_profile
from torch._inductor.codegen.memory_planning import _align as align
from torch import device, empty_strided
from torch._inductor.async_compile import AsyncCompile
from torch._inductor.select_algorithm import extern_kernels
import triton
import triton.language as tl
from torch._inductor.runtime.triton_heuristics import start_graph, end_graph
from torch._C import _cuda_getCurrentRawStream as get_raw_stream

aten = torch.ops.aten
inductor_ops = torch.ops.inductor
_quantized = torch.ops._quantized
assert_size_stride = torch._C._dynamo.guards.assert_size_stride
assert_alignment = torch._C._dynamo.guards.assert_alignment
empty_strided_cpu = torch._C._dynamo.guards._empty_strided_cpu
empty_strided_cpu_pinned = torch._C._dynamo.guards._empty_strided_cpu_pinned
empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda
empty_strided_xpu = torch._C._dynamo.guards._empty_strided_xpu
empty_strided_mtia = torch._C._dynamo.guards._empty_strided_mtia
reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor
alloc_from_pool = torch.ops.inductor._alloc_from_pool
async_compile = AsyncCompile()
empty_strided_p2p = torch._C._distributed_c10d._SymmetricMemory.empty_strided_p2p
"""

TRITON_KERNEL = """
# kernel path: /tmp/torchinductor_user/xv/cxvxkz.py
# Topologically Sorted Source Nodes: [relu], Original ATen: [aten.relu]
triton_poi_fused_relu_0 = async_compile.triton('triton_poi_fused_relu_0', '''
import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
from torch._inductor.runtime.hints import AutotuneHint, ReductionHint, TileHint, DeviceProperties
triton_helpers.set_driver_to_gpu()

@triton_heuristics.pointwise(
    size_hints={'x': 1024},
    filename=__file__,
    triton_meta={'signature': {'in_out_ptr0': '*fp32', 'xnumel': 'i32', 'XBLOCK': 'constexpr'}, 'device': DeviceProperties(type='cuda', index=0, multi_processor_count=132, cc=90, major=9, regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048, warp_size=32), 'constants': {}},
    inductor_meta={'grid_type': 'Grid1D', 'kernel_name': 'triton_poi_fused_relu_0', 'mutated_arg_names': ['in_out_ptr0']},
    min_elem_per_thread=0
)
@triton.jit
def triton_poi_fused_relu_0(in_out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xnumel = 1024
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    tmp0 = tl.load(in_out_ptr0 + (xindex), xmask)
    tmp1 = tl.full([1], 0, tl.int32)
    tmp2 = triton_helpers.maximum(tmp1, tmp0)
    tl.store(in_out_ptr0 + (xindex), tmp2, xmask)
''', device_str='cuda')
"""

RUNNER = """
async_compile.wait(globals())
del async_compile

class Runner:
    def __init__(self, partitions):
        self.partitions = partitions

    def recursively_apply_fns(self, fns):
        new_callables = []
        for fn, c in zip(fns, self.partitions):
            new_callables.append(fn(c))
        self.partitions = new_callables

    def call(self, args):
{body}

runner = Runner(partitions=[])
call = runner.call
recursively_apply_fns = runner.recursively_apply_fns


def benchmark_compiled_module(args, times=10, repeat=10):
    from torch._inductor.utils import print_performance
    fn = lambda: call(list(args))
    return print_performance(fn, times=times, repeat=repeat)


if __name__ == "__main__":
    from torch._inductor.wrapper_benchmark import compiled_module_main
    compiled_module_main('None', benchmark_compiled_module)
"""


def _cuda_module(body: str, *kernels: str) -> str:
    """A CUDA wrapper module whose call() runs ``body``, with a Triton kernel compiled at
    load time for each name in ``kernels`` (the relu above, renamed)."""
    compiled = "".join(TRITON_KERNEL.replace("triton_poi_fused_relu_0", k) for k in kernels)
    return CUDA_PROLOGUE + compiled + RUNNER.format(body=textwrap.indent(body, " " * 8))


CUDA_FORWARD = _cuda_module(
    """\
primals_1, primals_2 = args
args.clear()
assert_size_stride(primals_1, (16, 32), (32, 1))
assert_size_stride(primals_2, (64, 32), (32, 1))
with torch.cuda._DeviceGuard(0):
    torch.cuda.set_device(0)
    buf0 = empty_strided_cuda((16, 64), (64, 1), torch.float32)
    # Topologically Sorted Source Nodes: [linear], Original ATen: [aten.mm]
    extern_kernels.mm(primals_1, reinterpret_tensor(primals_2, (32, 64), (1, 32), 0), out=buf0)
    del primals_2
    buf1 = buf0; del buf0  # reuse
    # Topologically Sorted Source Nodes: [relu], Original ATen: [aten.relu]
    stream0 = get_raw_stream(0)
    triton_poi_fused_relu_0.run(buf1, 1024, stream=stream0)
    buf2 = empty_strided_cuda((16, ), (1, ), torch.float32)
    # Topologically Sorted Source Nodes: [sum_1], Original ATen: [aten.sum]
    triton_per_fused_sum_1.run(buf1, buf2, 16, 64, stream=stream0)
    buf3 = empty_strided_cuda((), (), torch.float32)
    buf4 = buf3; del buf3  # reuse
    # Topologically Sorted Source Nodes: [mean], Original ATen: [aten.mean]
    triton_per_fused_mean_2.run(buf4, buf2, 1, 16, stream=stream0)
    del buf2
return (buf4, primals_1, buf1, )
""",
    "triton_poi_fused_relu_0",
    "triton_per_fused_sum_1",
    "triton_per_fused_mean_2",
)

CUDA_BACKWARD = _cuda_module(
    """\
primals_1, relu, tangents_1 = args
args.clear()
assert_size_stride(primals_1, (16, 32), (32, 1))
assert_size_stride(relu, (16, 64), (64, 1))
assert_size_stride(tangents_1, (), ())
with torch.cuda._DeviceGuard(0):
    torch.cuda.set_device(0)
    buf0 = empty_strided_cuda((16, 64), (64, 1), torch.float32)
    # Topologically Sorted Source Nodes: [], Original ATen: [aten.div, aten.threshold_backward]
    stream0 = get_raw_stream(0)
    triton_poi_fused_div_threshold_backward_0.run(tangents_1, relu, buf0, 1024, stream=stream0)
    del relu
    del tangents_1
    buf1 = empty_strided_cuda((64, 32), (32, 1), torch.float32)
    # Topologically Sorted Source Nodes: [], Original ATen: [aten.mm]
    extern_kernels.mm(reinterpret_tensor(buf0, (64, 16), (1, 64), 0), primals_1, out=buf1)
    del buf0
    del primals_1
return (None, buf1, )
""",
    "triton_poi_fused_div_threshold_backward_0",
)


_X_W = {"primals_1": torch.empty(16, 32), "primals_2": torch.empty(64, 32)}
_TANGENT = {"tangents_1": torch.empty(())}


def test_cuda_wrapper_code_is_run_on_meta_tensors_touching_no_gpu():
    """mean(relu(x @ w.T)) on 16x32 and 64x32 inputs, float32. Forward: the 4 KiB
    product (relu'd in place, by renaming), a 64-byte row sum and the 4-byte loss: 4164
    bytes at once. Backward: it starts with the 4 KiB relu output, the loss and its
    gradient, makes the 4 KiB gradient of the product, frees the relu output, and makes
    the 8 KiB gradient of ``w`` while the product's is live: 12 KiB + 8 bytes."""
    fw = CompiledGraph(
        CUDA_FORWARD, ["primals_1", "primals_2"], ["mean", "primals_1", "relu"], _X_W, "cuda"
    )
    bw = CompiledGraph(
        CUDA_BACKWARD, ["primals_1", "relu", "tangents_1"], [None, None], _TANGENT, "cuda"
    )
    assert compiled_peak(fw, None) == 4 * KiB + 64 + 4
    assert compiled_peak(fw, bw) == 4 * KiB + 8 * KiB + 4 + 4


# The same step with relu offloaded by torch's side-stream pass (torch 2.13 on CUDA): the
# forward copies relu to the host and frees it at the sunk wait; the backward makes a 16
# KiB scratch buffer, then reloads relu (its wait frees the host copy) before it needs it.
OFFLOAD_FORWARD = _cuda_module(
    """\
primals_1, primals_2 = args
args.clear()
with torch.cuda._DeviceGuard(0):
    torch.cuda.set_device(0)
    buf0 = empty_strided_cuda((16, 64), (64, 1), torch.float32)
    extern_kernels.mm(primals_1, reinterpret_tensor(primals_2, (32, 64), (1, 32), 0), out=buf0)
    del primals_2
    buf1 = buf0; del buf0  # reuse
    stream0 = get_raw_stream(0)
    triton_poi_fused_relu_0.run(buf1, 1024, stream=stream0)
    buf2 = torch.ops.ao.offload.default(buf1)
    buf3 = empty_strided_cuda((), (), torch.float32)
    triton_red_fused_mean_1.run(buf3, buf1, 1, 1024, stream=stream0)
    buf4 = torch.ops.ao.wait_tensor.default(buf2, buf1)
    del buf1
    del buf2
return (buf3, primals_1, buf4, )
""",
    "triton_poi_fused_relu_0",
    "triton_red_fused_mean_1",
)
SCRATCH = """\
    buf0 = empty_strided_cuda((64, 64), (64, 1), torch.float32)
    del buf0
"""
OFFLOAD_BACKWARD_BODY = """\
primals_1, relu, tangents_1 = args
args.clear()
with torch.cuda._DeviceGuard(0):
    torch.cuda.set_device(0)
    buf0 = empty_strided_cuda((64, 64), (64, 1), torch.float32)
    del buf0
    buf1 = torch.ops.ao.reload.default(relu, device(type='cuda', index=0), [16, 64], [64, 1])
    buf2 = torch.ops.ao.wait_tensor.default(buf1, relu)
    del relu
    del buf1
    buf3 = empty_strided_cuda((16, 64), (64, 1), torch.float32)
    stream0 = get_raw_stream(0)
    triton_poi_fused_div_threshold_backward_0.run(tangents_1, buf2, buf3, 1024, stream=stream0)
    del buf2
    del tangents_1
    buf4 = empty_strided_cuda((64, 32), (32, 1), torch.float32)
    extern_kernels.mm(reinterpret_tensor(buf3, (64, 16), (1, 64), 0), primals_1, out=buf4)
    del buf3
    del primals_1
return (None, buf4, )
"""


def _offload_backward(scratch_after_reload: bool) -> str:
    body = OFFLOAD_BACKWARD_BODY
    if scratch_after_reload:
        body = body.replace(SCRATCH, "").replace("    del buf2\n", "    del buf2\n" + SCRATCH)
    return _cuda_module(body, "triton_poi_fused_div_threshold_backward_0")


def test_offloaded_values_leave_the_devices_count_at_their_wait_and_return_at_reload():
    """The host copy is host memory (the forward peaks at relu and the loss: 4 KiB + 4
    bytes, not 8 KiB more); between the passes relu is off the device, so the backward's
    16 KiB scratch peaks beside the loss and its gradient alone (16 KiB + 8 bytes, not
    20 KiB); the reload comes back as a 4 KiB device tensor, counted to its last use."""
    import torch._functorch._activation_offloading.offload_ops  # noqa: F401 - the ao ops

    fw = CompiledGraph(
        OFFLOAD_FORWARD, ["primals_1", "primals_2"], ["mean", "primals_1", "relu"], _X_W, "cuda"
    )
    names = ["primals_1", "relu", "tangents_1"]
    bw = CompiledGraph(_offload_backward(False), names, [None, None], _TANGENT, "cuda")
    assert compiled_peak(fw, None) == 4 * KiB + 4
    assert compiled_peak(fw, bw) == 16 * KiB + 4 + 4
    # the scratch after the reload, beside the 4 KiB gradient made from the reloaded relu
    bw = CompiledGraph(_offload_backward(True), names, [None, None], _TANGENT, "cuda")
    assert compiled_peak(fw, bw) == 16 * KiB + 4 * KiB + 4 + 4
    # the synchronous copy (no side stream) is a host buffer in CUDA code: not counted
    copy = "buf2 = empty_strided_cpu((16, 64), (64, 1), torch.float32); buf2.copy_(buf1)"
    source = OFFLOAD_FORWARD.replace("buf2 = torch.ops.ao.offload.default(buf1)", copy)
    source = source.replace("torch.ops.ao.wait_tensor.default(buf2, buf1)", "buf2")
    fw = CompiledGraph(source, fw.inputs, fw.outputs, _X_W, "cuda")
    assert compiled_peak(fw, None) == 4 * KiB + 4


def test_inductor_reuses_no_buffer_an_offload_wait_frees_and_the_meta_run_refuses_one():
    """Inductor does not know ``ao::wait_tensor`` frees its keepalive (``resize_(0)``): it
    would write a later matmul's output into ``a``'s freed buffer. Graphs with such waits
    are compiled without buffer reuse; code that reuses one anyway is refused."""
    import torch._functorch._activation_offloading.offload_ops  # noqa: F401 - the ao ops
    from torch.fx.experimental.proxy_tensor import make_fx

    from budget.compile.compiled_peak import CodeCapture

    def f(x, w):
        a = x @ w
        b = a @ w
        kept = torch.ops.ao.wait_tensor.default(torch.ops.ao.offload.default(a), a)
        return (b @ w) @ w, kept

    gm = make_fx(f, tracing_mode="fake")(torch.randn(64, 64), torch.randn(64, 64))
    capture = CodeCapture()
    capture(gm, [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"])
    source = capture.graphs["forward"].source
    assert "torch.ops.ao.wait_tensor.default(" in source and "# reuse" not in source
    # the CUDA forward above, with relu's freed buffer reused for the loss
    indent = " " * 12  # call()'s body, inside the device guard
    for use in ("buf5.zero_()", "triton_poi_fused_relu_0.run(buf5, 1024, stream=stream0)"):
        reused = OFFLOAD_FORWARD.replace(
            f"{indent}del buf1\n", f"{indent}buf5 = buf1; del buf1  # reuse\n{indent}{use}\n"
        )
        names = ["mean", "primals_1", "relu"]
        fw = CompiledGraph(reused, ["primals_1", "primals_2"], names, _X_W, "cuda")
        with pytest.raises(CompiledCodeError, match="an offload's wait freed"):
            compiled_peak(fw, None)


# One attention layer in float16: qkv = x @ w_qkv.T (256 x 192), flash attention over
# (batch 2, heads 4, seq 128, head 16) views of it, out = attention @ w_o.T, the loss its
# mean; Inductor falls back to ATen's flash attention and its backward.
QKV = "(2, 4, 128, 16), (24576, 16, 192, 1)"
SDPA_FORWARD = _cuda_module(
    f"""\
primals_1, primals_2, primals_3 = args
args.clear()
with torch.cuda._DeviceGuard(0):
    torch.cuda.set_device(0)
    buf0 = empty_strided_cuda((256, 192), (192, 1), torch.float16)
    extern_kernels.mm(primals_1, reinterpret_tensor(primals_2, (64, 192), (1, 64), 0), out=buf0)
    del primals_2
    # Topologically Sorted Source Nodes: [scaled_dot_product_attention], Original ATen: [aten._scaled_dot_product_flash_attention]
    buf1 = torch.ops.aten._scaled_dot_product_flash_attention.default(reinterpret_tensor(buf0, {QKV}, 0), reinterpret_tensor(buf0, {QKV}, 64), reinterpret_tensor(buf0, {QKV}, 128), 0.0, True, scale=0.25)
    buf2 = buf1[0]
    assert_size_stride(buf2, (2, 4, 128, 16), (8192, 16, 64, 1), 'torch.ops.aten._scaled_dot_product_flash_attention.default')
    assert_alignment(buf2, 16, 'torch.ops.aten._scaled_dot_product_flash_attention.default')
    buf3 = buf1[1]
    buf4 = buf1[6]
    buf5 = buf1[7]
    del buf1
    buf7 = empty_strided_cuda((256, 64), (64, 1), torch.float16)
    extern_kernels.mm(reinterpret_tensor(buf2, (256, 64), (64, 1), 0), reinterpret_tensor(primals_3, (64, 64), (1, 64), 0), out=buf7)
    buf8 = empty_strided_cuda((), (), torch.float32)
    stream0 = get_raw_stream(0)
    triton_red_fused_mean_0.run(buf8, buf7, 1, 16384, stream=stream0)
    del buf7
return (buf8, primals_1, primals_3, buf0, buf2, buf3, buf4, buf5, )
""",
    "triton_red_fused_mean_0",
)
SDPA_SAVED = ["primals_1", "primals_3", "mm", "getitem", "getitem_1", "getitem_6", "getitem_7"]
SDPA_BACKWARD = _cuda_module(
    f"""\
{", ".join(SDPA_SAVED)}, tangents_1 = args
args.clear()
with torch.cuda._DeviceGuard(0):
    torch.cuda.set_device(0)
    buf0 = empty_strided_cuda((256, 64), (64, 1), torch.float16)
    stream0 = get_raw_stream(0)
    triton_poi_fused_div_expand_0.run(tangents_1, buf0, 16384, stream=stream0)
    del tangents_1
    buf1 = empty_strided_cuda((64, 64), (64, 1), torch.float16)
    extern_kernels.mm(reinterpret_tensor(buf0, (64, 256), (1, 64), 0), reinterpret_tensor(getitem, (256, 64), (64, 1), 0), out=buf1)
    buf2 = empty_strided_cuda((256, 64), (64, 1), torch.float16)
    extern_kernels.mm(buf0, primals_3, out=buf2)
    del buf0
    del primals_3
    # Topologically Sorted Source Nodes: [], Original ATen: [aten._scaled_dot_product_flash_attention_backward]
    buf3 = torch.ops.aten._scaled_dot_product_flash_attention_backward.default(reinterpret_tensor(buf2, (2, 4, 128, 16), (8192, 16, 64, 1), 0), reinterpret_tensor(mm, {QKV}, 0), reinterpret_tensor(mm, {QKV}, 64), reinterpret_tensor(mm, {QKV}, 128), getitem, getitem_1, None, None, 128, 128, 0.0, True, getitem_6, getitem_7, scale=0.25)
    del buf2
    del getitem
    del getitem_1
    del getitem_6
    del getitem_7
    del mm
    buf4 = buf3[0]
    buf5 = buf3[1]
    buf6 = buf3[2]
    del buf3
    buf7 = empty_strided_cuda((256, 192), (192, 1), torch.float16)
    triton_poi_fused_cat_1.run(buf4, buf5, buf6, buf7, 49152, stream=stream0)
    del buf4, buf5, buf6
    buf8 = empty_strided_cuda((192, 64), (64, 1), torch.float16)
    extern_kernels.mm(reinterpret_tensor(buf7, (192, 256), (1, 192), 0), primals_1, out=buf8)
    del buf7
    del primals_1
return (None, buf8, buf1, )
""",
    "triton_poi_fused_div_expand_0",
    "triton_poi_fused_cat_1",
)


def test_cuda_fallback_attention_allocates_its_outputs():
    """Forward: the 96 KiB qkv product; flash attention's output (32 KiB), logsumexp (4
    KiB), RNG seed and offset (16 + 8 bytes); the 32 KiB projection; the loss: 164 KiB +
    28 bytes. Backward: it starts with qkv, the attention output, logsumexp, seed and
    offset, the loss and its gradient (132 KiB + 32), makes the output's gradient (32
    KiB), ``w_o``'s (8 KiB) and the attention's (32 KiB), frees the first, and the
    attention backward makes q's, k's and v's gradients (3 x 32 KiB): 268 KiB + 32 bytes.
    No workspace is added on CUDA."""
    half = {
        name: torch.empty(*shape, dtype=torch.float16)
        for name, shape in [
            ("primals_1", (256, 64)),
            ("primals_2", (192, 64)),
            ("primals_3", (64, 64)),
        ]
    }
    fw = CompiledGraph(SDPA_FORWARD, list(half), ["mean", *SDPA_SAVED], half, "cuda")
    bw = CompiledGraph(SDPA_BACKWARD, [*SDPA_SAVED, "tangents_1"], [None] * 3, _TANGENT, "cuda")
    assert compiled_peak(fw, None) == 164 * KiB + 28
    assert compiled_peak(fw, bw) == 268 * KiB + 32


def test_imports_that_fail_here_are_stand_ins_and_other_failures_are_errors():
    """Triton, CUDA's stream getter, a name Inductor no longer has (``grid``, of torch
    2.5's launches): stand-ins, as the launches that use them are. A CUDA template's
    kernel is launched as ``kernel.kernel_name(..., c_void_p(stream0))``."""
    imports = (
        "import os, budget_no_such_module\n"
        "import budget_no_such.language as tl_missing\n"
        "from torch._inductor.runtime.triton_heuristics import grid\n"
        "from torch._C import _budget_no_such_raw_stream as get_raw_stream\n"
        "from math import inf, budget_no_such_name\n"
        "cuda_fused_mm_1 = async_compile.cuda('''// CUTLASS: never compiled''', 'so')\n"
    )
    body = """\
primals_1, primals_2 = args
args.clear()
with torch.cuda._DeviceGuard(0):
    torch.cuda.set_device(0)
    stream0 = get_raw_stream(0)
    buf0 = empty_strided_cuda((16, 64), (64, 1), torch.float32)
    cuda_fused_mm_1.cuda_fused_mm_1(primals_1, primals_2, buf0, c_void_p(stream0))
    triton_poi_fused_relu_0.run(buf0, 1024, grid=grid(1024), stream=stream0)
    assert inf > 0 and os.sep
    torch.cuda.synchronize()
return (buf0, )
"""
    source = _cuda_module(body, "triton_poi_fused_relu_0").replace(
        "async_compile = AsyncCompile()\n", "async_compile = AsyncCompile()\n" + imports
    )
    fw = CompiledGraph(source, ["primals_1", "primals_2"], ["relu"], _X_W, "cuda")
    assert compiled_peak(fw, None) == 4 * KiB
    broken = source.replace("aten = torch.ops.aten", "aten = torch.ops.budget_no_such_namespace.x")
    with pytest.raises(CompiledCodeError, match="did not load"):
        compiled_peak(
            CompiledGraph(broken, ["primals_1", "primals_2"], ["relu"], _X_W, "cuda"), None
        )


def test_the_device_of_a_fallback_and_of_its_workspace():
    """A fallback that makes a tensor on the GPU (``device=device(type='cuda')``) makes
    it on meta; a convolution's workspace is counted on the CPU (oneDNN's copies), not
    on CUDA, where none is modelled: 16 KiB of output and 1 KiB of zeros."""
    body = """\
primals_1, primals_2 = args
args.clear()
with torch.cuda._DeviceGuard(0):
    torch.cuda.set_device(0)
    buf0 = torch.ops.aten.full.default([256], 0.0, dtype=torch.float32, layout=torch.strided, device=device(type='cuda', index=0), pin_memory=False)
    buf1 = torch.ops.aten.convolution.default(primals_1, primals_2, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
return (buf1, buf0, )
"""
    conv = {"primals_1": torch.empty(1, 8, 16, 16), "primals_2": torch.empty(16, 8, 3, 3)}
    source = _cuda_module(body)
    cuda = CompiledGraph(source, list(conv), ["convolution", "full"], conv, "cuda")
    assert compiled_peak(cuda, None) == 16 * KiB + 1 * KiB
    rule = {"measure_workspace": False}  # budget.config.conv_workspace = "rule"
    on_cpu = compiled_peak(CompiledGraph(source, list(conv), [None, None], conv), None, **rule)
    assert on_cpu > 17 * KiB


def test_the_device_is_the_graphs_inputs():
    gm = fx.symbolic_trace(lambda n, x: x * n)
    n, x = (node for node in gm.graph.nodes if node.op == "placeholder")
    with FakeTensorMode():
        n.meta["val"], x.meta["val"] = torch.empty(()), torch.empty(4, device="cuda")
    assert describe(gm).device == "cuda"  # a CPU scalar beside it does not say CPU
    with FakeTensorMode():
        x.meta["val"] = torch.empty(4)
    assert describe(gm).device == "cpu"


def _inductor_step(ex, **kw):
    be = budget.backend(**kw)
    return torch.compile(ex.step, backend=be), be


@pytest.mark.slow
# with -m full: the default run checks b=0.1's code of this GPT, exactly, in
# tests/compile/test_reuse.py (neutral reuse, the default); b=1's (torch's own saved set)
# is read as b=0.1's is
@pytest.mark.parametrize("b", [1.0, 0.1])
@pytest.mark.full
def test_compiled_peak_is_the_measured_peak_of_the_builtin_gpt(b):
    """Inductor fuses the GPT's pointwise ops, so the graphs' prediction is over
    the measured peak; the peak of its generated code is the measured peak."""
    torch._dynamo.reset()
    ex = get_builtin("gpt", layers=1, d=128, seq=128, batch=2)
    step, be = _inductor_step(ex, memory_budget=b)
    measured = measure_peak(step, *ex.args)
    plan = be.plans[0]
    assert plan.compiled_peak_bytes is not None
    assert abs(plan.compiled_peak_bytes - measured) <= 1 * KiB


def _requested_peak(step, *args) -> int:
    """Bytes requested from CUDA's caching allocator at the peak of one step (forward and
    backward), above those before it, after a warm-up step (compilation, the first
    ``.grad``, cuBLAS's workspace). Requested, not allocated: the allocator rounds each
    block up to 512 bytes, which the compiled peak does not model."""
    step(*args).backward()
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["requested_bytes.all.current"]
    torch.cuda.reset_peak_memory_stats()
    step(*args).backward()
    torch.cuda.synchronize()
    return torch.cuda.memory_stats()["requested_bytes.all.peak"] - before


@pytest.mark.slow
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; there is none")
@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
def test_compiled_peak_of_cuda_code_is_the_measured_peak_of_the_builtin_gpt(autocast):
    """Inductor's CUDA wrapper code (Triton kernels, cuBLAS matmuls, ATen's attention) run
    on meta tensors predicts the step's peak on the GPU, to 1% and 16 KiB of the bytes
    requested from the caching allocator. The step peaks inside an attention backward
    (efficient attention in fp32, cuDNN's under bf16 autocast), whose own allocations
    are measured on the GPU (budget.estimators.cuda_workspace)."""
    torch._dynamo.reset()
    ex = get_builtin("gpt", layers=2, d=128, seq=128, batch=2)
    ex.model.to("cuda")
    args = tuple(a.to("cuda") for a in ex.args)
    inner = ex.step
    if autocast:

        def bf16_step(*a):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return inner(*a)

        ex.step = bf16_step
    step, be = _inductor_step(ex, memory_budget=0.5)
    measured = _requested_peak(step, *args)
    plan = be.plans[0]
    assert plan.compiled_peak_bytes is not None
    assert abs(plan.compiled_peak_bytes - measured) <= 0.01 * measured + 16 * KiB


def _t5():
    pytest.importorskip("transformers")
    from helpers.real_models import make

    torch._dynamo.reset()
    return make("t5")


# 240 s in CI (a 2-core Zen 3): with -m full. The replacement of a plan whose code misses
# is tested with stand-in compiles in test_peak_check.py, and a peak budget checked on the
# compiled code is met as measured on the GPT in tests/cli/test_cli.py
@pytest.mark.full
def test_a_peak_budget_the_graphs_accept_but_the_code_misses_is_met_as_measured():
    """T5 under Inductor: its backward's code holds more at once than its graphs do
    (fused kernels make several layers' values together), so the plan the graphs say
    fits 1050 KiB measured 1219.6 KiB before the compiled code was checked (main at
    3253545, a one-off run). Now the plan
    kept is the one whose code fits, and the step measures under the budget."""
    m = _t5()
    target = 1050 * KiB
    be = budget.backend(peak_memory_budget=f"{target}B")
    step = torch.compile(m.step, backend=be)
    measured = measure_peak(step, *m.args)
    plan = be.plans[0]
    assert len(be.plans) == 1
    assert plan.compiled_peak_bytes is not None and plan.compiled_peak_bytes <= target
    assert measured <= target
    assert abs(plan.compiled_peak_bytes - measured) <= 1 * KiB


@pytest.mark.full  # about 50 s; the rule itself: test_fusion.py, on a toy
def test_t5s_first_plan_for_a_peak_budget_compiles_at_its_prediction(monkeypatch):
    """T5's backward sums each layer's attention gradient over the batch (2) for its shared
    position bias, and the embedding's backward reads the sums at the graph's end. Inductor's
    own rule unrolls sums that short into their reader, which holds each gradient to there,
    above the search's first plan's prediction for 1000 KiB (then the search compiles other
    plans). budget's compiles unroll no reduction (compile/fusion.py): the first plan's code
    peaks no higher than its prediction, one compile, and the step measures under the
    budget."""
    from budget.core.settings import PlanLog

    m = _t5()
    target = 1000 * KiB
    peaks: list[int | None] = []  # each plan's code peak as the log is told it (a compile's,
    # or a return's to a plan compiled before)
    real = PlanLog.update

    def counted(self, index, **told):  # type: ignore[no-untyped-def]
        if "compiled_peak_bytes" in told:
            peaks.append(told["compiled_peak_bytes"])
        return real(self, index, **told)

    monkeypatch.setattr(PlanLog, "update", counted)
    be = budget.backend(peak_memory_budget=f"{target}B")
    measured = measure_peak(torch.compile(m.step, backend=be), *m.args)
    (plan,) = be.plans
    assert len(peaks) == 1, [p and p / KiB for p in peaks]
    assert plan.compiled_peak_bytes <= plan.peak_bytes <= target
    assert measured <= target
    assert abs(plan.compiled_peak_bytes - measured) <= 1 * KiB


@pytest.mark.full  # 157 s in CI; the refusal itself: test_peak_check.py, with stand-in compiles
def test_a_peak_budget_below_every_compiled_peak_is_refused_naming_the_lowest():
    m = _t5()
    # under the lowest compiled peak the search finds, over the lowest prediction: the
    # graphs accept it, and every plan's code misses it
    target = 870 * KiB
    be = budget.backend(peak_memory_budget=f"{target}B")
    step = torch.compile(m.step, backend=be)
    with pytest.raises(Exception) as info:
        step(*m.args)
    from budget.compile.backend import root_error

    error = root_error(info.value)
    assert isinstance(error, budget.BudgetTooSmallError)
    assert error.lowest_peak_bytes is not None and error.lowest_peak_bytes > target
    assert "code Inductor generated" in str(error)
    assert be.plans == []  # no plan kept, none reported


@pytest.mark.full  # several compiles of the built-in GPT (minutes); the search: test_peak_check.py
def test_a_peak_budget_a_fractions_plan_meets_is_met_though_the_graphs_rank_it_higher():
    """The built-in GPT under Inductor: b=0.1's plan is predicted above the lowest
    prediction, and its code peaks lowest of all. A budget just above that peak, which no
    plan the graphs' search gives meets, is met by it as measured."""
    ex = get_builtin("gpt")
    torch._dynamo.reset()
    low = budget.backend(0.1)
    lowest = measure_peak(torch.compile(ex.step, backend=low), *ex.args)
    assert abs(low.plans[0].compiled_peak_bytes - lowest) <= 1 * KiB
    torch._dynamo.reset()
    target = lowest + 256 * KiB
    be = budget.backend(peak_memory_budget=f"{target}B")
    measured = measure_peak(torch.compile(ex.step, backend=be), *ex.args)
    assert measured <= target
    assert abs(be.plans[0].compiled_peak_bytes - measured) <= 1 * KiB


def test_random_ops_replayed_in_a_recomputation_are_run_on_meta_tensors():
    """A checkpointed region's random op (CPU attention carries the tag) runs under torch's
    run_and_save_rng_state and, recomputed, run_with_rng_state: higher-order ops the meta
    run runs as their op, the generator state saved counted. The backward's inputs named
    apart from the forward's outputs (rng_state_output_i) are handed over by position and
    freed where the code frees them, not held to the step's end: the code's peak is the
    measured one."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    qkv, out = torch.nn.Linear(32, 96), torch.nn.Linear(32, 32)

    def block(x):
        q, k, v = qkv(x).view(2, 16, 3, 2, 16).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + out(a.transpose(1, 2).reshape(2, 16, 32))

    def step(x):
        return checkpoint(block, x, use_reentrant=False).square().sum()

    x = torch.randn(2, 16, 32)
    be = budget.backend(0.5, compiler="inductor")
    compiled = torch.compile(step, backend=be)
    compiled(x).backward()
    (plan,) = be.plans
    assert plan.rng_state_bytes > 0 and plan.compiled_peak_bytes is not None
    measured = measure_peak(compiled, x)
    assert measured <= plan.compiled_peak_bytes <= measured * 1.01


def test_a_fallback_kernel_run_by_inductors_code_is_measured_on_the_cpu():
    """Grid sampling's backward is an ATen kernel Inductor's code calls; given the
    gradient a convolution's backward lays out channels-last, the CPU kernel copies it
    (budget.estimators.prim_workspace, measured on zeros of the call's layouts while the
    code runs on meta tensors): the code's peak is the measured one."""
    import torch.nn.functional as F

    torch._dynamo.reset()
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(8, 8, 3, padding=1)
    theta = torch.tensor([[1.0, 0.1, 0.0], [0.0, 1.0, 0.1]]).expand(4, 2, 3)

    def step(x):  # type: ignore[no-untyped-def]
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return conv(F.grid_sample(x, grid, align_corners=False)).relu().square().mean()

    be = budget.backend(memory_budget=0.0)
    x = torch.randn(4, 8, 32, 32, requires_grad=True)
    measured = measure_peak(torch.compile(step, backend=be), x)
    assert be.plans[0].compiled_peak_bytes == measured
