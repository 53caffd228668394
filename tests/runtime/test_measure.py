"""runtime/measure.py: saved bytes counted by device; steps measured with the collector paused."""

import gc

import pytest
import torch

from budget.eager.measure import retained_bytes
from budget.runtime.measure import measure_peak, saved_bytes


def _step(x: torch.Tensor) -> torch.Tensor:
    return (x.sin() * 2).sum()  # sin saves its input (x: an argument, not counted)...


def _kept(x: torch.Tensor) -> torch.Tensor:
    y = x * 3  # ...and this saves y: 16 floats, new memory
    return y.sin().sum()


def test_counts_only_the_device_asked_for():
    x = torch.ones(16, requires_grad=True)
    assert saved_bytes(_kept, x).saved_bytes == 64
    assert saved_bytes(_kept, x, on=torch.device("cpu")).saved_bytes == 64
    assert saved_bytes(_kept, x, on=torch.device("meta")).saved_bytes == 0
    assert saved_bytes(_step, x).saved_bytes == 0


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_without_an_index_is_the_current_device():
    x = torch.ones(16, device="cuda", requires_grad=True)
    assert saved_bytes(_kept, x, on=torch.device("cuda")).saved_bytes == 64
    assert saved_bytes(_kept, x, on=torch.device("cpu")).saved_bytes == 0


def _pending_block(nbytes: int) -> None:
    """Free a CUDA block another stream used (``record_stream``), as offload copies do: the
    allocator keeps it counted until it next processes events."""
    side = torch.cuda.Stream()
    t = torch.empty(nbytes // 4, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        t.add_(1)
    t.record_stream(side)
    del t
    torch.cuda.synchronize()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_block_freed_after_another_streams_use_is_not_in_the_next_steps_baseline():
    x = torch.ones(1 << 20, device="cuda", requires_grad=True)
    settled = measure_peak(_kept, x, requested=True)
    _pending_block(8 << 20)
    assert measure_peak(_kept, x, warmup=0, requested=True) == settled
    _pending_block(8 << 20)
    assert retained_bytes(_kept, x).retained_bytes == 4 << 20  # y = x * 3, saved by sin


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize(
    "measure",
    ["peak", "retained", pytest.param("peak-cuda", marks=[pytest.mark.cuda, CUDA])],
)
def test_no_garbage_collection_runs_in_the_middle_of_a_measured_step(measure):
    """A collection there would free older garbage in the step and take its bytes off the
    step's: the step runs with the collector off, which is back on afterwards."""
    seen = []

    def step(x):
        seen.append(gc.isenabled())
        return (x * 2).sin().sum()

    device = "cuda" if measure.endswith("cuda") else "cpu"
    x = torch.ones(64, requires_grad=True, device=device)
    assert gc.isenabled()
    if measure.startswith("peak"):
        measure_peak(step, x, warmup=0)
    else:
        retained_bytes(step, x).output.backward()
    assert seen == [False] and gc.isenabled()


def test_planning_inside_a_users_profiler_measures_nothing_and_keeps_the_session():
    """A kernel's workspace is measured with a profiler of its own, which would end a
    session the user is recording: inside one nothing is measured or kept (the call is
    priced unmeasured), and the user's profile keeps its events."""
    import budget.eager
    from budget.estimators import prim_workspace

    torch.manual_seed(0)
    model = torch.nn.Module()
    model.blocks = torch.nn.ModuleList(
        torch.nn.Sequential(torch.nn.Linear(24, 24), torch.nn.GELU()) for _ in range(2)
    )

    def step(x):  # type: ignore[no-untyped-def]
        for block in model.blocks:
            x = block(x)
        return torch.nn.functional.gelu(x).sum()  # gelu's backward on an expanded gradient

    x = torch.randn(3, 7, 24)
    kept = dict(prim_workspace._MEMO)
    with torch.profiler.profile() as prof:
        budget.eager.plan(model, x, step=step, memory_budget=1.0)
        torch.ones(3).add_(1)  # recorded after the plan: the session is still open
    assert kept == prim_workspace._MEMO
    assert any(e.name == "aten::add_" for e in prof.events())
    budget.eager.plan(model, x, step=step, memory_budget=1.0)
    assert len(prim_workspace._MEMO) > len(kept)  # outside a session: measured and kept
