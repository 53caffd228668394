"""The backward's paths for real tensors on fake ones (budget.eager.backward_paths): the
in-place and out-of-place work a fake backward runs, against the real step's as
torch.profiler records it (no dispatch mode active, so torch decides as in training)."""

from __future__ import annotations

import copy
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from helpers.steps import assert_same_grads
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.profiler import profile
from torch.utils._python_dispatch import TorchDispatchMode

import budget
from budget.eager.backward_paths import IN_PLACE, BackwardPaths, exclusive_counts
from budget.runtime.measure import measure_peak

# the ops whose in-place and out-of-place forms are told apart; the real index backward
# calls index_put_'s implementation directly
WATCHED = {"add"} | {op for ops in IN_PLACE.values() for op in ops}
NAMES = {"_index_put_impl_": "index_put_"}

# each a loss of h (32 x 16, the output of a Linear), two Linears q, k and fixed data d
SUMS = {
    # two fresh gradients of h: the second summed into the first, in place
    "two-matmuls": lambda h, q, k, d: (q(h) * k(h)).sum(),
    # three: both sums in place
    "three-matmuls": lambda h, q, k, d: (q(h) * k(h) * q(h.relu())).sum(),
    # a residual: the add's node gives its gradient to h and to q's output
    "residual": lambda h, q, k, d: (h + q(h)).square().sum(),
    # the same gradient twice into one input: the engine holds it twice, out of place
    "twice": lambda h, q, k, d: (h + h).square().sum(),
    # the gradient of a sum is expanded (not dense): out of place
    "expanded": lambda h, q, k, d: (q(h) * k(h)).sum() + h.sum(),
    # a gradient the user keeps (retain_grad) is held by more than the engine
    "retained": lambda h, q, k, d: (_retained(h) * k(h)).sum(),
}
# one case per formula of IN_PLACE (and its variants), each weighted so its incoming
# gradient is dense
FORMULAS = {
    "index": lambda h, q, k, d: h[:, d["idx"]],
    "gather": lambda h, q, k, d: h.gather(1, d["idx2"]),
    "index_select": lambda h, q, k, d: h.index_select(0, d["idx"]),
    "take": lambda h, q, k, d: h.take(d["idx"]),
    "trace": lambda h, q, k, d: h[:16].trace().reshape(1),
    "cummax": lambda h, q, k, d: h.cummax(1).values,
    "cummin": lambda h, q, k, d: h.cummin(1).values,
    "max-dim": lambda h, q, k, d: h.max(1).values,
    "min-dim": lambda h, q, k, d: h.min(1).values,
    "sort": lambda h, q, k, d: h.sort(1).values,
    "topk": lambda h, q, k, d: h.topk(3, 1).values,
    "kthvalue": lambda h, q, k, d: h.kthvalue(3, 1).values,
    "median-dim": lambda h, q, k, d: h.median(1).values,
    "nanmedian-dim": lambda h, q, k, d: h.nanmedian(1).values,
    "mode": lambda h, q, k, d: h.round().mode(1).values,
    "atan2": lambda h, q, k, d: torch.atan2(q(h), k(h)),
    "clamp-tensors": lambda h, q, k, d: h.clamp(q(h), k(h) + 1),
    "bce-logits": lambda h, q, k, d: F.binary_cross_entropy_with_logits(h, d["t"]),
    "bce-logits-weights": lambda h, q, k, d: F.binary_cross_entropy_with_logits(
        h, d["t"], weight=d["w"], pos_weight=d["pw"]
    ),
    "bce-target": lambda h, q, k, d: F.binary_cross_entropy(d["t"], h.sigmoid()),
}


def _watched(event: object) -> str | None:
    """The watched op a profiler event is (its name as the fake run dispatches it)."""
    name = getattr(event, "name", "")
    op = NAMES.get(name.removeprefix("aten::"), name.removeprefix("aten::"))
    return op if name.startswith("aten::") and op.rstrip("_") in WATCHED else None


def _retained(h: torch.Tensor) -> torch.Tensor:
    h.retain_grad()
    return h


class _Log(TorchDispatchMode):
    """Records the watched ops a fake backward runs (below BackwardPaths)."""

    def __init__(self) -> None:
        super().__init__()
        self.on, self.seen = False, Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = func.name().split("::")[1].split(".")[0]  # the op, its overload aside
        if self.on and name.rstrip("_") in WATCHED:
            self.seen[name] += 1
        return func(*args, **(kwargs or {}))


def _modules() -> tuple[nn.Module, ...]:
    torch.manual_seed(0)
    return nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16)


def _data() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return {
        "idx": torch.tensor([0, 3, 5, 7]),
        "idx2": torch.randint(0, 16, (32, 4), generator=g),
        "mask": torch.rand(32, 16, generator=g) > 0.5,
        "t": torch.rand(32, 16, generator=g),
        "w": torch.rand(16, generator=g),
        "pw": torch.rand(16, generator=g) + 0.5,
    }


def _loss(case: str, h: torch.Tensor, q: nn.Module, k: nn.Module) -> torch.Tensor:
    data = _data()
    if case in SUMS:
        return SUMS[case](h, q, k, data)
    out = FORMULAS[case](h, q, k, data)
    weights = torch.rand(out.shape, generator=torch.Generator().manual_seed(2))
    return (out * weights.to(out.device)).sum()


@pytest.mark.parametrize("case", list(SUMS) + list(FORMULAS))
def test_a_fake_backward_works_in_place_where_the_real_one_does(case):
    p, q, k = _modules()
    loss = _loss(case, p(torch.randn(32, 16)), q, k)
    with profile() as prof:
        loss.backward()
    real = Counter(n for e in prof.events() if (n := _watched(e)) and not _watched(e.cpu_parent))

    counts = exclusive_counts()
    for m in (p, q, k):
        m.zero_grad(set_to_none=True)  # no sums into the parameters' gradients
    with FakeTensorMode(allow_non_fake_inputs=True):
        log, paths = _Log(), BackwardPaths(counts)
        with log, paths:
            loss = _loss(case, p(torch.empty(32, 16)), q, k)
            paths.hook(loss.grad_fn)
            log.on = True
            loss.backward()
    assert real, "the case runs none of the watched ops"
    assert log.seen == real


def _three_projections() -> tuple[nn.Module, torch.Tensor]:
    """A block whose input feeds three projections (attention's q, k and v as separate
    Linears), its backward's peak where their three gradients are summed."""
    torch.manual_seed(0)
    model = nn.Module()
    model.inp = nn.Linear(64, 1024)
    model.blocks = nn.ModuleList(nn.Linear(1024, 16) for _ in range(3))
    return model, torch.randn(512, 64)


@pytest.mark.parametrize("b", [1.0, 0.0])
def test_a_value_read_by_three_projections_is_predicted_with_the_engines_in_place_sums(b):
    """The gradients of the three projections' input are summed in place by the engine:
    the predicted peak is the measured one, and gradients are the unplanned step's."""
    model, x = _three_projections()
    reference = copy.deepcopy(model)

    def step(x):  # type: ignore[no-untyped-def]
        h = model.inp(x).relu()
        q, k, v = (block(h) for block in model.blocks)
        return (q * k * v).square().mean()

    plan = budget.apply(model, x, step=step, memory_budget=b, modules=["blocks.0", "inp"])
    model.zero_grad(set_to_none=True)
    assert plan.peak_bytes == measure_peak(step, x)
    model.zero_grad(set_to_none=True)
    step(x).backward()
    h = reference.inp(x).relu()
    q, k, v = (block(h) for block in reference.blocks)
    (q * k * v).square().mean().backward()
    assert_same_grads(model, reference)


@pytest.mark.parametrize("b", [1.0, 0.0])
def test_a_few_columns_of_a_blocks_output_are_predicted_with_the_in_place_index_backward(b):
    """``out[:, idx]``: its backward makes zeros of ``out``'s size and writes the gradient
    into them in place (for fake tensors out of place, one more of that size), where the
    step peaks."""
    torch.manual_seed(0)
    model = nn.Module()
    model.blocks = nn.ModuleList([nn.Linear(32, 32)])
    x, idx = torch.randn(8, 16, 32), torch.tensor([0, 3, 5, 7])

    def step(x):  # type: ignore[no-untyped-def]
        return model.blocks[0](x)[:, idx].sum()

    plan = budget.apply(model, x, step=step, memory_budget=b)
    model.zero_grad(set_to_none=True)
    assert plan.peak_bytes == measure_peak(step, x)


@pytest.mark.parametrize("reduction", ["max", "min", "median", "nanmedian"])
def test_a_full_reductions_backward_takes_the_cpus_path(reduction):
    """``h / h.max()``: on the CPU the backward of a full max, min or (nan)median fills zeros of
    the input's size where the input equals the result (after the mask, before its sum);
    for fake tensors torch multiplies a mask instead. The fake run takes the CPU's path:
    the peak is predicted, but for one byte the fake run holds longer (the result's
    ``isnan``)."""
    torch.manual_seed(0)
    model = nn.Module()
    model.blocks = nn.ModuleList([nn.Linear(256, 256), nn.Linear(256, 256)])
    x = torch.randn(512, 256)

    def step(x):  # type: ignore[no-untyped-def]
        h = model.blocks[1](model.blocks[0](x).relu())
        return (h / getattr(h, reduction)()).sum()

    plan = budget.apply(model, x, step=step, memory_budget=0.0)
    model.zero_grad(set_to_none=True)
    measured = measure_peak(step, x)
    assert measured <= plan.peak_bytes <= measured + 1


def test_device_queries_are_answered_above_the_modes_below(monkeypatch):
    """C++ asks a fake tensor its device through the dispatcher (the engine, per gradient):
    the top mode answers, with the fake device, so none passes down the fake run's modes
    (the live bytes' among them), and the prediction stays the measured peak."""
    from budget.eager.backward_paths import DEVICE
    from budget.eager.peak import _Live

    asked, passed = Counter(), Counter()
    top, below = BackwardPaths.__torch_dispatch__, _Live.__torch_dispatch__

    def counting(seen, dispatch):  # type: ignore[no-untyped-def]
        def wrapped(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen[func is DEVICE] += 1
            out = dispatch(self, func, types, args, kwargs)
            if func is DEVICE:
                assert out == args[0].fake_device and out.type == "cpu"
            return out

        return wrapped

    monkeypatch.setattr(BackwardPaths, "__torch_dispatch__", counting(asked, top))
    monkeypatch.setattr(_Live, "__torch_dispatch__", counting(passed, below))
    model, x = _three_projections()

    def step(x):  # type: ignore[no-untyped-def]
        h = model.inp(x).relu()
        return (model.blocks[0](h) * model.blocks[1](h)).square().mean()

    plan = budget.eager.plan(model, x, step=step, memory_budget=0.0, modules=["blocks.0"])
    assert asked[True] > 0 and asked[False] > 0 and passed[False] > 0
    assert passed[True] == 0
    model.zero_grad(set_to_none=True)
    assert plan.peak_bytes == measure_peak(step, x)
