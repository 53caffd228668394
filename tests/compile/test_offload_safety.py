"""The offload guards (budget.compile.offload_safety), on a CPU: Inductor's code of a forward
with torch's offload ops read, not run (the ops need a GPU), and a CPU step made to count as
one whose backward frees its host copies."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch
import torch._functorch._activation_offloading.offload_ops  # noqa: F401 - the ao ops
from torch.fx.experimental.proxy_tensor import make_fx

import budget
from budget.compile.compiled_peak import CodeCapture

wait, offload = torch.ops.ao.wait_tensor.default, torch.ops.ao.offload.default


def _graph(f: Callable, n: int = 256) -> tuple[torch.fx.GraphModule, list[torch.Tensor]]:
    """``f(x, w)`` traced on fake tensors, and the inputs to compile it for."""
    x, w = torch.randn(n, n), torch.randn(n, n)
    return make_fx(f, tracing_mode="fake")(x, w), [x, w]


def _code(gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> list[str]:
    """The lines of the forward's code Inductor generates for ``gm`` (CPU)."""
    capture = CodeCapture()
    capture(gm, inputs)
    return capture.graphs["forward"].source.splitlines()


def _freed_after_reads(lines: list[str]) -> list[str]:
    """The buffers the code's waits free, each asserted read by a matmul before its wait
    and named after it only by its ``del``."""
    freed = [
        (i, m.group(1))
        for i, line in enumerate(lines)
        if (m := re.search(r"ao\.wait_tensor\.default\(\w+, (\w+)", line))
    ]
    for i, buf in freed:
        assert any(f"mm({buf}," in line for line in lines[:i]), buf  # read before its wait
        later = [line.strip() for line in lines[i + 1 :] if re.search(rf"\b{buf}\b", line)]
        assert all(line == f"del {buf}" for line in later), (buf, later)
    return [buf for _, buf in freed]


def test_under_inductor_no_wait_runs_before_a_read_of_the_storage_it_frees():
    # A wait only reads its keepalive, as the value's other readers do: nothing in the
    # data orders it after them, and Inductor ran one before the matmul reading the value
    # it frees (resize_(0)). The waits are pinned after those reads in the graph Inductor
    # compiles; here Inductor's CPU code is read, not run (the ao ops need a GPU).
    from budget.compile.offload import Timing, place_waits

    def f(x, w):
        a = (x @ w).relu()
        off_a = offload(a)
        b = (a @ w).relu()
        off_b = offload(b)
        e = ((b @ w).relu() @ w).relu()
        return e, wait(off_a, a), wait(off_b, b)

    gm, inputs = _graph(f)
    # instant copies: each wait right after its value's last read, a matmul
    place_waits(gm, Timing(budget.estimators.get_estimator("flops:h100"), link=1e15))
    assert len(_freed_after_reads(_code(gm, inputs))) == 2


def test_only_a_gpu_steps_side_stream_offload_frees_the_host_copies(monkeypatch):
    from helpers.plans import make_plan
    from torch._subclasses.fake_tensor import FakeTensorMode

    from budget.compile import offload, offload_safety

    plain = make_plan()
    moving = make_plan()
    next(d for d in moving.decisions if d.decision == "save").decision = "offload"
    with FakeTensorMode():
        on_gpu = [torch.empty(4, device="cuda")]
    on_cpu = [torch.empty(4)]
    assert offload_safety.frees_host_copies([plain, moving], on_gpu)
    assert not offload_safety.frees_host_copies([plain], on_gpu)  # nothing offloaded
    assert not offload_safety.frees_host_copies([moving], on_cpu)  # plain copies, kept
    monkeypatch.setattr(offload, "SIDE_STREAM", False)  # copies on the compute stream
    assert not offload_safety.frees_host_copies([moving], on_gpu)


def test_a_second_backward_through_a_step_whose_backward_frees_host_copies_is_refused(
    monkeypatch,
):
    # torch's side-stream pass hands each host copy back once reloaded: a second backward
    # would read freed memory (on a CPU, resize_(0) then a copy from it crashes Python).
    # Here the CPU step is made to count as such a GPU step.
    from budget.compile import offload_safety

    monkeypatch.setattr(offload_safety, "frees_host_copies", lambda plans, inputs: True)
    torch.manual_seed(0)
    model, x = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU()), torch.randn(4, 16)
    step = torch.compile(lambda x: model(x).pow(2).sum(), backend=budget.backend(0.5))
    loss = step(x)
    loss.backward(retain_graph=True)
    with pytest.raises(budget.OffloadError, match="second backward .* Backpropagate once"):
        loss.backward()
    step(x).backward()  # the next step's backward runs, once
    grads = torch.autograd.grad(step(x), list(model.parameters()))
    assert all(g is not None for g in grads)


def test_under_inductor_a_wait_stays_after_reads_its_rewrites_move_onto_the_value():
    # Inductor drops a clone (a no-op to it): the matmul reading the clone reads the
    # offloaded value itself, so its wait is pinned on the graph Inductor lowers
    def f(x, w):
        a = (x @ w).relu()
        off = offload(a)
        c = a.clone()
        done = wait(off, a)  # after a's last read, in this graph
        return (c @ w).relu(), done

    lines = _code(*_graph(f))
    assert not any("clone" in line for line in lines)  # the matmul reads a itself
    assert len(_freed_after_reads(lines)) == 1


def test_under_inductor_a_forward_returning_what_a_wait_frees_is_refused():
    # the clone returned is a no-op to Inductor: the forward would hand out the storage
    # the wait empties
    from budget.compile.backend import root_error

    def f(x, w):
        a = (x @ w).relu()
        off = offload(a)
        kept = a.clone()
        return kept, wait(off, a)

    with pytest.raises(Exception) as info:
        _code(*_graph(f, 64))
    error = root_error(info.value)
    assert isinstance(error, budget.OffloadError)
    assert "returns relu, in the storage that offloading relu frees" in str(error)
