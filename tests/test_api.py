"""Public API: budgets and their errors, config, preview, Plan JSON, graph breaks, tags."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from helpers.steps import UNIT, MiB, budget_log, chain, compile_with, grads_of
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

import budget
from budget.core.sizes import format_bytes, parse_budget


@pytest.fixture
def chain_args():
    torch.manual_seed(0)
    return [torch.randn(512, 512, requires_grad=True) for _ in range(6)]


@pytest.mark.parametrize(
    "text,nbytes",
    [
        ("36MiB", 36 * MiB),
        ("36.02MiB", math.floor(36.02 * MiB)),
        ("2GB", 2 * 10**9),
        ("1.5GiB", 3 * 2**29),
        ("123456B", 123456),
        ("512 KiB", 512 * 1024),
    ],
)
def test_sizes_parse(text, nbytes):
    assert parse_budget(text).nbytes == nbytes


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [
        (999, "999 B"),
        (1000, "0.98 KiB"),
        (36 * MiB, "36.00 MiB"),
        (1012 * 1024, "0.99 MiB"),  # not '1012.00 KiB': a table's 10 columns hold every size
        (999 * 1024, "999.00 KiB"),
        (1024 * 1000 - 1, "0.98 MiB"),  # 999.999 KiB would print as 1000.00
        (1000 * MiB, "0.98 GiB"),
    ],
)
def test_sizes_print_in_at_most_ten_characters_and_parse_back_near(nbytes, text):
    assert format_bytes(nbytes) == text and len(text) <= 10
    assert abs(parse_budget(text).nbytes - nbytes) <= 0.005 * parse_budget(text).nbytes + 1


@pytest.mark.parametrize(
    "bad", [float("nan"), -0.1, 1.5, "lots", "12", "3 parsecs", "-1MiB", True, None, [0.5], -0.0]
)
def test_invalid_budgets_say_what_is_allowed(bad):
    with pytest.raises(ValueError, match="fraction in \\[0, 1\\]|unknown unit"):
        parse_budget(bad)
    if bad is not None:  # None means "from budget.config"
        with pytest.raises(ValueError):
            budget.backend(bad)


def test_config_validates_on_assignment_and_patch_restores():
    before = budget.config.activation_memory_budget
    with pytest.raises(ValueError, match="fraction in"):
        budget.config.activation_memory_budget = 1.5
    assert budget.config.activation_memory_budget == before
    with budget.config.patch(activation_memory_budget=0.3, solver="auto"):
        assert budget.config.activation_memory_budget == 0.3
    assert budget.config.activation_memory_budget == before

    @budget.config.patch(activation_memory_budget="8MiB")
    def inner():
        return budget.config.activation_memory_budget

    assert inner() == "8MiB" and budget.config.activation_memory_budget == before
    with pytest.raises(AttributeError, match="options"):
        budget.config.no_such_option = 1
    with pytest.raises(ValueError, match="peak_search must be one of 'grid', 'exact'"):
        budget.config.peak_search = "fast"
    assert budget.config.peak_search == "grid"
    with pytest.raises(
        ValueError, match="buffer_reuse must be 'neutral', True or False; got 'yes'"
    ):
        budget.config.buffer_reuse = "yes"
    assert budget.config.buffer_reuse == "neutral"
    with budget.config.patch(buffer_reuse=False):
        assert budget.config.buffer_reuse is False
    for wrong in (0, 2.5, True, "32"):
        with pytest.raises(ValueError, match="fusion_distance must be a whole number of places"):
            budget.config.fusion_distance = wrong
    assert budget.config.fusion_distance == 32
    with budget.config.patch(fusion_distance=None):
        assert budget.config.fusion_distance is None


def test_backend_reads_config_when_unset(chain_args):
    with budget.config.patch(activation_memory_budget=0.2):
        be = budget.backend(compiler="eager")
    f = torch.compile(chain, backend=be)
    f(*chain_args).backward()
    assert be.plans[0].saved_bytes == 2 * MiB


def test_unknown_solver_estimator_compiler():
    with pytest.raises(ValueError, match="unknown solver 'nope'; available: .*ilp"):
        budget.backend(0.5, solver="nope")
    with pytest.raises(ValueError, match="unknown estimator 'nope'; available: flops"):
        budget.backend(0.5, estimator="nope")
    with pytest.raises(ValueError, match="unknown compiler 'tvm'; available: inductor, eager"):
        budget.backend(0.5, compiler="tvm")
    with pytest.raises(ValueError, match="unknown solver"):
        budget.config.solver = "nope"
    for bad in (0, -5, float("nan"), "1s"):
        with pytest.raises(ValueError, match="time_limit must be a positive number"):
            budget.backend(0.5, time_limit=bad)


def test_unreachable_size_names_the_minimum():
    torch.manual_seed(0)
    w = torch.randn(64, 64, requires_grad=True)

    def step(x):  # dropout's mask can't be recomputed, so some memory must be saved
        return F.dropout(torch.mm(x, w), p=0.5, training=True).sum()

    with pytest.raises(
        budget.BudgetTooSmallError, match=r"smallest reachable .* 4.00 KiB \(4096 bytes\)"
    ) as e:
        # eager: the mask is saved (Inductor replays its seeded RNG and saves only the seed)
        budget.plan(step, torch.randn(64, 64), memory_budget="1KiB", compiler="eager")
    assert e.value.min_bytes == 4096


def test_preview_matches_training_and_runs_nothing(chain_args):
    before = [t.clone() for t in chain_args]
    plan = budget.plan(chain, *chain_args, memory_budget=0.3)
    assert isinstance(plan, budget.Plan)
    assert (plan.saved_bytes, plan.recompute_flops) == (3 * MiB, 2 * UNIT)
    assert plan.min_bytes == 0 and plan.max_bytes == 10 * MiB and plan.target_bytes == 3 * MiB
    assert plan.status == "optimal" and plan.solver == "auto" and plan.estimator == "flops"
    assert plan.torch_version == torch.__version__ and len(plan.graph_hash) == 16
    assert set(plan.timings) == {"classify", "estimate", "solve", "tie-break", "partition"}
    assert all(t.grad is None for t in chain_args)
    assert all(torch.equal(a, b) for a, b in zip(before, chain_args, strict=True))
    f, be = compile_with(chain, 0.3)
    f(*chain_args).backward()
    trained = be.plans[0]
    assert (trained.saved, trained.recomputed) == (plan.saved, plan.recomputed)


def test_previews_of_one_step_never_reach_dynamos_recompile_limit(chain_args):
    """Each preview compiles the step afresh; what it compiled is dropped after, so a
    notebook may preview one step more times than dynamo recompiles a frame. A user's own
    compile of the step keeps its compiled version."""
    f, be = compile_with(chain, 0.3)
    f(*chain_args).backward()
    with torch._dynamo.config.patch(recompile_limit=2):
        plans = [budget.plan(chain, *chain_args, memory_budget=b) for b in (0.3, 0.5, 0.3, 0.5)]
        assert [p.saved_bytes for p in plans] == [3 * MiB, 5 * MiB, 3 * MiB, 5 * MiB]
        f(*chain_args).backward()  # the training compile's version is still there
    assert len(be.plans) == 1


def test_plan_json_round_trip_and_str(chain_args):
    plan = budget.plan(chain, *chain_args, memory_budget="4MiB")
    again = budget.Plan.from_json(plan.to_json())
    assert again == plan
    text = str(plan)
    assert "4.00 MiB" in text and "recompute" in text and plan.graph_hash in text
    with pytest.raises(ValueError, match="not a budget plan"):
        budget.Plan.from_json("[1, 2]")
    with pytest.raises(ValueError, match="version 99 is not supported"):
        budget.Plan.from_json(plan.to_json().replace(f'"version": {plan.version}', '"version": 99'))


def test_graph_breaks_give_one_plan_per_graph():
    torch.manual_seed(0)
    w1, w2 = (torch.randn(256, 256, requires_grad=True) for _ in range(2))

    def step(x):
        h = torch.mm(x, w1).cos()
        torch._dynamo.graph_break()
        return torch.mm(h, w2).cos().sum()

    x = torch.randn(256, 256)
    plans = budget.plans(step, x, memory_budget=0.0)
    assert len(plans) == 2 and plans[0].graph_hash != plans[1].graph_hash
    _, ref = grads_of(step, [w1, w2], x)
    f, be = compile_with(step, 0.0)
    with budget_log() as logged:
        _, got = grads_of(f, [w1, w2], x)
    assert len(be.plans) == 2
    # each graph's plan is logged as it is made, on the budget logger
    assert [m.split(":")[0] for m in logged] == [
        f"planned graph {p.graph_hash[:8]} (eager)" for p in be.plans
    ]
    assert "ends at a graph break" in logged[0] and "graph break" not in logged[1]
    for g, r in zip(got, ref, strict=True):
        torch.testing.assert_close(g, r)


def test_no_grad_step_is_a_clear_error():
    with pytest.raises(ValueError, match="nothing in the step requires grad"):
        budget.plan(lambda x: x.cos().sum(), torch.randn(4))


def test_a_step_dynamo_makes_no_graph_of_is_a_clear_error_naming_the_eager_path():
    """Dynamo does not trace nn.LSTM, and a graph break in a loop runs the whole frame
    eagerly: no graph at all, which the preview says (and how to plan it instead)."""
    layers = torch.nn.ModuleList(torch.nn.LSTM(8, 8, batch_first=True) for _ in range(2))

    def step(x):  # type: ignore[no-untyped-def]
        for layer in layers:
            x = layer(x)[0]
        return x.sum()

    with pytest.raises(budget.PreviewError, match="made no graph.*budget.apply") as e:
        budget.plans(step, torch.randn(2, 4, 8), memory_budget=0.5)
    assert "nn.LSTM" in str(e.value)


def _policy(ctx, op, *args, **kwargs):
    return (
        CheckpointPolicy.MUST_SAVE
        if op is torch.ops.aten.mm.default
        else CheckpointPolicy.PREFER_RECOMPUTE
    )


def test_selective_checkpoint_tags_are_honoured(chain_args):
    ctx = lambda: create_selective_checkpoint_contexts(_policy)  # noqa: E731

    def step(x, *ws):
        return checkpoint(chain, x, *ws, use_reentrant=False, context_fn=ctx)

    for b in (1.0, 0.0):
        plan = budget.plan(step, *chain_args, memory_budget=b)
        decided = {d.name: d.decision for d in plan.decisions}
        mms = {d.name: d.decision for d in plan.decisions if d.op == "aten.mm.default"}
        assert mms and set(mms.values()) == {"save"}, (b, mms)  # MUST_SAVE: never recomputed
        cos = [n for n in decided if n.startswith("cos")]
        assert cos and all(decided[n] == "recompute" for n in cos)  # PREFER_RECOMPUTE: never saved
        assert plan.recompute_flops == 0
    _, ref = grads_of(chain, chain_args, *chain_args)
    f, _ = compile_with(step, 0.0)
    _, got = grads_of(f, chain_args, *chain_args)
    for g, r in zip(got, ref, strict=True):
        torch.testing.assert_close(g, r)


def test_cpu_attention_without_dropout_may_be_recomputed():
    """The CPU SDPA op carries nondeterministic_seeded even at dropout_p=0; it is not random."""
    torch.manual_seed(0)
    wq = torch.randn(32, 32, requires_grad=True)
    x = torch.randn(2, 4, 64, 32)

    def step(x):
        q = torch.matmul(x, wq)
        return F.scaled_dot_product_attention(q, q, q).exp().sum()

    plan = budget.plan(step, x, memory_budget=0.0)
    attn = [d for d in plan.decisions if "scaled_dot_product" in d.op]
    assert attn and all(d.decision == "recompute" for d in attn)
    assert plan.saved_bytes == 0
    # and it is priced: 4 * B * H * L * S * E FLOPs for the two attention matmuls
    assert sum(d.flops for d in attn) == 4 * 2 * 4 * 64 * 64 * 32


_DETERMINISM_SCRIPT = """
import json, torch, budget
torch.manual_seed(0)
args = [torch.randn(256, 256, requires_grad=True) for _ in range(9)]
def chain(x, *ws):
    x = x.cos()
    for w in ws:
        x = torch.mm(x, w).cos()
    return x.sum()
plan = budget.plan(chain, *args, memory_budget=0.45)
print(json.dumps([plan.saved, plan.recomputed, plan.graph_hash]))
"""


def test_same_plan_in_every_process(tmp_path):
    """Every rank of a job must make the same choice, ties included (8 layers, 4 saved).
    Two processes at once, each with a cache directory of its own: neither reads the
    other's plan."""
    import os
    import subprocess
    import sys

    children = [
        subprocess.Popen(
            [sys.executable, "-c", _DETERMINISM_SCRIPT],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "BUDGET_CACHE_DIR": str(tmp_path / str(k))},
        )
        for k in range(2)
    ]
    runs = [child.communicate(timeout=300)[0] for child in children]
    assert all(child.returncode == 0 for child in children)
    assert runs[0] == runs[1] and runs[0].strip()


def test_sweep_plans_many_budgets_from_one_trace(chain_args):
    budgets = [1.0, 0.7, 0.5, 0.3, 0.0, "2MiB"]
    plans = budget.sweep(chain, *chain_args, budgets=budgets)
    assert [p.budget for p in plans] == [1.0, 0.7, 0.5, 0.3, 0.0, f"{2 * MiB}B"]
    assert [p.saved_bytes // MiB for p in plans] == [10, 5, 5, 3, 0, 2]
    assert [p.recompute_flops / UNIT for p in plans] == [0, 0, 0, 2, 5, 3]
    assert "ends" in plans[0].timings  # the two ends are solved once, for the first plan
    # each equals what a single preview gives
    single = budget.plan(chain, *chain_args, memory_budget=0.3)
    assert (single.saved, single.recomputed) == (plans[3].saved, plans[3].recomputed)
    for compile in (False, True):
        with pytest.raises(ValueError, match="at least one budget"):
            budget.sweep(chain, *chain_args, budgets=[], compile=compile)


def test_time_limit_never_gives_a_plan_over_budget():
    """Whatever the clock does, a time-limited solve is optimal, feasible with its gap,
    or a clear error; it is never over its target."""
    from budget.models import get_builtin
    from budget.solvers import SolverTimeout

    ex = get_builtin("gpt", layers=2, d=64, seq=64)
    try:
        plans = budget.sweep(ex.step, *ex.args, budgets=[0.45, 0.3], time_limit=0.01)
    except SolverTimeout as e:
        assert "raise the time limit" in str(e) and "budget.config.time_limit" in str(e)
        return
    for p in plans:
        assert p.saved_bytes <= p.target_bytes
        assert p.status in ("optimal", "feasible")


def test_measured_flops_price_cpu_attention_like_the_estimator():
    """torch's counter gives CPU attention 0 FLOPs; budget.runtime.measure uses the estimator's table."""
    from budget.runtime.measure import backward_flops

    q = torch.randn(2, 4, 64, 32, requires_grad=True)
    priced = backward_flops(F.scaled_dot_product_attention(q, q, q).sum())
    q.grad = None
    raw = backward_flops(F.scaled_dot_product_attention(q, q, q).sum(), fill_gaps=False)
    assert raw == 0
    assert priced == 5 * (2 * 2 * 4 * 64 * 64 * 32)  # five B*H*L*S*E matmuls, 2 FLOPs each


def test_module_names_are_modtrackers():
    """Decisions name their module as torch's ModTracker does (root class, then attributes)."""
    from torch.distributed._tools.mod_tracker import ModTracker

    from budget.models import get_builtin

    ex = get_builtin("gpt", layers=1, d=32, heads=2, seq=16, batch=2, vocab=64)
    tracked: set[str] = set()
    with ModTracker() as mt:
        mt.register_user_hooks(pre_fw_hook=lambda m, _: tracked.add(mt._get_mod_name(m)))
        ex.step(*ex.args)
    plan = budget.plan(ex.step, *ex.args, memory_budget=0.5, compiler="eager")
    modules = {d.module for d in plan.decisions} - {""}
    assert "GPT.blocks.0.attn" in modules
    assert modules <= tracked, modules - tracked


def test_a_timeout_says_where_the_time_limit_is_set(capsys):
    """Solvers only say 'raise the time limit'; the library names its options, the
    command line its flag."""
    from budget.cli import main
    from budget.errors import SolverTimeout
    from budget.models import get_builtin
    from budget.solvers import _SOLVERS, register_solver
    from budget.solvers.base import Request, Search, SolverBase

    class Slow(SolverBase):
        name = "slow-test"
        exact = True
        requires = "numpy"

        def _search(self, request: Request) -> Search:
            raise SolverTimeout("no plan in time; raise the time limit")

    register_solver(Slow)
    try:
        ex = get_builtin("mlp", batch=4, d_in=8, d=16, layers=1)
        with pytest.raises(SolverTimeout, match=r"time_limit= .* budget\.config\.time_limit"):
            budget.plan(ex.step, *ex.args, memory_budget=0.5, solver="slow-test", compiler="eager")
        flags = ["--batch", "4", "--d-in", "8", "--d", "16", "--layers", "1", "--budget", "0.5"]
        code = main(["solve", "builtin:mlp", *flags, "--solver", "slow-test"])
        assert code == 1 and "--time-limit SECONDS" in capsys.readouterr().err
    finally:
        del _SOLVERS["slow-test"]


def test_the_inductor_partitioner_key_changes_with_every_setting_of_a_plan():
    """torch's compile caches key on this uuid: two settings that can give different plans
    must never share one (sizes to the byte, saved plans by what they save)."""
    from budget.compile.inductor_hooks import InductorPartitioner
    from budget.core.plan import Decision

    def key(**kw):
        return InductorPartitioner(budget.backend(**kw)).uuid()

    assert key(memory_budget="512MiB") == key(memory_budget="512MiB")
    assert key(memory_budget="512MiB") != key(memory_budget=f"{512 * 2**20 + 1000}B")
    assert key(memory_budget=0.5) != key(memory_budget=0.5, peak_memory_budget="1GiB")
    assert key(memory_budget=0.5) != key(memory_budget=0.5, compiler="eager")
    assert key(memory_budget=0.5, time_limit=1) != key(memory_budget=0.5, time_limit=2)
    from helpers.plans import make_plan

    a = make_plan()
    b = make_plan(decisions=[Decision("mm", "aten.mm.default", 8, 0.0, 0.0, "recompute")])
    assert a.graph_hash == b.graph_hash and a.saved != b.saved
    assert key(plan=[a]) != key(plan=[b])


OPTIONS = {
    "memory_budget",
    "peak_memory_budget",
    "solver",
    "estimator",
    "time_limit",
    "peak_search",
}


def test_every_planning_entry_point_takes_every_option():
    """backend, plan, plans, apply and the eager plan take the same options (the one
    resolver, budget.planning.options, reads them); none falls into example kwargs."""
    import inspect

    from budget.eager.apply import plan as eager_plan

    for entry in (budget.backend, budget.plan, budget.plans, budget.apply, eager_plan):
        missing = OPTIONS - set(inspect.signature(entry).parameters)
        assert not missing, f"{entry.__module__}.{entry.__name__} lacks {sorted(missing)}"


def test_options_are_checked_once_by_the_resolver():
    model = torch.nn.Linear(4, 4)
    with pytest.raises(ValueError, match="peak_search must be one of 'grid', 'exact'"):
        budget.plan(lambda x: model(x).sum(), torch.randn(2, 4), peak_search="fast")
    with pytest.raises(ValueError, match="peak_search must be one of 'grid', 'exact'"):
        budget.apply(model, torch.randn(2, 4), peak_search="fast")
    with pytest.raises(ValueError, match="budget.apply searches a grid of eager plans"):
        budget.apply(model, torch.randn(2, 4), peak_memory_budget="1MiB", peak_search="exact")
    with pytest.raises(ValueError, match="or plan, not both"):
        budget.backend(0.5, plan=[])
