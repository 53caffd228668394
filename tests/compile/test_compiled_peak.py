"""The peak of the code Inductor generates (budget.compile.compiled_peak), and peak budgets
checked on it (budget.backend under Inductor).

Oracles: a hand-written wrapper whose allocations are counted by hand, and the step's
peak measured by torch.profiler's memory events (budget.compile.measure.measure_peak),
which shares no code with the meta-tensor run of the wrapper.
"""

from __future__ import annotations

import pytest
import torch

import budget
from budget.compile.compiled_peak import CompiledCodeError, CompiledGraph, compiled_peak
from budget.compile.measure import measure_peak
from budget.models import get_builtin

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


def test_the_tangents_are_held_until_the_backward_returns():
    """The code deletes ``tangents_1`` after its last read, but autograd's engine holds the
    gradients it passes the backward until it returns (a step's loss gradient is freed
    after the last AccumulateGrad, in torch.profiler's events): a 1 KiB tangent is still
    live when the backward makes its 4 KiB gradient and a 1 KiB product, with the 2 KiB
    saved value and the loss: 8 KiB + 4 bytes."""
    early_free = BACKWARD.replace(
        "        args.clear()\n", "        args.clear()\n        del tangents_1\n", 1
    ).replace("        del tangents_1\n        buf1", "        buf1")
    assert early_free.index("del tangents_1") < early_free.index("buf0 =")
    fw = CompiledGraph(FORWARD, ["x"], ["loss", "saved"], {"x": torch.empty(8, 8)})
    bw = CompiledGraph(
        early_free, ["saved", "tangents_1"], [None, None], {"tangents_1": torch.empty(256)}
    )
    assert compiled_peak(fw, bw) == 2 * KiB + 4 + 1 * KiB + 4 * KiB + 1 * KiB


def test_code_it_cannot_run_is_an_error_saying_so():
    fw = CompiledGraph("x = 1\n", ["x"], [None], {"x": torch.empty(1)})
    with pytest.raises(CompiledCodeError, match="no Python call"):
        compiled_peak(fw, None)
    broken = FORWARD.replace("torch.float32)  # 2 KiB", "torch.float32, 'no such')  # 2 KiB")
    fw = CompiledGraph(broken, ["x"], ["loss", "saved"], {"x": torch.empty(8, 8)})
    with pytest.raises(CompiledCodeError, match="forward code failed"):
        compiled_peak(fw, None)
    cuda = FORWARD.replace("empty_strided_cpu((256", "empty_strided_cuda((256")
    fw = CompiledGraph(cuda, ["x"], ["loss", "saved"], {"x": torch.empty(8, 8)})
    with pytest.raises(CompiledCodeError, match="not CPU code"):  # nothing allocated on a GPU
        compiled_peak(fw, None)


def _inductor_step(ex, **kw):
    be = budget.backend(**kw)
    return torch.compile(ex.step, backend=be), be


@pytest.mark.slow
@pytest.mark.parametrize("b", [1.0, 0.1])
def test_compiled_peak_is_the_measured_peak_of_the_builtin_gpt(b):
    """Inductor fuses the GPT's pointwise ops, so the graphs' prediction is 9-22% over
    the measured peak; the peak of its generated code is the measured peak."""
    torch._dynamo.reset()
    ex = get_builtin("gpt", layers=2, d=128, seq=128, batch=2)
    step, be = _inductor_step(ex, memory_budget=b)
    measured = measure_peak(step, *ex.args)
    plan = be.plans[0]
    assert plan.compiled_peak_bytes is not None
    assert abs(plan.compiled_peak_bytes - measured) <= 1 * KiB


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


@pytest.mark.full  # 157 s in CI; the refusal itself: test_peak_check.py, with stand-in compiles
def test_a_peak_budget_below_every_compiled_peak_is_refused_naming_the_lowest():
    m = _t5()
    target = 900 * KiB
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
