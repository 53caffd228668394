"""Offload on the compiled path, on a CPU: a hand-made plan's offloaded values leave the
partitioned forward through torch's own offload pass (its device_put ops, which run on a
CPU as copies) and come back in the backward, for exactly the planned values, and the
step's gradients equal the unplanned step's."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from helpers.partitions import capture
from helpers.small import small_gpt
from helpers.steps import grads_of

import budget
from budget.core.plan import Plan
from budget.errors import PlanMismatchError


def offloading(plan: Plan, names: set[str]) -> Plan:
    """``plan`` with ``names`` (saved, each in a storage of its own) offloaded."""
    moved = [d for d in plan.decisions if d.name in names]
    assert {d.name for d in moved} == names and all(d.decision == "save" for d in moved)
    return dataclasses.replace(
        plan,
        decisions=[
            dataclasses.replace(d, decision="offload") if d.name in names else d
            for d in plan.decisions
        ],
        saved_bytes=plan.saved_bytes - sum(d.bytes for d in moved),
        offloaded_bytes=sum(d.bytes for d in moved),
    )


def movable(plan: Plan, k: int) -> set[str]:
    """``k`` of the plan's saved values in storages of their own, largest first (what the
    plan saves depends on the host's measured rates: the flops estimator prices a CPU)."""
    own = sorted(
        (d for d in plan.decisions if d.decision == "save" and d.bytes > 0),
        key=lambda d: (-d.bytes, d.name),
    )
    assert len(own) >= k
    return {d.name for d in own[:k]}


def _ops(gm: torch.fx.GraphModule, prefix: str) -> set[str]:
    return {
        n.name.removeprefix(prefix)
        for n in gm.graph.nodes
        if n.name.startswith(prefix) and n.target is torch.ops.prims.device_put.default
    }


@pytest.fixture(scope="session")  # built once per worker: tests/conftest.py
def gpt_plan():
    ex = small_gpt()
    (plan,) = budget.plans(ex.step, *ex.args, compiler="eager", memory_budget=0.5)
    return ex, plan


def test_the_partitioned_graphs_offload_and_reload_exactly_the_planned_values(gpt_plan):
    ex, plan = gpt_plan
    chosen = movable(plan, 3)
    made = offloading(plan, chosen)
    assert made.offloaded == sorted(chosen, key=[d.name for d in plan.decisions].index)
    cap = capture(ex, compiler="eager")
    fw, bw, told = cap.partitions.graphs(made)
    assert _ops(fw, "cpu_offload_") == chosen
    assert _ops(bw, "gpu_reload_") == chosen
    assert told.saved_bytes == plan.saved_bytes - made.offloaded_bytes
    assert told.offloaded == made.offloaded


def test_gradients_under_an_offload_plan_equal_the_unplanned_steps(gpt_plan):
    ex, plan = gpt_plan
    made = offloading(plan, movable(plan, 4))
    params = [p for p in ex.model.parameters()]
    _, want = grads_of(ex.step, params, *ex.args)
    be = budget.backend(plan=[made], compiler="eager")
    step = torch.compile(ex.step, backend=be)
    _, got = grads_of(step, params, *ex.args)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    (used,) = be.plans
    assert used.offloaded == made.offloaded and used.saved_bytes == made.saved_bytes


def test_offloading_a_view_is_refused_by_name(gpt_plan):
    ex, plan = gpt_plan
    view = next(d.name for d in plan.decisions if d.decision == "save" and "permute" in d.op)
    made = offloading(plan, {view})
    cap = capture(ex, compiler="eager")
    with pytest.raises(PlanMismatchError, match=f"does not move {view}"):
        cap.partitions.graphs(made)


# A wide MLP: its matmuls' compute on an H100 hides the copies of their outputs, so
# planned for an H100 at budget 0 the exact solver offloads rather than recomputes.
def wide_mlp():
    from budget.models import mlp

    return mlp(batch=16, d_in=64, d=4096, layers=3, classes=10)


def test_planned_for_a_gpu_offload_replaces_recomputation_and_keeps_gradients():
    ex = wide_mlp()
    opts = {"compiler": "eager", "memory_budget": 0.0, "estimator": "flops:h100"}
    (without,) = budget.plans(ex.step, *ex.args, **opts)
    (planned,) = budget.plans(ex.step, *ex.args, offload=True, **opts)
    assert without.offloaded == [] and planned.offloaded
    assert planned.saved_bytes <= planned.target_bytes
    assert planned.total_recompute_cost < without.total_recompute_cost
    assert planned.offloaded_bytes == sum(
        d.bytes for d in planned.decisions if d.decision == "offload"
    )
    assert "kept in host" in str(planned)

    params = list(ex.model.parameters())
    _, want = grads_of(ex.step, params, *ex.args)
    be = budget.backend(0.0, compiler="eager", estimator="flops:h100", offload=True)
    _, got = grads_of(torch.compile(ex.step, backend=be), params, *ex.args)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
    (trained,) = be.plans
    assert trained.offloaded == planned.offloaded


def test_offload_on_the_host_cpu_is_refused_with_what_to_do():
    ex = wide_mlp()
    with pytest.raises(budget.OffloadError, match="host CPU.*estimator='flops:h100'"):
        budget.plans(ex.step, *ex.args, compiler="eager", offload=True)
    with pytest.raises(budget.OffloadError, match="needs a time estimator"):
        budget.plans(ex.step, *ex.args, compiler="eager", offload=True, estimator="unit")


def test_copies_without_a_side_stream_are_priced_in_full_and_lose_to_recomputing(monkeypatch):
    # the wide MLP's copies hide behind compute on a side stream; on the compute stream
    # each costs its two copies, more than recomputing the matmul that made it
    import budget.compile.offload as offload

    ex = wide_mlp()
    opts = {"compiler": "eager", "memory_budget": 0.0, "estimator": "flops:h100"}
    (hidden,) = budget.plans(ex.step, *ex.args, offload=True, **opts)
    monkeypatch.setattr(offload, "SIDE_STREAM", False)
    (exposed,) = budget.plans(ex.step, *ex.args, offload=True, **opts)
    (without,) = budget.plans(ex.step, *ex.args, **opts)
    assert hidden.offloaded and hidden.offload_cost == 0.0
    assert exposed.offloaded == [] and exposed.total_recompute_cost == without.total_recompute_cost
    saved = hidden.total_recompute_cost - without.total_recompute_cost  # negative: less recomputed
    assert 2 * hidden.offload_transfer > -saved  # the copies would cost more, exposed


# below b=0's peak, plans that recompute (or offload) more: at 0.84 the offload plan is
# strictly cheaper; at 0.92 (-m full) both are as cheap
@pytest.mark.parametrize("k", [0.84, pytest.param(0.92, marks=pytest.mark.full)])
def test_under_a_peak_budget_offload_never_costs_more_than_recomputing_alone(k):
    # the grid with offload walks other plans than the grid without (its copies in flight
    # peak otherwise), so both are searched and the cheaper kept: at every peak budget the
    # offload plan costs at most the recompute-only plan, and here somewhere less
    from budget.models import get_builtin

    ex = get_builtin("gpt", layers=2, seq=64, batch=4)
    opts = {"compiler": "eager", "estimator": "flops:h100"}
    (b0,) = budget.plans(ex.step, *ex.args, memory_budget=0.0, **opts)
    peak = int(b0.peak_bytes * k)
    (plain,) = budget.plans(ex.step, *ex.args, peak_memory_budget=f"{peak}B", **opts)
    (moved,) = budget.plans(ex.step, *ex.args, peak_memory_budget=f"{peak}B", offload=True, **opts)
    assert moved.peak_bytes <= peak and plain.peak_bytes <= peak
    assert moved.total_recompute_cost <= plain.total_recompute_cost + 1e-12
    if k == 0.84:
        assert moved.offloaded and moved.total_recompute_cost < plain.total_recompute_cost


def test_a_value_whose_storage_the_user_gets_back_is_never_offloaded():
    # torch's side-stream pass frees an offloaded storage once its copy is done: a view of
    # it returned to the user would be left without memory. relu's storage is returned
    # (a view of it), the other wide activations are not.
    torch.manual_seed(0)
    w1, w2 = torch.randn(64, 4096, requires_grad=True), torch.randn(4096, 4096, requires_grad=True)

    def step(x):
        h = torch.relu(x @ w1)
        g = torch.tanh(h @ w2)
        return (g * g).sum(), h[:, :8]

    x = torch.randn(16, 64)
    opts = {"compiler": "eager", "memory_budget": 0.0, "estimator": "flops:h100"}
    (planned,) = budget.plans(step, x, offload=True, **opts)
    assert planned.offloaded and "relu" not in planned.offloaded


class OnGPU:
    """The wide MLP's joint graph made a CUDA step's (fake tensors), partitioned with its
    b=1 saved set and its saved addmm outputs offloaded, as torch's side-stream pass does
    it on a GPU; here, where there is none."""

    def __init__(self) -> None:
        from torch._subclasses.fake_tensor import FakeTensorMode

        self.parts = capture(wide_mlp(), compiler="eager").partitions
        self.mode = FakeTensorMode(allow_non_fake_inputs=True)  # partitioning runs under one
        with self.mode:
            for n in self.parts.joint_module.graph.nodes:
                v = n.meta.get("val")
                if isinstance(v, torch.Tensor):
                    n.meta["val"] = torch.empty_strided(
                        v.shape, v.stride(), dtype=v.dtype, device="cuda"
                    )
        self.saved = list(self.parts._reference)
        self.moved = frozenset(
            n.name for n in self.saved if n.target is torch.ops.aten.addmm.default
        )
        assert len(self.moved) >= 2

    def graphs(self, timing: Any) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
        from budget.compile.split import extract

        p = self.parts
        with self.mode:
            return extract(p.joint_module, self.saved, p.node_info, 1, self.moved, timing)


def _at(gm: torch.fx.GraphModule, op: Any) -> list[int]:
    """Where ``op``'s calls are among ``gm``'s nodes after its inputs."""
    order = [n for n in gm.graph.nodes if n.op != "placeholder"]
    return [i for i, n in enumerate(order) if n.target is op]


def test_on_a_gpu_torchs_prefetch_places_reloads_by_budgets_timing_not_by_running_nodes():
    # torch's prefetch would run each backward node on the GPU to time it (here: "Torch
    # not compiled with CUDA"); it is told budget's node times instead
    from budget.compile.offload import Timing

    gpu = OnGPU()
    _, bw = gpu.graphs(Timing())  # nothing hides a copy: every reload as the pass starts
    assert _at(bw, torch.ops.ao.reload.default) == list(range(len(gpu.moved)))
    h100 = budget.estimators.get_estimator("flops:h100")
    _, bw = gpu.graphs(Timing(h100, link=50e9))
    slow = _at(bw, torch.ops.ao.reload.default)
    assert len(slow) == len(gpu.moved) and max(slow) > len(gpu.moved)  # each behind one node


def test_on_a_gpu_each_offloaded_value_leaves_the_device_once_its_copy_is_done():
    # torch sinks every offload's wait to the forward's end, holding each offloaded value
    # there; budget places each where its copy is done, and the forward peaks lower
    from budget.compile.offload import Timing
    from budget.compile.peak import predict_peak

    gpu = OnGPU()
    h100 = budget.estimators.get_estimator("flops:h100")
    peaks, waits = [], []
    for link in (None, 50e9):  # unknown link: torch's sink stands
        fw, bw = gpu.graphs(Timing(h100, link))
        waits.append(_at(fw, torch.ops.ao.wait_tensor.default))
        p = predict_peak(fw, bw, num_user_outputs=1, measure_workspace=False)
        peaks.append(max(p.live[: len(fw.graph.nodes)]))
    end = len([n for n in fw.graph.nodes if n.op != "placeholder"]) - 1  # the output
    assert waits[0] == list(range(end - len(gpu.moved), end))
    assert len(waits[1]) == len(gpu.moved) and min(waits[1]) < waits[0][0]
    assert peaks[1] < peaks[0]


def test_an_offload_wait_never_frees_a_storage_a_later_node_still_reads():
    # torch offloads after a value's last use, following views it knows; unbind's are not
    # among them, so a part of ``a`` is read after its offload (mm_4): a's wait goes after
    # that, and does not hold d's, offloaded later, whose storage nothing reads after
    import torch._functorch._activation_offloading.offload_ops  # noqa: F401 - the ao ops
    from torch.fx.experimental.proxy_tensor import make_fx

    from budget.compile.offload import Timing, place_waits

    def f(x, w):
        a = x @ w
        part = a.unbind(0)[0]
        off = torch.ops.ao.offload.default(a)
        d = a.sum(0) @ w
        e = d @ w
        off_d = torch.ops.ao.offload.default(d)
        late = e @ w + part @ w
        waits = torch.ops.ao.wait_tensor.default(off, a), torch.ops.ao.wait_tensor.default(off_d, d)
        return late, *waits  # sunk to the end, as torch's pass leaves them

    gm = make_fx(f, tracing_mode="fake")(torch.randn(2, 64, 64), torch.randn(64, 64))
    place_waits(gm, Timing(budget.estimators.get_estimator("flops:h100"), link=1e15))
    nodes = {n.name: n for n in gm.graph.nodes}
    order = list(nodes)
    assert nodes["getitem"] in nodes["mm_4"].all_input_nodes  # the late read of a's part
    # instant copies: a's would be done after sum_1, d's after mm_3
    assert order.index("mm_3") < order.index("wait_tensor_1") < order.index("mm_4")
    assert order.index("mm_4") < order.index("wait_tensor") < order.index("add")
