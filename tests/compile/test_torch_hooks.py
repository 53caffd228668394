"""budget's estimator and exact knapsack inside torch's own memory-budget partitioner."""

from __future__ import annotations

import torch
import torch._functorch.config as fconfig

from budget.compile.torch_hooks import KnapsackSolver, RuntimeEstimator
from budget.models import get_builtin
from budget.runtime.measure import measure_step


def _measured(ex, **patch):
    torch._dynamo.reset()
    ex.model.zero_grad(set_to_none=True)
    exclude = list(ex.model.parameters()) + list(ex.model.buffers())
    with fconfig.patch(**patch):
        step = torch.compile(ex.step, backend="aot_eager_decomp_partition")
        return measure_step(step, *ex.args, exclude=exclude)


def test_torch_takes_budgets_solver_and_estimator_and_keeps_its_budget():
    """At torch's fraction 0.3 the step with budget's hooks saves no more than torch's own
    dp solver there (measured), and computes the same gradients' worth of FLOPs or fewer."""
    ex = get_builtin("gpt", layers=2, d=64, heads=2, seq=64, batch=2, vocab=256)
    theirs = _measured(ex, activation_memory_budget=0.3)
    ours = _measured(
        ex,
        activation_memory_budget=0.3,
        activation_memory_budget_solver=KnapsackSolver("flops"),
        activation_memory_budget_runtime_estimator=RuntimeEstimator("flops"),
    )
    assert ours.saved_bytes <= theirs.saved_bytes
    assert ours.backward_flops <= theirs.backward_flops


def test_uuids_name_what_changes_a_plan():
    assert KnapsackSolver("flops").uuid() != KnapsackSolver("roofline").uuid()
    assert KnapsackSolver("flops", 1).uuid() != KnapsackSolver("flops", 2).uuid()
    assert RuntimeEstimator("flops").uuid() == RuntimeEstimator("flops").uuid()
    assert RuntimeEstimator("flops").uuid() != RuntimeEstimator("roofline:h100").uuid()


def test_the_solver_respects_torchs_memory_limit():
    """torch hands normalised memories and a limit; what is kept fits under it."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x):
        return x.cos().sin().exp().tanh()

    graph = make_fx(f)(torch.randn(8, 8)).graph
    nodes = [n for n in graph.nodes if n.op == "call_function"]
    memory = [0.5, 0.25, 0.125, 0.125]
    saved, recomputed = KnapsackSolver("unit")(memory, None, 0.4, None, nodes)
    assert sorted(saved + recomputed) == [0, 1, 2, 3]
    assert sum(memory[i] for i in saved) <= 0.4
    assert len(saved) == 2  # unit costs: keep as many nodes as fit (0.25 + 0.125)
